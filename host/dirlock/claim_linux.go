//go:build linux

package dirlock

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rootClaimName is the abstract Unix socket name (Linux's: no file, gone with its
// process) that claims the directory fi describes.
func rootClaimName(fi fs.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%s%d-%d", claimPrefix, st.Dev, st.Ino), true
}

// claimPrefix begins the name of every root's claim.
const claimPrefix = "@meshhost-root-"

// claimRoot takes the claim of the directory fi describes, whose absolute path is
// abs: release gives it up. When another process holds it, holder says whose, and
// nothing is claimed.
func claimRoot(abs string, fi fs.FileInfo) (release func(), holder *claimant, err error) {
	name, ok := rootClaimName(fi)
	if !ok {
		return func() {}, nil, nil
	}
	return claimName(name, abs)
}

// claimName takes the claim name (see claimRoot). A name taken by something that
// does not answer (bound and not listening, or its backlog full: any user can make
// either) is held by someone unknown (uid -1): the agent runs saying so, where it
// took itself for the holder, silently (a review). Whoever connects to the claim is
// told path, the root claimed ("" tells nothing, as an agent of an earlier version
// did).
func claimName(name, path string) (release func(), holder *claimant, err error) {
	// An agent starting at the same instant may be between its bind and its
	// listen for as long as a loaded machine holds it there: a second's tries.
	deadline := time.Now().Add(claimWait)
	for {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			go acceptAndClose(l, path)
			return func() { l.Close() }, nil, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, err
		}
		if h := claimantOf(name); h != nil {
			return func() {}, h, nil
		}
		if time.Now().After(deadline) {
			return func() {}, &claimant{pid: 0, uid: -1}, nil
		}
		// Its holder went between the two calls, or is between its bind and
		// its listen: try again shortly.
		time.Sleep(20 * time.Millisecond)
	}
}

// claimWait is how long a claim name taken by something that does not answer is
// tried again before it counts as held by someone unknown.
const claimWait = time.Second

// acceptAndClose lets probes in, tells each the root claimed (path) and closes it
// at once, until l is closed: a backlog left full would turn a second agent's probe
// away as if nothing held the root, and an agent starting on a directory above the
// root learns from path that it holds this one (claimInside). An error that is not
// l's closing (out of descriptors) is waited out.
func acceptAndClose(l *net.UnixListener, path string) {
	for {
		c, err := l.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		tell(c, path)
	}
}

// tell writes path to c and closes it. The write does not wait on the prober for
// long (a socket's buffer takes a path whole): the accept loop stays open to the
// next. Only a prober whose word counts (root, or this agent's user: claimant.agent)
// is told: abstract names have no permissions, and any local user could read every
// agent's root, one under a directory they may not list too (a review).
func tell(c *net.UnixConn, path string) {
	defer c.Close()
	if path == "" {
		return
	}
	if p := peerOf(c); p == nil || !p.agent() {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(claimAnswerWait))
	_, _ = io.WriteString(c, path)
}

// rootClaimant returns who holds the claim of the directory fi describes, nil if
// nobody does.
func rootClaimant(fi fs.FileInfo) *claimant {
	name, ok := rootClaimName(fi)
	if !ok {
		return nil
	}
	return claimantOf(name)
}

// claimantOf connects to the claim name and asks the kernel who listens there
// (SO_PEERCRED: the credentials it listened with).
func claimantOf(name string) *claimant {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil
	}
	defer c.Close()
	return peerOf(c)
}

// peerOf asks the kernel who listens at the other end of c (SO_PEERCRED).
func peerOf(c *net.UnixConn) *claimant {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil || credErr != nil {
		return nil
	}
	return &claimant{pid: int(cred.Pid), uid: int(cred.Uid)}
}

// Bounds on looking for the claims inside a root: claim names are anyone's to make,
// and none may hold an agent's start up for long.
const (
	// claimsAsked is how many claims of agents (this user's or root's) are read
	// at most; claimNamesMax how many claim names are looked at, whoever holds
	// them: another user's cost a connection and the kernel's word on its holder,
	// and counted among the first, a thousand of theirs hid a real one (a review).
	claimsAsked   = 1024
	claimNamesMax = 1 << 16
	// claimAnswerWait is how long a claim is waited for, to connect and to answer.
	claimAnswerWait = 200 * time.Millisecond
	// claimPathMax is the longest root a claim may answer (PATH_MAX).
	claimPathMax = 4096
)

