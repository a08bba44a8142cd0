package link

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// TestDialerSocketWatchedByTheKernel: a connection made by Dialer carries the
// keepalive and user-timeout settings the kernel needs to notice a lost broker,
// read back from the socket itself.
func TestDialerSocketWatchedByTheKernel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	c, err := Dialer().Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	get := func(level, opt int) int {
		t.Helper()
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("getsockopt(%d, %d): %v", level, opt, gerr)
		}
		return v
	}
	for _, c := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE (s)", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int(KeepAliveIdle / time.Second)},
		{"TCP_KEEPINTVL (s)", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, int(KeepAliveInterval / time.Second)},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, KeepAliveCount},
		{"TCP_USER_TIMEOUT (ms)", syscall.IPPROTO_TCP, tcpUserTimeout, int(UserTimeout / time.Millisecond)},
	} {
		if got := get(c.level, c.opt); got != c.want {
			t.Errorf("%s = %d, want %d", c.name, got, c.want)
		}
	}
}
