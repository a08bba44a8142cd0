package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestEnrolRefusesADirectoryOfOtherFiles: `meshhost enrol --state /etc` (or a home
// directory, a typo's) enrolled there, writing its identity, state and lock among
// files that are not meshhost's (a CLI audit). A directory that holds files and none
// of meshhost's is refused, exit 5, naming some of them, and nothing is written; an
// empty one, one holding an earlier enrolment's files (a pending key, a revocation
// record), or only lost+found (a file system of its own) is not refused for it.
func TestEnrolRefusesADirectoryOfOtherFiles(t *testing.T) {
	mk := func(t *testing.T, names ...string) string {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	listing := func(dir string) []string {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names
	}
	for _, others := range [][]string{{"notes.txt"}, {"passwd", "group", "hosts", "fstab"}} {
		dir := mk(t, others...)
		before := listing(dir)
		code, _, stderr := runCLI("not a token", nil, "enrol", "--state", dir)
		if code != exitIdentity || !strings.Contains(stderr, "nothing of meshhost's") || !strings.Contains(stderr, slices.Min(others)) {
			t.Errorf("enrol into a directory of %v: exit %d, want %d naming them:\n%s", others, code, exitIdentity, stderr)
		}
		if after := listing(dir); !slices.Equal(after, before) {
			t.Errorf("the refused enrolment wrote into the directory: %v, then %v", before, after)
		}
	}
	// Hidden files (a .keep a configuration tool leaves) do not count: /etc and a
	// home directory always hold more (a review: a directory of a .gitkeep alone
	// was refused).
	for _, own := range [][]string{nil, {"enrol-pending.json"}, {"revoked.json", "notes.txt"}, {"lost+found"}, {".gitkeep", ".keep"}} {
		dir := mk(t, own...)
		if own != nil && own[0] == "lost+found" {
			os.Remove(filepath.Join(dir, "lost+found"))
			os.Mkdir(filepath.Join(dir, "lost+found"), 0o700)
		}
		_, _, stderr := runCLI("not a token", nil, "enrol", "--state", dir)
		if strings.Contains(stderr, "nothing of meshhost's") {
			t.Errorf("enrol into a directory of %v refused as not meshhost's:\n%s", own, stderr)
		}
	}
	// The token file enrolling from the directory is not another file.
	dir := mk(t, "token.txt")
	_, _, stderr := runCLI("", nil, "enrol", "--state", dir, "--token-file", filepath.Join(dir, "token.txt"))
	if strings.Contains(stderr, "nothing of meshhost's") {
		t.Errorf("enrol with its token file in the directory refused as not meshhost's:\n%s", stderr)
	}
}

// TestEnrolRefusesAControlNodesDataDirectory: a control node's data directory holds a
// lock file named as meshhost's own, which made it pass for an earlier enrolment's:
// the host's identity went in beside the CA key, and serve and the agent then locked
// each other out for good (a review). It is refused, exit 5, nothing written.
func TestEnrolRefusesAControlNodesDataDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	if err := os.MkdirAll(filepath.Join(dir, "raft"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"lock", "mesh.json", "ca-key.pem"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, _, stderr := runCLI("not a token", nil, "enrol", "--state", dir)
	if code != exitIdentity || !strings.Contains(stderr, "is a control node's data directory") {
		t.Fatalf("enrol into a control node's data directory: exit %d, want %d saying what it is:\n%s", code, exitIdentity, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "identity.json")); err == nil {
		t.Fatal("the refused enrolment wrote its identity there")
	}
}