// claimInside finds the claim of an agent (this user's or root's) on a directory
// strictly inside abs, an absolute path with its links resolved: that root and its
// holder, or "" and nil. A claim's holder says its root (acceptAndClose); the root
// is taken where its links lead now, and counts only if its device and inode are
// those the claim is named after, so that a claim cannot name a root it does not
// hold. A claim that says nothing (an agent of an earlier version) is not found.
// When the claims could not all be looked at, unchecked says why (the agent logs
// it: the look failed open without a word, a review).
func claimInside(abs string) (root string, holder *claimant, unchecked string) {
	names, more, err := listeningClaims()
	if err != nil {
		return "", nil, fmt.Sprintf("the directories inside the managed root could not be looked for another agent's root (%v): "+
			"an agent on a root inside this one would not be refused", err)
	}
	if more {
		unchecked = fmt.Sprintf("more than %d claim names listen on this machine: the directories inside the managed root were looked for another agent's root among the first %d only", claimNamesMax, claimNamesMax)
	}
	asked := 0
	for _, name := range names {
		said, h := askClaim(name)
		if h == nil {
			continue
		}
		if asked++; asked > claimsAsked {
			unchecked = fmt.Sprintf("more than %d agents' claims listen on this machine: the directories inside the managed root were looked for another agent's root among the first %d only", claimsAsked, claimsAsked)
			break
		}
		if !filepath.IsAbs(said) {
			continue
		}
		root, err := filepath.EvalSymlinks(said)
		if err == nil && inside(abs, root) && confirmed(name, root) {
			return root, h, ""
		}
	}
	return "", nil, unchecked
}

// listeningClaims lists the root claims listening in this network namespace, at
// most claimNamesMax of them; more says there were more.
func listeningClaims() (names []string, more bool, err error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	return claimsListed(f)
}

// acceptConn is __SO_ACCEPTCON, the flag of a listening socket in /proc/net/unix.
const acceptConn = 1 << 16

// claimsListed reads /proc/net/unix's lines ("Num RefCount Protocol Flags Type St
// Inode Path") for the claim names that listen, once each: the connections a claim
// accepted carry its name too. At most claimNamesMax are listed; more says there
// were more.
func claimsListed(r io.Reader) (names []string, more bool, err error) {
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 8 || !strings.HasPrefix(f[7], claimPrefix) || seen[f[7]] {
			continue
		}
		if flags, err := strconv.ParseUint(f[3], 16, 32); err != nil || flags&acceptConn == 0 {
			continue
		}
		if len(names) == claimNamesMax {
			return names, true, nil
		}
		seen[f[7]] = true
		names = append(names, f[7])
	}
	return names, false, sc.Err()
}

// askClaim connects to the claim name and, if its holder is an agent's, reads the
// root it says it holds: "" and nil when it is not an agent's, or does not answer
// in time. Another user's claim is not read: it could make it answer slowly.
func askClaim(name string) (string, *claimant) {
	d := net.Dialer{Timeout: claimAnswerWait}
	conn, err := d.Dial("unix", name)
	if err != nil {
		return "", nil
	}
	defer conn.Close()
	c, ok := conn.(*net.UnixConn)
	if !ok {
		return "", nil
	}
	h := peerOf(c)
	if h == nil || !h.agent() {
		return "", nil
	}
	if err := c.SetReadDeadline(time.Now().Add(claimAnswerWait)); err != nil {
		return "", nil
	}
	b, err := io.ReadAll(io.LimitReader(c, claimPathMax+1))
	if err != nil || len(b) > claimPathMax {
		return "", nil
	}
	return string(b), h
}

// inside reports whether path lies strictly inside dir, both absolute and clean.
func inside(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// confirmed reports whether root is the directory the claim name is named after.
func confirmed(name, root string) bool {
	fi, err := os.Stat(root)
	if err != nil || !fi.IsDir() {
		return false
	}
	n, ok := rootClaimName(fi)
	return ok && n == name
}
