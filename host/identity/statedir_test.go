//go:build unix

package identity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/host/statedir"
)

// TestLoadRefusesASymlinkedIdentity: someone who can write the state directory swaps
// identity.json for a link to an identity of their own (their CA pin, their signing
// key). The agent refuses it as a link, and never loads the identity it points to.
func TestLoadRefusesASymlinkedIdentity(t *testing.T) {
	state := t.TempDir()
	if err := Save(state, validIdentity(t)); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := Save(theirs, validIdentity(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(Path(state)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(Path(theirs), Path(state)); err != nil {
		t.Fatal(err)
	}
	id, kp, err := LoadKeyPair(state)
	if !errors.Is(err, statedir.ErrSymlink) || outcome(t, err) != "unreadable" || kp != nil || id.Mesh != "" {
		t.Fatalf("got %v (identity %v), want the symbolic-link refusal and no identity", err, id)
	}
	if errors.Is(err, statedir.ErrNotOwned) {
		t.Fatalf("%v also matches ErrNotOwned", err)
	}
	if !strings.Contains(err.Error(), "is a symbolic link") {
		t.Fatalf("the refusal does not say the file is a link: %v", err)
	}
	if err := CheckAbsent(state); !errors.Is(err, statedir.ErrSymlink) {
		t.Fatalf("CheckAbsent: %v, want the refusal (a link is not an absent identity)", err)
	}
}

func TestLoadRefusesAnotherUsersIdentity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving the identity file to another user (chown to 65534) needs root")
	}
	state := t.TempDir()
	if err := Save(state, validIdentity(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(Path(state), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(state); !errors.Is(err, statedir.ErrNotOwned) || outcome(t, err) != "unreadable" {
		t.Fatalf("got %v, want the refusal of another user's file", err)
	}
}

// TestSaveRefusesAnUnsafeStateDirectory: neither the identity nor the pending key is
// written into a directory others may write.
func TestSaveRefusesAnUnsafeStateDirectory(t *testing.T) {
	state := t.TempDir()
	if err := os.Chmod(state, 0o770); err != nil {
		t.Fatal(err)
	}
	if err := Save(state, validIdentity(t)); !errors.Is(err, statedir.ErrUnsafe) {
		t.Fatalf("Save: %v, want statedir.ErrUnsafe", err)
	}
	seed, _ := userSeed(t)
	p := Pending{Mesh: "demo", Node: "web-1", TokenHash: strings.Repeat("ab", 32), Seed: Secret(seed), CreatedAt: validIdentity(t).EnrolledAt}
	if err := SavePending(state, p); !errors.Is(err, statedir.ErrUnsafe) {
		t.Fatalf("SavePending: %v, want statedir.ErrUnsafe", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Fatalf("something was written: %v", entries)
	}
}
