//go:build linux

package dirlock

import (
	"errors"
	"fmt"
	"io"
	"net"
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
// unmounted). Nor does another user's claim of a directory inside the root, saying
// so, refuse it.
func TestAClaimOfAnotherUserDoesNotStopTheAgent(t *testing.T) {
	if name := os.Getenv("MESH_TEST_HOLD_CLAIM"); name != "" {
		holdClaimAndWait(t, name, os.Getenv("MESH_TEST_HOLD_CLAIM_SAYS"))
		return
	}
	bin := binaryForNobody(t, "hold a claim as another user")
	root := t.TempDir()
	inner := filepath.Join(root, "app")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, dir string }{{"the root", root}, {"/", "/"}, {"a directory inside the root", inner}} {
		fi, err := os.Stat(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := rootClaimName(fi)
		hold := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestAClaimOfAnotherUserDoesNotStopTheAgent$")
		hold.Env = append(os.Environ(), "MESH_TEST_HOLD_CLAIM="+name, "MESH_TEST_HOLD_CLAIM_SAYS="+c.dir)
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

// holdClaimAndWait holds the claim name, saying path, until killed: the other
// user's process.
func holdClaimAndWait(t *testing.T, name, path string) {
	release, holder, err := claimName(name, path)
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

// TestARootHoldingAnotherAgentsIsRefused: an agent started on a directory above a
// running agent's root went unrefused, and the two put back each other's files for
// good while both nodes said converged (a docs walkthrough). It is refused, naming
// the root inside and its agent; a root apart is not, nor one the other agent gave
// up.
func TestARootHoldingAnotherAgentsIsRefused(t *testing.T) {
	base := t.TempDir()
	outer, other := filepath.Join(base, "outer"), filepath.Join(base, "other")
	inner := filepath.Join(outer, "srv", "app")
	for _, d := range []string{inner, other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	held, err := AcquireRoot(inner)
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(inner)
	if err != nil {
		t.Fatal(err)
	}
	for _, root := range []string{outer, base} {
		l, err := AcquireRoot(root)
		if err == nil {
			l.Release() // the next case is not refused for it
		}
		var ie *RootInUseError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInUse) || ie.Inner != want || ie.Outer != "" || ie.PID != os.Getpid() {
			t.Errorf("an agent on %s, which holds a running agent's %s: %v (%+v), want refused", root, inner, err, ie)
			continue
		}
		if says := root + " holds " + want + ", the managed root of a running agent (pid "; !strings.Contains(err.Error(), says) {
			t.Errorf("an agent on %s: %q, want it to say %q", root, err, says)
		}
	}
	l, err := AcquireRoot(other)
	if err != nil {
		t.Fatalf("a root apart: %v", err)
	}
	l.Release()
	held.Release()
	if l, err = AcquireRoot(outer); err != nil {
		t.Fatalf("above a root given up: %v", err)
	}
	l.Release()
}

// TestAClaimCountsOnlyForTheRootItIsNamedAfter: a claim says the root it holds, and
// any agent of the user could say any path; it counts only for the directory whose
// device and inode name it. One that says nothing (an agent of an earlier version)
// refuses nothing above it.
func TestAClaimCountsOnlyForTheRootItIsNamedAfter(t *testing.T) {
	base := t.TempDir()
	outer, elsewhere := filepath.Join(base, "outer"), filepath.Join(base, "elsewhere")
	inner := filepath.Join(outer, "app")
	for _, d := range []string{inner, elsewhere} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		what, namedAfter, says string
		refused                bool
	}{
		{"a claim of another directory saying the root inside", elsewhere, inner, false},
		{"a claim saying nothing", inner, "", false},
		{"a claim saying a relative path", inner, "outer/app", false},
		{"a claim saying its own root", inner, inner, true},
	} {
		fi, err := os.Stat(c.namedAfter)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := rootClaimName(fi)
		release, holder, err := claimName(name, c.says)
		if err != nil || holder != nil {
			t.Fatalf("claim %s: %v (held by %+v)", name, err, holder)
		}
		l, err := AcquireRoot(outer)
		release()
		if refused := errors.Is(err, ErrInUse); refused != c.refused || !refused && err != nil {
			t.Errorf("%s: %v, want refused %v", c.what, err, c.refused)
		}
		if err == nil {
			l.Release()
		}
	}
}

// TestTheClaimsListedAreTheListeningOnes: of /proc/net/unix, the claims listening,
// once each (the connections a claim accepted carry its name too), not other names.
func TestTheClaimsListedAreTheListeningOnes(t *testing.T) {
	const table = `Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 1001 @meshhost-root-2049-131
0000000000000000: 00000003 00000000 00000000 0001 03 1002 @meshhost-root-2049-131
0000000000000000: 00000002 00000000 00000000 0001 01 1003 @meshhost-root-2049-7
0000000000000000: 00000002 00000000 00010000 0001 01 1004 /run/meshhost.sock
0000000000000000: 00000002 00000000 00010000 0001 01 1005 @meshhost-root-66-12
0000000000000000: 00000002 00000000 00010000 0001 01 1006 @other
0000000000000000: 00000003 00000000 00000000 0001 03 1007
`
	names, more, err := claimsListed(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(names, " "), "@meshhost-root-2049-131 @meshhost-root-66-12"; got != want || more {
		t.Fatalf("claims listed: %q (more %v), want %q and no more", got, more, want)
	}
}

// TestClaimsPastTheCapAreSaid: names are looked at up to a cap (any user can make
// claim names by the thousand); past it the look was cut short without a word, and
// an agent on a root inside went unrefused silently (a review). The cap is exact,
// and what is past it is said.
func TestClaimsPastTheCapAreSaid(t *testing.T) {
	var table strings.Builder
	table.WriteString("Num       RefCount Protocol Flags    Type St Inode Path\n")
	for i := range claimNamesMax {
		fmt.Fprintf(&table, "0000000000000000: 00000002 00000000 00010000 0001 01 %d @meshhost-root-1-%d\n", i, i)
	}
	names, more, err := claimsListed(strings.NewReader(table.String()))
	if err != nil || len(names) != claimNamesMax || more {
		t.Fatalf("exactly %d claims: %d listed, more %v, %v; want all, no more", claimNamesMax, len(names), more, err)
	}
	table.WriteString("0000000000000000: 00000002 00000000 00010000 0001 01 1 @meshhost-root-2-1\n")
	names, more, err = claimsListed(strings.NewReader(table.String()))
	if err != nil || len(names) != claimNamesMax || !more {
		t.Fatalf("one claim past %d: %d listed, more %v, %v; want %d and more said", claimNamesMax, len(names), more, err, claimNamesMax)
	}
}

// TestAgentsClaimsPastTheCapAreSaid: an agent reads at most claimsAsked agents'
// claims (this user's or root's) looking for a root inside its own; past them the
// look ended silently (a review). More than that many claims of this user listen:
// the root is taken, and what was not looked at is said.
func TestAgentsClaimsPastTheCapAreSaid(t *testing.T) {
	var releases []func()
	releaseAll := func() {
		for _, r := range releases {
			r()
		}
		releases = nil
	}
	defer releaseAll()
	for i := range claimsAsked + 1 {
		release, holder, err := claimName(fmt.Sprintf("%stest-%d-%d", claimPrefix, os.Getpid(), i), "")
		if err != nil || holder != nil {
			t.Fatalf("claim %d: %v (held by %+v)", i, err, holder)
		}
		releases = append(releases, release)
	}
	l, err := AcquireRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if !strings.Contains(l.Unchecked, fmt.Sprintf("more than %d agents' claims", claimsAsked)) {
		t.Fatalf("%d claims of this user: unchecked %q, want the cap said", claimsAsked+1, l.Unchecked)
	}

	// With them gone, every claim is looked at, and nothing is said.
	releaseAll()
	if l, err = AcquireRoot(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if l.Unchecked != "" {
		t.Fatalf("a few claims: unchecked %q, want nothing said", l.Unchecked)
	}
}

// TestAClaimTellsItsRootOnlyToAgents: a claim says its root to whoever connects, so
// that an agent starting above it finds it; abstract names have no permissions, and
// any local user read every agent's root, one under a directory they may not list
// too (a review). Another user connecting reads nothing; this user reads the root.
func TestAClaimTellsItsRootOnlyToAgents(t *testing.T) {
	if name := os.Getenv("MESH_TEST_READ_CLAIM"); name != "" {
		c, err := net.Dial("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		os.Stdout.WriteString("read:" + string(b) + "\n")
		return
	}
	bin := binaryForNobody(t, "connect as another user")
	root := t.TempDir()
	lock, err := AcquireRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	fi, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := rootClaimName(fi)
	if said, h := askClaim(name); h == nil || said == "" {
		t.Fatalf("this user reads %q from the claim, want its root", said)
	}
	read := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^TestAClaimTellsItsRootOnlyToAgents$")
	read.Env = append(os.Environ(), "MESH_TEST_READ_CLAIM="+name)
	out, err := read.CombinedOutput()
	if err != nil {
		t.Skipf("cannot run as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "read:\n") || strings.Contains(string(out), root) {
		t.Errorf("another user read from the claim:\n%s", out)
	}
}

// binaryForNobody is this test binary copied where another user may run it (through
// setpriv, as nobody); the test is skipped, saying it needs root to do what, where
// that cannot be.
func binaryForNobody(t *testing.T, what string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to " + what)
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv to run as another user")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dirlock.test")
	copyExecutable(t, os.Args[0], bin)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}
