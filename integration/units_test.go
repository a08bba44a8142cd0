package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// moduleDir is the module's root directory (where go.mod is).
func moduleDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		t.Fatal("not inside the module")
	}
	return filepath.Dir(mod)
}

// unitNames are the systemd units of dist/systemd.
func unitNames() []string {
	return []string{"meshctl.service", "meshhost.service", "meshhost-enrol.service"}
}

// copyFile copies src to dst with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}

// verifyUnits runs systemd-analyze verify on units as installed under root, and
// fails on any complaint: verify exits 0 on unknown keys and values it ignores, so
// its output must be empty too.
func verifyUnits(t *testing.T, analyze string, root string, units ...string) {
	t.Helper()
	args := []string{"verify", "--man=no"}
	if root != "" {
		args = append(args, "--root="+root)
	}
	cmd := exec.Command(analyze, append(args, units...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice")
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestSystemdUnitsVerify runs systemd-analyze verify on the units of dist/systemd,
// installed into a scratch root that holds the built binaries at the paths the
// units name and this machine's own systemd units (for the targets they order
// against).
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd; .ci/run installs it as root)")
	}
	var system string
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if fi, err := os.Stat(filepath.Join(d, "multi-user.target")); err == nil && !fi.IsDir() {
			system = d
			break
		}
	}
	if system == "" {
		t.Skip("this machine has systemd-analyze but no systemd units (multi-user.target) to verify against")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr", "lib", "systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", system, filepath.Join(root, "usr", "lib", "systemd", "system")).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v: %s", system, err, out)
	}
	copyFile(t, bin.Meshctl, filepath.Join(root, "usr", "bin", "meshctl"), 0o755)
	copyFile(t, bin.Meshhost, filepath.Join(root, "usr", "bin", "meshhost"), 0o755)
	for _, tool := range []string{"rm", "sh", "mkdir"} { // meshhost-enrol's ExecStartPost, meshhost's ExecStartPre
		path, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, path, filepath.Join(root, "bin", tool), 0o755)
	}
	src := filepath.Join(moduleDir(t), "dist", "systemd")
	for _, u := range unitNames() {
		copyFile(t, filepath.Join(src, u), filepath.Join(root, "etc", "systemd", "system", u), 0o644)
	}
	verifyUnits(t, analyze, root, unitNames()...)

	// The check can fail: a unit with a misspelt key does not pass.
	bad, err := os.ReadFile(filepath.Join(src, "meshctl.service"))
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(bad), "NoNewPrivileges=yes", "NoNewPrivilege=yes", 1)
	if err := os.WriteFile(filepath.Join(root, "etc", "systemd", "system", "broken.service"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(analyze, "verify", "--man=no", "--root="+root, "broken.service").CombinedOutput()
	if !strings.Contains(string(out), "NoNewPrivilege") {
		t.Fatalf("systemd-analyze did not notice a misspelt key:\n%s", out)
	}
}
