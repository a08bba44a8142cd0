package pack

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBinary is a program that answers `version --json` with out.
func fakeBinary(t *testing.T, name, out string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\ncat <<'END'\n"+out+"\nEND\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPackageVersion: the packages take the version the binaries report, commit
// and all; binaries of two builds that disagree are refused rather than packaged
// under one name; and binaries without a revision are packaged, with a word that
// every such build gets the same version.
func TestPackageVersion(t *testing.T) {
	ctx := context.Background()
	stamped := `{"program":"p","version":"0.1.0+git20261203145709.7132ef2931ef","revision":"7132ef2931ef3877aff491e23b9dcfa0bd3273a2"}`
	var log strings.Builder
	v, err := PackageVersion(ctx, fakeBinary(t, "meshctl", stamped), fakeBinary(t, "meshhost", stamped), &log)
	if err != nil || v != "0.1.0+git20261203145709.7132ef2931ef" || log.Len() != 0 {
		t.Fatalf("stamped: %q, %v, log %q", v, err, log.String())
	}
	other := `{"program":"p","version":"0.1.0+git20261201100000.0123456789ab","revision":"0123456789abcdef0123456789abcdef01234567"}`
	if _, err := PackageVersion(ctx, fakeBinary(t, "meshctl", stamped), fakeBinary(t, "meshhost", other), nil); !errors.Is(err, ErrVersions) {
		t.Fatalf("two builds: %v, want ErrVersions", err)
	}
	bare := `{"program":"p","version":"0.1.0"}`
	v, err = PackageVersion(ctx, fakeBinary(t, "meshctl", bare), fakeBinary(t, "meshhost", bare), &log)
	if err != nil || v != "0.1.0" || !strings.Contains(log.String(), "no VCS revision") {
		t.Fatalf("without a revision: %q, %v, log %q", v, err, log.String())
	}
}
