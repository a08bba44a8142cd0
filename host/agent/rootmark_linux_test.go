package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// errNotAsUser: asUser could not make its thread another user's.
var errNotAsUser = errors.New("could not run a thread as another user")

// asUser runs fn on an OS thread whose file system uid and gid are uid
// (setfsuid(2)) and which holds no capability (capset(2), which like setfsuid
// changes the calling thread alone): the kernel judges its file operations as an
// unprivileged process of that user's, while the rest of the test process stays
// root. setfsuid alone drops the capabilities over files but keeps CAP_SYS_ADMIN,
// which may set trusted.* attributes. The thread is never handed back to the
// runtime: it ends with fn's goroutine.
func asUser(t *testing.T, uid int, fn func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		_ = unix.Setfsgid(uid)
		_ = unix.Setfsuid(uid)
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var none [2]unix.CapUserData
		if got, _ := unix.SetfsuidRetUid(-1); got != uid || unix.Capset(&hdr, &none[0]) != nil {
			errc <- errNotAsUser
			return
		}
		errc <- fn()
	}()
	err := <-errc
	if errors.Is(err, errNotAsUser) {
		t.Fatal(err)
	}
	return err
}

// setMarkAs sets the attribute attr of the root to text as uid would. The root is
// opened by the test (its temporary parents are root's, 0700): only the setting
// is judged as uid's, which is what the kernel checks the attribute's permission on.
func setMarkAs(t *testing.T, uid int, root, attr, text string) error {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	return asUser(t, uid, func() error { return unix.Fsetxattr(fd, attr, []byte(text), 0) })
}

func getAttr(t *testing.T, path, attr string) (string, error) {
	t.Helper()
	buf := make([]byte, 128)
	n, err := unix.Getxattr(path, attr, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: sets the root's mark as other users (setfsuid) and gives the root to them")
	}
}

// forged is a mark naming the last possible version: the check off for good.
var forged = rootMarkValue{version: math.MaxUint64, digest: strings.Repeat("ab", 32)}

