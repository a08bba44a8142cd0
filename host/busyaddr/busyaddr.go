// Package busyaddr listens on a TCP address another process may hold: the metrics
// endpoint's loopback port, which any local user may bind first. A daemon that
// refused to start for it could be kept down by that user; one that runs on without
// the endpoint, and takes the address once it is free, cannot.
package busyaddr

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Listen listens on addr. inUse reports that another process holds it (the caller
// may run on and Await it); any other error is the address's own (not this
// machine's, malformed), which a person must mend.
func Listen(addr string) (ln net.Listener, inUse bool, err error) {
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		return nil, errors.Is(err, syscall.EADDRINUSE), err
	}
	return ln, false, nil
}

// Await listens on addr as soon as it is free, trying every every, until ctx ends
// (nil then).
func Await(ctx context.Context, addr string, every time.Duration) net.Listener {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if ln, err := net.Listen("tcp", addr); err == nil {
			return ln
		}
	}
}

// ListenError is a TCP address this machine could not listen on, said with what to
// do for its likely cause: another process holding it, an address this machine
// does not have, a privileged port. Err is the system's error.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	port := e.Addr
	if _, p, err := net.SplitHostPort(e.Addr); err == nil {
		port = p
	}
	switch {
	case errors.Is(e.Err, syscall.EADDRINUSE):
		return "cannot listen on " + e.Addr + ": another process listens there (`ss -ltnp 'sport = :" + port + "'` names it): stop it, or give another address"
	case errors.Is(e.Err, syscall.EADDRNOTAVAIL):
		return "cannot listen on " + e.Addr + ": this machine has no such address (`ip -br addr` lists those it has)"
	case errors.Is(e.Err, syscall.EACCES):
		start := unprivilegedPortStart()
		if n, err := strconv.Atoi(port); err == nil && n < start {
			return "cannot listen on " + e.Addr + ": a port below " + strconv.Itoa(start) + " needs root (or CAP_NET_BIND_SERVICE): give a port from " + strconv.Itoa(start) + " up"
		}
		return "cannot listen on " + e.Addr + ": permission denied (" + e.Err.Error() + "): a security policy (SELinux, AppArmor, a firewall's socket rules) refuses this address to this process"
	}
	return "cannot listen on " + e.Addr + ": " + e.Err.Error()
}

// unprivilegedPortStart is the first port any user may listen on: Linux's
// net.ipv4.ip_unprivileged_port_start, 1024 where it cannot be read.
func unprivilegedPortStart() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return 1024
}

// Unwrap returns the system's error.
func (e *ListenError) Unwrap() error { return e.Err }

// Listened says why err, a failure to listen on addr, happened, as a *ListenError;
// nil stays nil.
func Listened(addr string, err error) error {
	if err == nil {
		return nil
	}
	var le *ListenError
	if errors.As(err, &le) {
		return err
	}
	return &ListenError{Addr: addr, Err: err}
}

// Check listens on each address and closes it at once: nil when this machine can
// listen on them all now, else the first one's *ListenError.
func Check(addrs ...string) error {
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return Listened(a, err)
		}
		ln.Close()
	}
	return nil
}
