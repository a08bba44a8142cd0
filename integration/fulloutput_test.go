package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mesh/integration/harness"
)

// TestOutputThatCannotBeWrittenFails: a command whose output cannot be written (a
// full disk under `meshctl nodes > nodes.txt`; /dev/full here) fails, exit 1, saying
// so, whether it prints a table or JSON. Before (a review), the tables of nodes,
// status, control status and signing-key status, and meshhost's status and
// version, exited 0 with nothing written: a script kept an empty file as the
// fleet's list. meshhost enrol, whose enrolment finished, says the machine is
// enrolled; run again, it finds it so.
func TestOutputThatCannotBeWrittenFails(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full to write to: %v", err)
	}
	defer full.Close()
	cp := harness.NewControlPlane(t, bin, "fullout")
	cp.Serve()
	web := harness.NewHost(t, bin, "web-1")
	token := cp.Token("web-1")

	run := func(stdin string, path string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(path, args...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout = full
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, stderr.String()
	}

	code, stderr := run(token, bin.Meshhost, "enrol", "--state", web.State)
	if code != 1 || !strings.Contains(stderr, "this machine is enrolled") || !strings.Contains(stderr, "could not be written") {
		t.Fatalf("meshhost enrol > /dev/full: exit %d, want 1 saying the machine is enrolled but the output could not be written:\n%s", code, stderr)
	}
	if code, stderr := run(token, bin.Meshhost, "enrol", "--state", web.State, "--json"); code != 1 || !strings.Contains(stderr, "this machine is enrolled") {
		t.Fatalf("meshhost enrol --json > /dev/full, run again: exit %d, want 1 saying the machine is enrolled:\n%s", code, stderr)
	}
	if r := web.Enrol(token); r.Code != 0 {
		t.Fatalf("meshhost enrol run again, to a writable output: %s", r.Combined())
	}

	for _, args := range [][]string{
		{"nodes"}, {"nodes", "--json"}, {"nodes", "web-1"}, {"status"}, {"control", "status"}, {"control", "status", "--json"},
		{"signing-key", "status"}, {"token", "list"}, {"version"}, {"--help"},
	} {
		if args[0] != "version" && args[0] != "--help" {
			args = append(args, "--data", cp.Dir)
		}
		code, stderr := run("", bin.Meshctl, args...)
		if code != 1 || !strings.Contains(stderr, "no space left on device") {
			t.Errorf("meshctl %s > /dev/full: exit %d, want 1 naming the write's failure:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
	ports := harness.FreePorts(t, 3)
	data := filepath.Join(t.TempDir(), "cp2")
	code, stderr = run("", bin.Meshctl, "bootstrap", "--mesh", "fullout2", "--data", data, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--raft-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	if code != 1 || !strings.Contains(stderr, "it finished") || !strings.Contains(stderr, "meshctl check") {
		t.Errorf("meshctl bootstrap > /dev/full: exit %d, want 1 saying it finished:\n%s", code, stderr)
	}
	if r := harness.Run(t, "", nil, bin.Meshctl, "check", "--data", data); r.Code != 0 {
		t.Errorf("the data directory bootstrapped with its output lost: %s", r.Combined())
	}
	// Help, and a plan that made nothing, are output like any other: no word of
	// work done.
	for _, c := range []struct {
		path string
		args []string
	}{{bin.Meshhost, []string{"enrol", "--help"}}, {bin.Meshctl, []string{"bootstrap", "--help"}},
		{bin.Meshctl, []string{"bootstrap", "--dry-run", "--mesh", "fullout3", "--data", filepath.Join(t.TempDir(), "cp3"), "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0])}}} {
		if code, stderr := run("", c.path, c.args...); code != 1 || strings.Contains(stderr, "enrolled") || strings.Contains(stderr, "it finished") {
			t.Errorf("%s %s > /dev/full: exit %d, want 1 saying nothing of work done:\n%s", filepath.Base(c.path), strings.Join(c.args, " "), code, stderr)
		}
	}
	data4 := filepath.Join(t.TempDir(), "cp4")
	code, stderr = run("", bin.Meshctl, "bootstrap", "--json", "--mesh", "fullout4", "--data", data4, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--raft-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2]))
	if code != 1 || !strings.Contains(stderr, "it finished") {
		t.Errorf("meshctl bootstrap --json > /dev/full: exit %d, want 1 saying it finished:\n%s", code, stderr)
	}
	for _, args := range [][]string{{"status", "--state", web.State}, {"status", "--state", web.State, "--json"}, {"version"}, {"--help"}} {
		if code, stderr := run("", bin.Meshhost, args...); code != 1 || !strings.Contains(stderr, "no space left on device") {
			t.Errorf("meshhost %s > /dev/full: exit %d, want 1 naming the write's failure:\n%s", strings.Join(args, " "), code, stderr)
		}
	}
}

// TestAChangeWhoseOutputPipeClosedSaysWhatItDid: `meshctl token | reader` whose
// reader had exited was killed by SIGPIPE, exit 141 and no word, the token minted
// and pending with a secret nobody held. A command that changes the mesh says what
// it did and what to do (exit 1); a read-only one keeps SIGPIPE's quiet end, as
// `meshctl nodes | head` expects.
func TestAChangeWhoseOutputPipeClosedSaysWhatItDid(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "pipeout")
	cp.Serve()
	run := func(args ...string) (code int, signalled bool, stderr string) {
		t.Helper()
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		r.Close() // the reader is gone before meshctl writes
		defer w.Close()
		cmd := exec.Command(bin.Meshctl, args...)
		cmd.Stdout = w
		var errBuf bytes.Buffer
		cmd.Stderr = &errBuf
		err = cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), ee.ExitCode() == -1, errBuf.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, false, errBuf.String()
	}
	code, signalled, stderr := run("token", "--node", "web-1", "--data", cp.Dir)
	if code != 1 || !strings.Contains(stderr, "was minted") || !strings.Contains(stderr, "--replace") {
		t.Fatalf("meshctl token | (closed): exit %d (killed by a signal: %v), want 1 saying the token is pending and how to replace it:\n%s", code, signalled, stderr)
	}
	if r := cp.Ctl("token", "list", "--node", "web-1"); r.Code != 0 || !strings.Contains(r.Stdout, "pending") {
		t.Fatalf("the token said to be pending is not: %s", r.Combined())
	}
	code, signalled, stderr = run("nodes", "--data", cp.Dir)
	if !signalled || stderr != "" {
		t.Errorf("meshctl nodes | (closed): exit %d, stderr %q; want SIGPIPE's quiet end", code, stderr)
	}
}