// TestAMarkAnotherUserCouldSetIsNotTrusted (a reviewer's audit, 2026-12, finding 3):
// anyone who may write a directory without the sticky bit may set its user.*
// attributes, and statedir.CheckRoot accepts a root others may write; such a user
// set user.meshhost.applied to the last version and the file check stayed off for
// good, while they could swap the root's files. An agent trusts the mark, and
// writes it, only on a root its user owns that group and others may not write, or
// that is sticky: root's agent on a root-owned 0755 root, not once it is 0777.
func TestAMarkAnotherUserCouldSetIsNotTrusted(t *testing.T) {
	needRoot(t)
	f := newFixture(t)
	ctx := context.Background()
	if err := os.Mkdir(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	want := string(rootMarkValue{version: 1, digest: f.a.applied.BodyDigest}.text())
	if got, err := getAttr(t, f.root, rootMarkAttr); err != nil || got != want {
		t.Fatalf("the root agent's mark after v1: %s = %q (%v), want %q", rootMarkAttr, got, err, want)
	}

	// The root made 0777: nobody sets the mark (the kernel lets them). The root
	// agent does not trust a mark there, and puts back.
	if err := os.Chmod(f.root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := setMarkAs(t, 65534, f.root, rootMarkAttr, string(forged.text())); err != nil {
		t.Fatalf("nobody could not set %s on a 0777 root: %v (the premise of the audit)", rootMarkAttr, err)
	}
	f.handEdit(t, "swapped by nobody")
	if out := f.a.checkFiles(ctx); !out.putBack || f.file(t) != "declared" || f.a.off.code != "" {
		t.Fatalf("the root agent under nobody's mark on a 0777 root: put back %t, file %q, check off for %q; want put back", out.putBack, f.file(t), f.a.off.code)
	}
	if err := markRoot(f.root, 0, rootMarkValue{version: 1, digest: f.a.applied.BodyDigest}); !errors.Is(err, errRootMarkUntrusted) {
		t.Fatalf("the root agent marking a 0777 root: %v, want errRootMarkUntrusted", err)
	}

	// An agent running as uid 4242, whose root it is, 0777: nobody's mark is not
	// trusted, nor is one it would write itself.
	const agentUID = 4242
	f.a.euid = agentUID
	if err := os.Chown(f.root, agentUID, agentUID); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "swapped by nobody")
	if out := f.a.checkFiles(ctx); !out.putBack || f.file(t) != "declared" || f.a.off.code != "" {
		t.Fatalf("uid %d's agent under nobody's mark on its 0777 root: put back %t, file %q, check off for %q; want put back", agentUID, out.putBack, f.file(t), f.a.off.code)
	}
	if err := markRoot(f.root, agentUID, rootMarkValue{version: 1, digest: f.a.applied.BodyDigest}); !errors.Is(err, errRootMarkUntrusted) {
		t.Fatalf("marking a 0777 root as uid %d: %v, want errRootMarkUntrusted", agentUID, err)
	}

	// Sticky (1777): the kernel lets only the owner set it, and the agent trusts it.
	if err := os.Chmod(f.root, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := setMarkAs(t, 65534, f.root, rootMarkAttr, string(forged.text())); !errors.Is(err, unix.EPERM) {
		t.Fatalf("nobody setting %s on a sticky root: %v, want EPERM", rootMarkAttr, err)
	}
	if err := setMarkAs(t, agentUID, f.root, rootMarkAttr, "7 "+forged.digest); err != nil {
		t.Fatalf("the owner setting %s on its sticky root: %v", rootMarkAttr, err)
	}
	f.handEdit(t, "v7's content")
	if out := f.a.checkFiles(ctx); out.putBack || f.file(t) != "v7's content" || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("the owner's mark on its sticky root: put back %t, file %q, check off for %q; want %q", out.putBack, f.file(t), f.a.off.code, CheckOffRootNewer)
	}
	// 0755: trusted still.
	if err := os.Chmod(f.root, 0o755); err != nil {
		t.Fatal(err)
	}
	if m, ok := rootMark(f.root, agentUID); !ok || m.version != 7 {
		t.Fatalf("the owner's mark on its 0755 root: %+v (%t), want v7", m, ok)
	}
	// The same root given to root while the agent runs as 4242: root's group
	// aside, another user (root's services) could have set it.
	if err := os.Chown(f.root, 0, 0); err != nil {
		t.Fatal(err)
	}
	if out := f.a.checkFiles(ctx); !out.putBack || f.file(t) != "declared" || f.a.off.code != "" {
		t.Fatalf("uid %d's agent on a root of root's: put back %t, file %q, check off for %q; want its mark not trusted", agentUID, out.putBack, f.file(t), f.a.off.code)
	}
}

// TestUserMarkTrusted is the rule's table: the agent's user's root, and only one
// no other user may set attributes on.
func TestUserMarkTrusted(t *testing.T) {
	for _, tc := range []struct {
		uid, euid int
		perm      uint32
		want      bool
	}{
		{1000, 1000, 0o755, true},
		{1000, 1000, 0o700, true},
		{1000, 1000, 0o1777, true}, // sticky: only the owner sets user.* attributes
		{1000, 1000, 0o775, false}, // the group may set it
		{1000, 1000, 0o757, false},
		{1000, 1000, 0o777, false},
		{0, 1000, 0o755, false}, // root's root, the agent another user: root's services may
		{2000, 1000, 0o700, false},
	} {
		if got := userMarkTrusted(tc.uid, tc.euid, tc.perm); got != tc.want {
			t.Errorf("uid %d, agent %d, mode %#o: trusted %t, want %t", tc.uid, tc.euid, tc.perm, got, tc.want)
		}
	}
}

// TestTheMarkGoesOnADirectoryOnly: the root's mark is set and read on a
// descriptor of the root opened O_DIRECTORY: a link to a directory is followed, as
// the applier follows it, but a file or a named pipe in the root's place is not
// marked (ENOTDIR), nor does it hold the agent.
func TestTheMarkGoesOnADirectoryOnly(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	m := rootMarkValue{version: 3, digest: strings.Repeat("cd", 32)}
	target, link := dir+"/target", dir+"/link"
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", link); err != nil {
		t.Fatal(err)
	}
	if err := markRoot(link, 0, m); err != nil {
		t.Fatalf("a root given as a link to a directory: %v", err)
	}
	if got, err := getAttr(t, target, rootMarkAttr); err != nil || got != string(m.text()) {
		t.Fatalf("the directory the link leads to: %s = %q (%v), want %q", rootMarkAttr, got, err, m.text())
	}
	if got, ok := rootMark(link, 0); !ok || got != m {
		t.Fatalf("the mark read through the link: %+v, %t", got, ok)
	}

	file, fifo := dir+"/file", dir+"/fifo"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, fifo} {
		done := make(chan error, 1)
		go func() { done <- markRoot(p, 0, m) }()
		select {
		case err := <-done:
			if !errors.Is(err, unix.ENOTDIR) {
				t.Errorf("%s in the root's place: %v, want ENOTDIR", p, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s in the root's place holds the mark", p)
		}
		if got, err := getAttr(t, p, rootMarkAttr); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s in the root's place was marked: %q (%v)", p, got, err)
		}
		if _, ok := rootMark(p, 0); ok {
			t.Errorf("a mark was read from %s in the root's place", p)
		}
	}
}

