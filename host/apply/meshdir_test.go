package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"mesh/host/dirlock"
	"mesh/host/identity"
)

// TestNoDeclarationWritesIntoTheMeshsOwnDirectories: a managed root that holds a
// control node's data directory or an agent's state directory let a declaration
// overwrite the CA key or the agent's identity, and remove them (a review: one
// mesh's operators decided what another's agent trusts). A declared path through
// such a directory, or in a root that is one, is refused, nothing written; a path no
// longer declared there is left in place; a directory with a lock file alone (an
// application's) is written as any other.
func TestNoDeclarationWritesIntoTheMeshsOwnDirectories(t *testing.T) {
	for _, guarded := range []bool{false, true} {
		t.Run(map[bool]string{false: "unguarded", true: "as the agent applies"}[guarded], func(t *testing.T) {
			noMeshDirectoryWrites(t, guarded)
		})
	}
}

func noMeshDirectoryWrites(t *testing.T, guarded bool) {
	write := func(t *testing.T, p, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	write(t, filepath.Join(root, "cp", "lock"), `{"pid":1,"command":"meshctl serve"}`)
	write(t, filepath.Join(root, "cp", "mesh.json"), "{}")
	write(t, filepath.Join(root, "cp", "ca-key.pem"), "the CA key")
	write(t, filepath.Join(root, "agent", "lock"), "")
	write(t, filepath.Join(root, "agent", "identity.json"), "{}")
	write(t, filepath.Join(root, "app", "lock"), "")
	a := FileApplier{Root: root}
	if guarded {
		a.Guard = new(RootGuard)
		// A directory written in first, then one of the programs' made beside
		// it: the one found clean is remembered, the new one is looked at.
		if _, err := a.Apply(context.Background(), []File{{Path: "app/first", Data: []byte("x"), Mode: 0o644}}, nil); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(root, "late", "lock"), "")
		write(t, filepath.Join(root, "late", "mesh.json"), "{}")
		if _, err := a.Apply(context.Background(), []File{{Path: "late/ca-key.pem", Data: []byte("x"), Mode: 0o644}}, nil); !errors.Is(err, ErrMeshDirectory) {
			t.Fatalf("a data directory made after the agent wrote beside it: %v, want ErrMeshDirectory", err)
		}
	}
	for _, p := range []string{"cp/ca-key.pem", "cp/raft/raft.db", "agent/identity.json"} {
		_, err := a.Apply(context.Background(), []File{{Path: p, Data: []byte("owned"), Mode: 0o600}}, nil)
		if !errors.Is(err, ErrMeshDirectory) {
			t.Errorf("declaring %s: %v, want ErrMeshDirectory", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "cp", "ca-key.pem")); string(b) != "the CA key" {
		t.Fatalf("the CA key became %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "cp", "raft")); err == nil {
		t.Fatal("a directory was made in the data directory")
	}
	// Managed before (by an older agent), no longer declared: left in place.
	res, err := a.Apply(context.Background(), []File{{Path: "app/conf", Data: []byte("x"), Mode: 0o644}}, []string{"cp/ca-key.pem"})
	if err != nil {
		t.Fatalf("an application's directory with a lock file: %v", err)
	}
	if len(res.Left) != 1 || res.Left[0].Path != "cp/ca-key.pem" {
		t.Fatalf("the CA key no longer declared: left %+v, want it left in place", res.Left)
	}
	if _, err := os.Stat(filepath.Join(root, "cp", "ca-key.pem")); err != nil {
		t.Fatalf("the CA key no longer declared was removed: %v", err)
	}
	// The root itself a control node's data directory.
	if _, err := (FileApplier{Root: filepath.Join(root, "cp")}).Apply(context.Background(), []File{{Path: "x", Data: []byte("x"), Mode: 0o644}}, nil); !errors.Is(err, ErrMeshDirectory) {
		t.Fatalf("a root that is a data directory: %v, want ErrMeshDirectory", err)
	}
}

// TestMeshDirectoryNamesAreThePrograms: the names the applier knows the mesh's own
// directories by are the ones the programs write.
func TestMeshDirectoryNamesAreThePrograms(t *testing.T) {
	if meshLockFile != dirlock.File || !slices.Contains(meshDirectoryFiles, identity.FileName) || !slices.Contains(meshDirectoryFiles, identity.PendingFileName) {
		t.Fatalf("lock %q (dirlock %q), files %v (identity %q, %q)", meshLockFile, dirlock.File, meshDirectoryFiles, identity.FileName, identity.PendingFileName)
	}
}
