//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStateThatIsNotADirectory: every command given a file as its state directory
// says so, in words, and exits 5. status blamed an identity file that "exists but
// cannot be read" and advised having the node revoked; the others printed the
// file's type as "----------" and exited 1.
func TestStateThatIsNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"status", "--state", file},
		{"run", "--state", file, "--root", filepath.Join(t.TempDir(), "managed")},
		{"enrol", "--state", file},
		{"hooks", "retry", "--state", file},
	} {
		code, _, stderr := refusedAtOnce(t, args...)
		want := "the state directory " + file + " is not a directory: it is a regular file"
		if code != exitIdentity || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, want %d and %q:\n%s", args[0], code, exitIdentity, want, stderr)
		}
		for _, wrong := range []string{"identity file", "revoke", "---"} {
			if strings.Contains(stderr, wrong) {
				t.Errorf("%s: the refusal says %q:\n%s", args[0], wrong, stderr)
			}
		}
	}
}

// cliHelperEnv holds the arguments, separated by the unit separator (0x1f), that a
// re-run of this test binary as another user runs meshhost with
// (TestCLIAsAnotherUserHelper).
const cliHelperEnv = "MESH_TEST_MESHHOST_ARGS"

// TestCLIAsAnotherUserHelper runs meshhost for TestAdviceToAUserWhoMayNotEnter as
// another user; it does nothing in an ordinary run.
func TestCLIAsAnotherUserHelper(t *testing.T) {
	args := os.Getenv(cliHelperEnv)
	if args == "" {
		t.Skip("a helper process of TestAdviceToAUserWhoMayNotEnter")
	}
	code, stdout, stderr := runCLI("", nil, strings.Split(args, "\x1f")...)
	fmt.Printf("EXIT %d\n%s%s", code, stdout, stderr)
}

// TestAdviceToAUserWhoMayNotEnter: meshhost run by hand as a user who may not enter
// the agent's state directory (uid 65534 on root's 0700 directory) is told, by every
// command, to run it as the agent's user. hooks retry, run and enrol told it to chown
// the directory to itself, which would hand the node's private key to that user.
func TestAdviceToAUserWhoMayNotEnter(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running as another user (uid 65534) needs root")
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "meshhost.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	// Behind a directory that user may not pass through: a raw "stat …: permission
	// denied", exit 1, before (a host operations audit).
	locked := filepath.Join(base, "locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	behind := filepath.Join(locked, "state")
	if err := os.Mkdir(behind, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"hooks", "retry", "--state", behind},
		{"status", "--state", behind},
		{"hooks", "retry", "--state", state},
		{"status", "--state", state},
		{"run", "--state", state, "--root", filepath.Join(base, "managed")},
		{"enrol", "--state", state},
	} {
		cmd := exec.Command(bin, "-test.run=^TestCLIAsAnotherUserHelper$")
		cmd.Env = append(os.Environ(), cliHelperEnv+"="+strings.Join(args, "\x1f"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s as uid 65534: %v\n%s", args[0], err, out.String())
		}
		got := out.String()
		if !strings.Contains(got, fmt.Sprintf("EXIT %d\n", exitIdentity)) || !strings.Contains(got, "Run meshhost as the user the agent runs as") {
			t.Errorf("%s as uid 65534: want exit %d and the advice to run as the agent's user:\n%s", args[0], exitIdentity, got)
		}
		if strings.Contains(got, "chown") {
			t.Errorf("%s as uid 65534 is told to chown root's state directory:\n%s", args[0], got)
		}
	}
}