// TestTheMeshsCopyEndsRootNewerWithoutFlapping (a reviewer's audit, 2026-12,
// finding 3): the root marked higher than both the state and the mesh (a control
// plane and a state directory both restored from backups) turns the check off and
// asks the mesh, which sends its current declaration: the state's. Before, that
// copy turned the check on, logging that it put files back again, without marking
// the root, and the next check turned it off again: a warning, an ask and a sync at
// every interval, for good. Now the copy marks the root, and the check stays on.
// A copy older than the state's (a replay) is not the mesh speaking: it neither
// ends it nor puts the files back.
func TestTheMeshsCopyEndsRootNewerWithoutFlapping(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	current := f.declAt(t, t0)
	if err := f.a.handle(ctx, current); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	if err := markRoot(f.root, f.a.euid, rootMarkValue{version: 5, digest: forged.digest}); err != nil {
		t.Fatal(err)
	}
	f.handEdit(t, "v5's content")
	if out := f.a.checkFiles(ctx); out.putBack || !out.ask || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("a root marked v5 over a v1 state: %+v, check off for %q", out, f.a.off.code)
	}

	// A replayed copy, issued before the state's: nothing put back, still off.
	if err := f.a.handle(ctx, f.declAt(t, t0.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if f.file(t) != "v5's content" || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("an older copy of v1: file %q, check off for %q; want nothing put back, still off", f.file(t), f.a.off.code)
	}
	if m, _ := rootMark(f.root, f.a.euid); m.version != 5 {
		t.Fatalf("an older copy of v1 marked the root v%d", m.version)
	}

	// The mesh's answer: its current copy, the state's.
	if err := f.a.handle(ctx, current); err != nil {
		t.Fatal(err)
	}
	if m, ok := rootMark(f.root, f.a.euid); !ok || m.version != 1 || m.digest != f.a.applied.BodyDigest {
		t.Fatalf("the mesh's current copy of v1: the root marked %+v (%t), want v1 and its digest", m, ok)
	}
	if f.file(t) != "declared" || f.a.off.code != "" {
		t.Fatalf("the mesh's current copy of v1: file %q, check off for %q; want put back, on", f.file(t), f.a.off.code)
	}
	// Two check intervals: on, putting back, asking nothing.
	for i := range 2 {
		f.handEdit(t, "edited by hand")
		if out := f.a.checkFiles(ctx); !out.putBack || out.ask || f.a.off.code != "" || f.file(t) != "declared" {
			t.Fatalf("check %d after the mesh's copy: %+v, check off for %q, file %q; want put back, on", i+1, out, f.a.off.code, f.file(t))
		}
	}
	log := logged.String()
	if n := strings.Count(log, "files changed on this host are not put back"); n != 1 {
		t.Errorf("the check said %d times that it is off, want once:\n%s", n, log)
	}
	if strings.Contains(log, "it holds a usable copy of the applied declaration") {
		t.Errorf("a copy said the check puts back again while the root's mark held:\n%s", log)
	}
	if !strings.Contains(log, "marked with the declaration the mesh sent as its current one") {
		t.Errorf("the end of the check's being off not said:\n%s", log)
	}
}

// TestAMarkThatCannotBeRewrittenKeepsTheCheckOffQuietly: the mesh's copy arrives
// but the root's mark cannot be written (here the root made immutable): the mark
// still names a newer declaration, so the check stays off, with no word that it
// puts files back again and no second warning or ask at the checks that follow.
func TestAMarkThatCannotBeRewrittenKeepsTheCheckOffQuietly(t *testing.T) {
	needRoot(t)
	f := newFixture(t)
	ctx := context.Background()
	current := f.declAt(t, t0)
	if err := f.a.handle(ctx, current); err != nil {
		t.Fatal(err)
	}
	if err := markRoot(f.root, f.a.euid, rootMarkValue{version: 5, digest: forged.digest}); err != nil {
		t.Fatal(err)
	}
	setImmutable(t, f.root)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	f.handEdit(t, "v5's content")
	if out := f.a.checkFiles(ctx); out.putBack || !out.ask || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("a root marked v5 over a v1 state: %+v, check off for %q", out, f.a.off.code)
	}
	if err := f.a.handle(ctx, current); err != nil {
		t.Fatal(err)
	}
	if f.file(t) != "v5's content" || f.a.off.code != CheckOffRootNewer {
		t.Fatalf("the mesh's copy, the mark not rewritten: file %q, check off for %q; want nothing put back, still off", f.file(t), f.a.off.code)
	}
	for i := range 2 {
		if out := f.a.checkFiles(ctx); out.putBack || out.ask || f.a.off.code != CheckOffRootNewer {
			t.Fatalf("check %d: %+v, check off for %q; want still off, no ask", i+1, out, f.a.off.code)
		}
	}
	log := logged.String()
	if n := strings.Count(log, "files changed on this host are not put back"); n != 1 {
		t.Errorf("the check said %d times that it is off, want once:\n%s", n, log)
	}
	if strings.Contains(log, "puts back files changed on this host again") {
		t.Errorf("said the check puts back again while the root's mark held:\n%s", log)
	}
	if !strings.Contains(log, "could not mark the managed root") {
		t.Errorf("the failure to mark the root not said:\n%s", log)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutableFL = 0x10

// setImmutable makes dir immutable (chattr +i) until the test ends: its
// attributes cannot be set, the files below it can be written.
func setImmutable(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Skipf("this file system keeps no inode flags: %v", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL)); err != nil {
		t.Skipf("cannot make the root immutable here: %v", err)
	}
	t.Cleanup(func() {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			return
		}
		defer unix.Close(fd)
		if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
			t.Errorf("could not make %s mutable again: %v", dir, err)
		}
	})
}

