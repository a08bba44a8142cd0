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
