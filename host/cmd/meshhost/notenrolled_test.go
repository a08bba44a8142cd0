package main

import (
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
			next := "meshhost enrol --state " + dir + " < token.txt"
			if code != exitIdentity || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, next) || stdout != "" {
				t.Errorf("%s: %q: exit %d, stdout %q, stderr %q; want %d, %q and %q on stderr", name, args, code, stdout, stderr, exitIdentity, want, next)
			}
		}
	}
}
