// Package busyaddr listens on a TCP address another process may hold: the metrics
// endpoint's loopback port, which any local user may bind first. A daemon that
// refused to start for it could be kept down by that user; one that runs on without
// the endpoint, and takes the address once it is free, cannot.
package busyaddr

import (
	"context"
	"errors"
	"net"
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
