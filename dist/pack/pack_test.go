package pack

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// buildProbe builds a small program that calls glibc through cgo when cgo is "1"
// (as meshctl and meshhost do, for os/user), or a static one when it is "0".
func buildProbe(t *testing.T, cgo string) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os/user\"\n)\n\nfunc main() { fmt.Println(user.Current()) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module probe\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		if cgo == "1" {
			t.Skipf("no cgo build here (a C compiler is needed): %v\n%s", err, b)
		}
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestLibcDepends: a package of a binary linked against glibc depends on a libc6 at
// least as new as the symbols it needs (else it installs on an older Debian and
// does not start: "GLIBC_2.34 not found"); a static binary needs nothing.
func TestLibcDepends(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two programs")
	}
	dep, err := LibcDepends(buildProbe(t, "1"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^libc6 \(>= 2\.[0-9]+\)$`).MatchString(dep) {
		t.Errorf("dynamically linked: Depends %q, want libc6 (>= 2.N)", dep)
	}
	dep, err = LibcDepends(buildProbe(t, "0"))
	if err != nil || dep != "" {
		t.Errorf("static: Depends %q, %v; want none", dep, err)
	}
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LibcDepends(script); err == nil {
		t.Error("a file that is not ELF: no error")
	}
}
