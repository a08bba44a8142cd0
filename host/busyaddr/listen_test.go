package busyaddr

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestCheckSaysWhatToDo: an address another process holds, and one this machine
// does not have, are each said with their cause and what to do, the system's error
// kept for errors.Is (bootstrap offered both causes at once; serve passed on
// nats-server's words).
func TestCheckSaysWhatToDo(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	err = Check(addr)
	var le *ListenError
	if !errors.As(err, &le) || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "another process listens there") ||
		!strings.Contains(err.Error(), "sport = :"+port) {
		t.Errorf("a port held: %v", err)
	}
	err = Check("192.0.2.1:7300") // TEST-NET-1: no machine's own
	if !errors.Is(err, syscall.EADDRNOTAVAIL) || !strings.Contains(err.Error(), "this machine has no such address") {
		t.Errorf("an address not this machine's: %v", err)
	}
	if err := Check("127.0.0.1:0"); err != nil {
		t.Errorf("a free port: %v", err)
	}
	if Listened("x", nil) != nil || Listened("x", le) != le {
		t.Error("Listened changed nil, or wrapped a ListenError again")
	}
}

// TestAPermissionRefusedIsSaidByItsPort: a port below the first unprivileged one
// is said to need root; one above it refused all the same, to be a security policy's
// doing (it was said to need root whatever the port: a review).
func TestAPermissionRefusedIsSaidByItsPort(t *testing.T) {
	start := unprivilegedPortStart()
	above := &ListenError{Addr: "127.0.0.1:" + strconv.Itoa(start+1000), Err: syscall.EACCES}
	if !strings.Contains(above.Error(), "security policy") || strings.Contains(above.Error(), "needs root") {
		t.Errorf("port %d: %v", start+1000, above)
	}
	if start == 0 {
		return // every port is any user's here
	}
	below := &ListenError{Addr: "127.0.0.1:" + strconv.Itoa(start-1), Err: syscall.EACCES}
	if !strings.Contains(below.Error(), "needs root") || !errors.Is(below, syscall.EACCES) {
		t.Errorf("port %d: %v", start-1, below)
	}
}
