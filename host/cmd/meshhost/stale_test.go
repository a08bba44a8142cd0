package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStaleTemporaryFilesRemoved: meshhost enrol killed, or the machine losing
// power, between writing the identity's temporary file and renaming it left
// .identity.json.tmp-N in the state directory for good (1 kill in 30 in a loop of
// kills): a copy of the node's key that stayed after identity.json was removed by
// hand to enrol afresh. Taking the state directory's lock now removes such files.
func TestStaleTemporaryFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".identity.json.tmp-792982105")
	if err := os.WriteFile(stale, []byte(`{"nkey_seed":"SU`), 0o600); err != nil {
		t.Fatal(err)
	}
	// Not enrolled: run stops once it has taken the lock and looked for the identity.
	if code, _, stderr := runCLI("", nil, "run", "--state", dir, "--root", filepath.Join(t.TempDir(), "root")); code != exitIdentity {
		t.Fatalf("run with no identity: exit %d: %s", code, stderr)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale temporary file is still there (%v)", err)
	}
}

// TestStaleTemporaryFilesRemovedByEnrol: enrol takes the same lock, and removes them
// too, before it tries the mesh (here unreachable: exit 7).
func TestStaleTemporaryFilesRemovedByEnrol(t *testing.T) {
	tok, _ := realToken(t)
	dir := t.TempDir()
	stale := filepath.Join(dir, ".identity.json.tmp-792982105")
	if err := os.WriteFile(stale, []byte(`{"nkey_seed":"SU`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(tok, nil, "enrol", "--state", dir, "--timeout", "1s"); code == exitOK || code == exitIdentity {
		t.Fatalf("enrol against no mesh: exit %d: %s", code, stderr)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale temporary file is still there after enrol (%v)", err)
	}
}
