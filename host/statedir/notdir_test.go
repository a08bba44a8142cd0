//go:build unix

package statedir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCheckSaysWhatIsThere: a state directory that is something else is refused as
// ErrNotDir, saying what it is in words (it printed the mode's type as "----------"
// for a regular file), and that --state names the directory, not a file in it.
func TestCheckSaysWhatIsThere(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "identity.json")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{file: "it is a regular file", link: "it is a symbolic link to a regular file", "/dev/null": "it is a character device"}
	if fifo := filepath.Join(dir, "fifo"); syscall.Mkfifo(fifo, 0o600) == nil {
		cases[fifo] = "it is a named pipe (FIFO)"
	}
	for p, want := range cases {
		err := Check(p)
		var nd *NotDirError
		if !errors.As(err, &nd) || !errors.Is(err, ErrNotDir) || nd.Dir != p {
			t.Errorf("%s: %v, want a *NotDirError", p, err)
			continue
		}
		if errors.Is(err, ErrUnsafe) || errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v matches another kind", p, err)
		}
		for _, w := range []string{"the state directory " + p + " is not a directory: " + want, "not a file in it", "ls -l " + p} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the refusal does not say %q: %v", p, w, err)
			}
		}
		if strings.Contains(err.Error(), "---") {
			t.Errorf("%s: the refusal shows a mode string: %v", p, err)
		}
	}
}

// checkAsHelperEnv names the directory a re-run of this test binary, as another
// user, checks (TestCheckAsHelper).
const checkAsHelperEnv = "MESH_TEST_STATEDIR_CHECK"

// TestCheckAsHelper is the Check TestCheckAsAUserWhoMayNotEnter runs as another
// user; it does nothing in an ordinary run.
func TestCheckAsHelper(t *testing.T) {
	dir := os.Getenv(checkAsHelperEnv)
	if dir == "" {
		t.Skip("a helper process of TestCheckAsAUserWhoMayNotEnter")
	}
	err := Check(dir)
	var ue *UnsafeError
	fmt.Printf("CHECK unsafe=%v %v\n", errors.As(err, &ue), err)
}

// TestCheckAsAUserWhoMayNotEnter: a user who may not enter the state directory
// (meshhost run by hand as another user than the agent's, here uid 65534 on root's
// 0700 directory) is told to run meshhost as the agent's user, never to chown the
// directory to itself, which would hand the node's private key to the wrong user.
// One who may enter another user's directory is given both: run as its owner, or,
// if the agent is this user, check it and take it.
func TestCheckAsAUserWhoMayNotEnter(t *testing.T) {
	asRoot(t)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "statedir.test")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(base, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	check := func() string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestCheckAsHelper$", "-test.v")
		cmd.Env = append(os.Environ(), checkAsHelperEnv+"="+state)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", nobody, err, out.String())
		}
		return out.String()
	}
	out := check()
	for _, want := range []string{"CHECK unsafe=true", "which may not enter it", "Run meshhost as the user the agent runs as, most likely the directory's owner, uid 0"} {
		if !strings.Contains(out, want) {
			t.Errorf("mode 0700: the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "chown") {
		t.Errorf("mode 0700: uid %d, who may not enter root's directory, is told to chown it:\n%s", nobody, out)
	}
	// The positive control: one who may enter it is told both.
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	out = check()
	for _, want := range []string{"CHECK unsafe=true", "If the agent runs as uid 0", "run meshhost as that user instead", "If it runs as uid 65534", "chown 65534 " + state} {
		if !strings.Contains(out, want) {
			t.Errorf("mode 0755: the refusal does not say %q:\n%s", want, out)
		}
	}
}