// unitCapabilities are the capabilities dist/systemd/meshhost.service leaves the
// agent (CapabilityBoundingSet), as numbers.
func unitCapabilities(t *testing.T) []int {
	t.Helper()
	unit, err := os.ReadFile("../../dist/systemd/meshhost.service")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]int{"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
		"CAP_FOWNER": unix.CAP_FOWNER, "CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETUID": unix.CAP_SETUID, "CAP_SETGID": unix.CAP_SETGID,
		"CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN}
	for line := range strings.Lines(string(unit)) {
		names, ok := strings.CutPrefix(strings.TrimSpace(line), "CapabilityBoundingSet=")
		if !ok {
			continue
		}
		var caps []int
		for _, n := range strings.Fields(names) {
			c, ok := byName[n]
			if !ok {
				t.Fatalf("the unit names %s, which this test does not know: add it", n)
			}
			caps = append(caps, c)
		}
		return caps
	}
	t.Fatal("the unit sets no CapabilityBoundingSet")
	return nil
}

// TestTheUnitsAgentKeepsItsMark (a second review, 2026-12): an agent running as
// root marked trusted.meshhost.applied, which needs CAP_SYS_ADMIN; the unit runs it
// without, so the mark failed (EPERM), and the protection it gives (a restored
// state directory does not put older files back) was off on every host run by the
// unit. With exactly the unit's capabilities, as root, the mark is written and read
// back on a root-owned 0755 root.
func TestTheUnitsAgentKeepsItsMark(t *testing.T) {
	needRoot(t)
	caps := unitCapabilities(t)
	root := t.TempDir() + "/root"
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	m := rootMarkValue{version: 4, digest: strings.Repeat("ef", 32)}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var have, data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &have[0]); err != nil {
			errc <- fmt.Errorf("%w: capget: %v", errNotAsUser, err)
			return
		}
		// The unit's, less what this process lacks already (a container's
		// bounding set): capabilities are only given up here.
		for _, c := range caps {
			bit := uint32(1) << (c % 32)
			data[c/32].Effective |= bit & have[c/32].Permitted
			data[c/32].Permitted |= bit & have[c/32].Permitted
		}
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- fmt.Errorf("%w: capset: %v", errNotAsUser, err)
			return
		}
		if err := markRoot(root, 0, m); err != nil {
			errc <- fmt.Errorf("marking the root with the unit's capabilities: %w", err)
			return
		}
		if got, ok := rootMark(root, 0); !ok || got != m {
			errc <- fmt.Errorf("the mark read back with the unit's capabilities: %+v, %t; want %+v", got, ok, m)
			return
		}
		errc <- nil
	}()
	if err := <-errc; errors.Is(err, errNotAsUser) {
		t.Skipf("cannot run a thread with the unit's capabilities here: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
}

// TestAMarkIsTheStatesWhateverTheDigestsCase: the state file takes the applied
// body's digest in either letter case, and the root's mark, written in lower case,
// read as another declaration's when the state held it in upper: the file check
// off, a warning and an ask at every check (a review).
func TestAMarkIsTheStatesWhateverTheDigestsCase(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	if _, ok := rootMark(f.a.o.Root, f.a.euid); !ok {
		t.Skip("no mark on this file system (user extended attributes): nothing to compare")
	}
	f.a.applied.BodyDigest = strings.ToUpper(f.a.applied.BodyDigest)
	if held, ask := f.a.rootNewer(); held || ask {
		t.Fatalf("the state's digest in upper case: root newer %v, ask %v; want the mark read as the state's", held, ask)
	}
}
