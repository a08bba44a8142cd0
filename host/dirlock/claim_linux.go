//go:build linux

package dirlock

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
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
	return fmt.Sprintf("@meshhost-root-%d-%d", st.Dev, st.Ino), true
}

// claimRoot takes the claim of the directory fi describes: release gives it up.
// When another process holds it, holder says whose, and nothing is claimed.
func claimRoot(fi fs.FileInfo) (release func(), holder *claimant, err error) {
	name, ok := rootClaimName(fi)
	if !ok {
		return func() {}, nil, nil
	}
	return claimName(name)
}

// claimName takes the claim name (see claimRoot). A name taken by something that
// does not answer (bound and not listening, or its backlog full: any user can make
// either) is held by someone unknown (uid -1): the agent runs saying so, where it
// took itself for the holder, silently (a review).
func claimName(name string) (release func(), holder *claimant, err error) {
	// An agent starting at the same instant may be between its bind and its
	// listen for as long as a loaded machine holds it there: a second's tries.
	deadline := time.Now().Add(claimWait)
	for {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			go acceptAndClose(l)
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

// acceptAndClose lets probes in and closes them at once until l is closed: a
// backlog left full would turn a second agent's probe away as if nothing held the
// root. An error that is not l's closing (out of descriptors) is waited out.
func acceptAndClose(l *net.UnixListener) {
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		c.Close()
	}
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
