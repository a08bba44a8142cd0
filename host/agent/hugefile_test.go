package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/state"
	"mesh/host/wire"
)

// TestHugeManagedFileIsAnApplyError: a local user who can write a managed file
// makes it a sparse file of terabytes (`truncate -s 8T`). The next declaration is
// not applied, and that is reported as an apply error the agent tries again; the
// agent does not fall over, no other file is touched, and once the file is moved
// away the retry applies.
func TestHugeManagedFileIsAnApplyError(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	two := func(version uint64, a, b string) []byte {
		env, err := declarations.SignDeclaration(declarations.Declaration{
			Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: version, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
			Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &a}, {Path: "etc/big.conf", Content: &b}}},
		}, f.key)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	if err := f.a.handle(ctx, two(1, "one", "small")); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(f.root, "etc", "big.conf")
	if err := os.Truncate(big, 8<<40); err != nil {
		if !errors.Is(err, syscall.EFBIG) {
			t.Fatal(err)
		}
		if err := os.Truncate(big, 16<<30); err != nil {
			t.Skipf("this file system takes no sparse file this large: %v", err)
		}
	}

	if err := f.a.handle(ctx, two(2, "two", "small again")); err != nil {
		t.Fatalf("the agent stopped: %v", err)
	}
	got := f.a.Applied()
	if got.Version != 1 || got.LastErrorCode != wire.StatusApplyFailed || got.LastErrorVersion != 2 ||
		!strings.Contains(got.LastError, "etc/big.conf") || !strings.Contains(got.LastError, "a managed file may hold") ||
		got.NextAttempt.IsZero() {
		t.Fatalf("after the huge file: %+v", got)
	}
	if persisted, err := state.Load(f.dir); err != nil || persisted.LastErrorCode != wire.StatusApplyFailed {
		t.Fatalf("not persisted: %+v, %v", persisted, err)
	}
	if f.file(t) != "one" {
		t.Fatalf("another managed file changed: %q", f.file(t))
	}
	var pe *apply.PathError
	if _, err := f.a.applier.Apply(ctx, []apply.File{{Path: "etc/big.conf", Mode: 0o644}}, nil); !errors.As(err, &pe) || !errors.Is(err, apply.ErrTooLarge) {
		t.Fatalf("the applier's refusal is %v, want an apply.ErrTooLarge the caller can branch on", err)
	}

	if err := os.Rename(big, filepath.Join(t.TempDir(), "moved")); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, f.a.retry.raw); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.Version != 2 || got.LastErrorCode != "" || f.file(t) != "two" {
		t.Fatalf("after the file was moved away: %+v, file %q", got, f.file(t))
	}
}
