package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/join"
	"mesh/controlplane/pki"
)

// TestJoinTokenInputs: `--token-file -` reads the token on stdin, as `declare
// --file -` reads the body (it was "open -: no such file or directory", exit 1), and
// MESH_TOKEN does not win over it. Every token input that cannot be a token (a file
// that does not exist, said so; a directory, a device; empty, cut short or over the
// cap; from a file, from '-' or from stdin) exits 4, as join's help says, where the
// missing file and the device exited 1; nothing is made.
func TestJoinTokenInputs(t *testing.T) {
	base := t.TempDir()
	cio := &cliIO{stdin: strings.NewReader("mesh1_from_stdin\n"), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{},
		getenv: func(k string) string {
			if k == "MESH_TOKEN" {
				return "mesh1_from_env"
			}
			return ""
		}}
	if text, err := readSecretInput("-", cio); err != nil || text != "mesh1_from_stdin\n" {
		t.Errorf(`readSecretInput("-") = %q, %v; want what is on stdin`, text, err)
	}

	empty := filepath.Join(base, "empty.txt")
	writeTestFile(t, empty, "")
	cut := filepath.Join(base, "cut.txt")
	writeTestFile(t, cut, "mesh1_demo_127.0.0.1:17300_")
	huge := filepath.Join(base, "huge.txt")
	writeTestFile(t, huge, strings.Repeat("x", 20<<10))
	missing := filepath.Join(base, "nosuch.txt")
	for _, c := range []struct {
		name, stdin string
		args        []string
		says        string
	}{
		{"missing file", "", []string{"--token-file", missing}, "--token-file " + missing + " does not exist"},
		{"directory", "", []string{"--token-file", base}, "is a directory"},
		{"device", "", []string{"--token-file", "/dev/zero"}, "character device"},
		{"empty file", "", []string{"--token-file", empty}, "token"},
		{"cut short", "", []string{"--token-file", cut}, "token"},
		{"huge file", "", []string{"--token-file", huge}, "a token is one line"},
		{"'-', empty", "", []string{"--token-file", "-"}, "token"},
		{"'-', cut short", "mesh1_demo_127.0.0.1:17300_", []string{"--token-file", "-"}, "token"},
		{"'-', huge", strings.Repeat("x", 20<<10), []string{"--token-file", "-"}, "a token is one line"},
		{"stdin, cut short", "mesh1_demo_127.0.0.1:17300_", nil, "token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "device" {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip("no /dev/zero here")
				}
			}
			data := filepath.Join(t.TempDir(), "new")
			var out, errb bytes.Buffer
			code := run(append([]string{"join", "--data", data}, c.args...),
				&cliIO{stdin: strings.NewReader(c.stdin), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
			stderr := errb.String()
			if code != exitRefused || !strings.Contains(stderr, "the token cannot be used") || !strings.Contains(stderr, c.says) || strings.Contains(stderr, "open -") {
				t.Errorf("exit %d, want %d saying the token cannot be used (%q): %s", code, exitRefused, c.says, stderr)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Errorf("the data directory was made: %v", err)
			}
		})
	}
}

// TestJoinWithTwoTokensIsRefused: a control token in MESH_TOKEN and a file on stdin
// (`MESH_TOKEN=… meshctl join < cp2.txt`) is a usage error (exit 2) naming both,
// where MESH_TOKEN won without a word (a CLI audit); nothing is made.
func TestJoinWithTwoTokensIsRefused(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cp2.txt")
	writeTestFile(t, file, "mesh1_another_token\n")
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := filepath.Join(t.TempDir(), "new")
	var out, errb bytes.Buffer
	code := run([]string{"join", "--data", data}, &cliIO{stdin: f, stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == "MESH_TOKEN" {
				return "mesh1_from_env"
			}
			return ""
		}})
	if code != exitUsage || !strings.Contains(errb.String(), "MESH_TOKEN and another on stdin") {
		t.Errorf("exit %d, want %d naming both tokens: %s", code, exitUsage, errb.String())
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("the data directory was made: %v", err)
	}
}

// TestJoinFailuresARunAgainMendsExit3: what the same join run again with the same
// token goes on from exits 3, as the exit codes say of join. A login the mesh's
// brokers refused (the token's connections over their budget, a broker full of
// hosts) was a refusal of the token for good, exit 4; a confirmation the mesh could
// not give (a leader that changed; internal) was rolled back, exit 1; a broker's
// certificates out of their validity by this machine's clock were "unreachable"
// (exit 3). Each is now an error of its own, and exits 3.
func TestJoinFailuresARunAgainMendsExit3(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w (127.0.0.1:7300: login refused). The token was not spent", join.ErrLoginRefused),
		fmt.Errorf("%w; nothing was sent", &pki.ClockError{Now: time.Now(), NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(2 * time.Hour)}),
		fmt.Errorf("%w (%w): nothing was rolled back", join.ErrConfirmLater, &api.Error{Code: api.CodeInternal, Message: "raft: shutdown"}),
		fmt.Errorf("%w (%w): nothing was rolled back", join.ErrConfirmLater, &api.Error{Code: api.CodeUnavailable, Message: "leadership changed during the request; run it again"}),
	} {
		if code := exitCode(io.Discard, "meshctl join", err); code != exitUnreachable {
			t.Errorf("%v: exit %d, want %d", err, code, exitUnreachable)
		}
	}
}

// TestJoinSaysAPipeIsNotRead: MESH_TOKEN beside a pipe on stdin (which may be the
// script running join: a byte read from it was the script's) is taken, saying the
// pipe is not read; the pipe keeps what it held.
func TestJoinSaysAPipeIsNotRead(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w.WriteString("echo next\n")
	w.Close()
	var out, errb bytes.Buffer
	run([]string{"join", "--data", filepath.Join(t.TempDir(), "new")}, &cliIO{stdin: r, stdout: &out, stderr: &errb,
		getenv: func(k string) string {
			if k == "MESH_TOKEN" {
				return "mesh1_from_env"
			}
			return ""
		}})
	if !strings.Contains(errb.String(), "stdin, a pipe, is not read") {
		t.Errorf("join with MESH_TOKEN and a pipe said:\n%s", errb.String())
	}
	if rest, _ := io.ReadAll(r); string(rest) != "echo next\n" {
		t.Errorf("the pipe lost what it held: %q left", rest)
	}
}

// TestJoinSaysATokenFileWinsOverMESH_TOKEN: --token-file comes before MESH_TOKEN,
// and a MESH_TOKEN set (and forgotten, perhaps) was passed over without a word (a
// walkthrough): it is said, and nothing is said without one.
func TestJoinSaysATokenFileWinsOverMESH_TOKEN(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cp-2.txt")
	if err := os.WriteFile(file, []byte("mesh1_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"mesh1_from_env", ""} {
		var errb bytes.Buffer
		got, err := readSecretInput(file, &cliIO{stdin: strings.NewReader(""), stderr: &errb, getenv: func(k string) string {
			if k == "MESH_TOKEN" {
				return env
			}
			return ""
		}})
		if err != nil || strings.TrimSpace(got) != "mesh1_from_file" {
			t.Fatalf("MESH_TOKEN %q: %q, %v; want the file's token", env, got, err)
		}
		if says := strings.Contains(errb.String(), "MESH_TOKEN is set and not read"); says != (env != "") {
			t.Errorf("MESH_TOKEN %q: said %q", env, errb.String())
		}
	}
}
