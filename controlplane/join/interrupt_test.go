package join

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/tokenfmt"
)

// TestJoinRefusesADirectoryInUse: while another process holds the data directory, a
// join is refused at once, naming it, and writes nothing.
func TestJoinRefusesADirectoryInUse(t *testing.T) {
	d := datadir.Dir(t.TempDir())
	lock, err := d.Lock("meshctl serve")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	tok := controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	err = Join(t.Context(), Options{Dir: d, Token: tok})
	if !errors.Is(err, datadir.ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d (meshctl serve)", os.Getpid())) {
		t.Fatalf("err = %v, want ErrInUse naming this process", err)
	}
	if d.Exists(pendingFile) {
		t.Fatal("a refused join wrote its keys")
	}
}

// TestJoinInterruptedWhileConnecting: a broker that accepts the connection and never
// answers holds the join in the TLS handshake; when the context ends the join stops
// at once, wrapping the cause and saying how to resume.
func TestJoinInterruptedWhileConnecting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, silent, until the test ends
		}
	}()
	d := datadir.Dir(filepath.Join(t.TempDir(), "cp-2"))
	cause := errors.New("interrupted by SIGTERM")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(300*time.Millisecond, func() { cancel(cause) })
	start := time.Now()
	// The command to run again is the one run, the token's file named (printed
	// without it, it waited on stdin: a docs walkthrough).
	rerun := "meshctl join --data " + string(d) + " --token-file cp-2.txt"
	err = Join(ctx, Options{Dir: d, Token: controlToken(t, ln.Addr().String(), [32]byte{1}, tokenfmt.RoleControl, time.Now()), Command: rerun})
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the join took %s to stop", took)
	}
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "while connecting to the mesh") || !strings.Contains(err.Error(), "run `"+rerun+"` again with the same token") {
		t.Fatalf("err = %v, want the cause, what it was doing and how to resume", err)
	}
	if d.Exists(datadir.ConfigFile) {
		t.Fatal("an interrupted admission wrote mesh.json")
	}
}
