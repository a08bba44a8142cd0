//go:build linux

package dirlock

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestAClaimOfAnotherUserDoesNotStopTheAgent: any user may take a root's claim
// first (or that of /), and a lock any user could take on the root kept the agent
// from starting (a review: `runuser -u nobody -- flock -s /srv/mesh`, and a setuid
// program renamed meshhost holding it). A claim whose holder the kernel says is
// another user's leaves the root unclaimed, said, and the agent runs; nothing of the
// agent's is held open in the root (a lock on it kept its file system from being
// unmounted).
func TestAClaimOfAnotherUserDoesNotStopTheAgent(t *testing.T) {
	if name := os.Getenv("MESH_TEST_HOLD_CLAIM"); name != "" {
		holdClaimAndWait(t, name)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to hold a claim as another user")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv to run as another user")
	}
	// This test binary, where another user may run it.
	dir := t.TempDir()
	bin := filepath.Join(dir, "dirlock.test")
	copyExecutable(t, os.Args[0], bin)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root := t.TempDir()
	for _, c := range []struct{ what, dir string }{{"the root", root}, {"/", "/"}} {
		fi, err := os.Stat(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := rootClaimName(fi)
		hold := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestAClaimOfAnotherUserDoesNotStopTheAgent$")
		hold.Env = append(os.Environ(), "MESH_TEST_HOLD_CLAIM="+name)
		if err := hold.Start(); err != nil {
			t.Skipf("cannot run as nobody: %v", err)
		}
		for deadline := time.Now().Add(10 * time.Second); rootClaimant(fi) == nil; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				hold.Process.Kill()
				t.Fatalf("nobody's process did not come to hold %s's claim", c.what)
			}
		}
		if h := rootClaimant(fi); h.uid != 65534 {
			t.Errorf("%s's claim is said to be uid %d's, want nobody's", c.what, h.uid)
		}
		l, err := AcquireRoot(root)
		hold.Process.Kill()
		hold.Wait()
		if err != nil {
			t.Errorf("%s claimed by nobody: %v, want the agent to run", c.what, err)
			continue
		}
		if c.dir == root && l.Unheld == "" {
			t.Errorf("%s claimed by nobody: claimed, want it said unclaimed", c.what)
		}
		l.Release()
	}
}

// holdClaimAndWait holds the claim name until killed: the other user's process.
func holdClaimAndWait(t *testing.T, name string) {
	release, holder, err := claimName(name)
	if err != nil || holder != nil {
		t.Fatalf("claim %s: %v (held by %+v)", name, err, holder)
	}
	defer release()
	time.Sleep(30 * time.Second)
}

// copyExecutable copies the executable from to to, mode 0755.
func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestANameTakenButSilentIsSaid: a root's claim name bound and not listening (any
// user can) answered no probe, and the agent took itself for the holder, saying
// nothing, and a second agent on the root ran too (a review). It is said: the
// agent runs without the claim and logs it.
func TestANameTakenButSilentIsSaid(t *testing.T) {
	root := t.TempDir()
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := rootClaimName(fi)
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: name}); err != nil {
		t.Fatal(err)
	}
	l, err := AcquireRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	if !strings.Contains(l.Unheld, "does not answer") {
		t.Fatalf("a claim name bound and silent: unheld %q, want it said", l.Unheld)
	}
}
