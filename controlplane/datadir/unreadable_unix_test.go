//go:build unix

package datadir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestAFileThisUserMayNotRead: a file of the data directory this user may not read
// (meshctl run by hand as another user than the directory's) is ErrUnreadable,
// naming the file, this user and the owner to run as, where it was a raw
// "permission denied" (exit 1). Root reads everything: as root the test runs itself
// again as uid 65534.
func TestAFileThisUserMayNotRead(t *testing.T) {
	if path := os.Getenv(unreadableHelperEnv); path != "" {
		_, err := Dir(filepath.Dir(path)).ReadFile(filepath.Base(path))
		fmt.Printf("matches=%v\n%v\n", errors.Is(err, ErrUnreadable), err)
		// mesh.json, read by every command first, the same way.
		_, err = Dir(filepath.Dir(path)).LoadConfig()
		fmt.Printf("config matches=%v\n%v\n", errors.Is(err, ErrUnreadable), err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("reading as another user (uid 65534) needs root")
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(base, AdminCredsFile)
	for _, p := range []string{path, filepath.Join(base, ConfigFile)} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "datadir.test")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestAFileThisUserMayNotRead$")
	cmd.Env = append(os.Environ(), unreadableHelperEnv+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the helper as uid 65534: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "matches=true") {
		t.Errorf("reading %s as uid 65534 is not ErrUnreadable:\n%s", path, out)
	}
	for _, want := range []string{path + " cannot be read by this user", "uid 65534", "run meshctl as root (uid 0)",
		"config matches=true", filepath.Join(base, ConfigFile) + " cannot be read by this user"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the error does not say %q:\n%s", want, out)
		}
	}
}

// unreadableHelperEnv names the file TestAFileThisUserMayNotRead's helper reads.
const unreadableHelperEnv = "MESH_TEST_UNREADABLE_HELPER"
