package join

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/host/dirlock"
	"mesh/host/fstest"
	"mesh/tokenfmt"
)

// TestJoinOnAReadOnlyFileSystem: a join whose new data directory would be on a
// read-only file system says so (dirlock.ErrNotWritable: exit 7, "mount it
// read-write"), as bootstrap does; it was mkdir's bare error, exit 1.
func TestJoinOnAReadOnlyFileSystem(t *testing.T) {
	ro := fstest.Small(t, fstest.Options{ReadOnly: true, Mode: 0o700})
	tok := controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	dir := filepath.Join(ro, "cp")
	err := Join(t.Context(), Options{Dir: datadir.Dir(dir), Token: tok})
	if !errors.Is(err, dirlock.ErrNotWritable) || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("join into %s on a read-only file system: %v, want it said as such", dir, err)
	}
}

// TestJoinOnAFullDiskLeavesNothing: a join whose lock finds no room (a full disk)
// says so (exit 7) and takes away the directory it made and the empty lock file in
// it; both were left (a review).
func TestJoinOnAFullDiskLeavesNothing(t *testing.T) {
	mnt := fstest.Small(t, fstest.Options{Full: true, Mode: 0o700})
	tok := controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	dir := filepath.Join(mnt, "cp")
	err := Join(t.Context(), Options{Dir: datadir.Dir(dir), Token: tok})
	if !errors.Is(err, dirlock.ErrNotWritable) {
		t.Fatalf("join on a full disk: %v, want it said as such", err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused join left %s behind (%v)", dir, err)
	}
}
