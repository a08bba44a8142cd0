package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotEnrolledSaysHowToEnrol: status, run and hooks retry on a state directory
// that holds no identity, or that does not exist, say the same: this machine has not
// enrolled, and the enrolment to run, on that directory (exit 5). status said
// "identity: this machine has not enrolled (there is no …)", a package's prefix and
// no next step; hooks retry said "stat DIR: no such file or directory", exit 1, for a
// directory that does not exist.
func TestNotEnrolledSaysHowToEnrol(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	root := filepath.Join(base, "root")
	for name, dir := range map[string]string{
		"empty":            t.TempDir(),
		"missing":          filepath.Join(base, "nonexist"),
		"missing relative": "h1",
	} {
		for _, args := range [][]string{
			{"status", "--state", dir},
			{"status", "--state", dir, "--json"},
			{"run", "--state", dir, "--root", root},
			{"hooks", "retry", "--state", dir},
		} {
			code, stdout, stderr := runCLI("", nil, args...)
			command := args[0]
			if command == "hooks" {
				command = "hooks retry"
			}
			want := "meshhost " + command + ": this machine has not enrolled (there is no " + filepath.Join(dir, "identity.json") + ")"
			if name != "empty" {
				// Not enrolled is one of two stories then (TestAMissingStateDirectoryMayHaveBeenMoved).
				want = "meshhost " + command + ": the state directory " + dir + " does not exist (so neither does " + filepath.Join(dir, "identity.json") + "): this machine has not enrolled, or"
			}
			next := "meshhost enrol --state " + dir + " < token.txt"
			if code != exitIdentity || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, next) || stdout != "" {
				t.Errorf("%s: %q: exit %d, stdout %q, stderr %q; want %d, %q and %q on stderr", name, args, code, stdout, stderr, exitIdentity, want, next)
			}
		}
	}
}

// TestAMissingStateDirectoryMayHaveBeenMoved: status (run, hooks retry) on a state
// directory that does not exist says it may have been moved or removed under the
// agent that ran with it, and how to put it back, before the enrolment to run if it
// never enrolled. It said "this machine has not enrolled (there is no
// DIR/identity.json): enrol it first", wrong advice for a directory moved away
// under a running agent: the node is enrolled, its key in the directory moved.
func TestAMissingStateDirectoryMayHaveBeenMoved(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state")
	for _, args := range [][]string{{"status", "--state", dir}, {"status", "--state", dir, "--json"}, {"hooks", "retry", "--state", dir}} {
		code, _, stderr := runCLI("", nil, args...)
		if code != exitIdentity {
			t.Errorf("%q: exit %d, want %d: %s", args, code, exitIdentity, stderr)
		}
		moved := strings.Index(stderr, "moved or removed")
		back := strings.Index(stderr, "move it back")
		enrol := strings.Index(stderr, "meshhost enrol --state "+dir+" < token.txt")
		if moved < 0 || back < 0 || enrol < back || !strings.Contains(stderr, `docs/operations.md, "A host fixed by hand"`) {
			t.Errorf("%q: %s\nwant it said the directory may have been moved or removed, how to put it back (docs/operations.md), then the enrolment", args, stderr)
		}
	}
	// A directory that exists and holds no identity was not moved: the enrolment
	// alone is said.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, stderr := runCLI("", nil, "status", "--state", dir); strings.Contains(stderr, "moved") {
		t.Errorf("an existing empty state directory is said to have been moved: %s", stderr)
	}
}
