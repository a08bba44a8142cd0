package agent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// fakeBroker speaks as much of the NATS protocol as a client's connection needs,
// and counts the messages published to subject.
type fakeBroker struct {
	addr      string
	subject   string
	published atomic.Int64
	mu        sync.Mutex
	ln        net.Listener
	conns     []net.Conn
}

func (b *fakeBroker) listen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	b.ln, b.addr = ln, ln.Addr().String()
	b.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			go b.serve(c)
		}
	}()
}

func (b *fakeBroker) serve(c net.Conn) {
	defer c.Close()
	fmt.Fprint(c, `INFO {"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576,"headers":true}`+"\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "PING":
			fmt.Fprint(c, "PONG\r\n")
		case f[0] == "PUB" || f[0] == "HPUB":
			var n int
			fmt.Sscan(f[len(f)-1], &n)
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			if f[1] == b.subject {
				b.published.Add(1)
			}
		}
	}
}

// down closes the listener and every connection: the client reconnects, in vain.
func (b *fakeBroker) down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ln.Close()
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
}

// TestNoSyncIsBufferedWhileDisconnected: a sync retried while the agent is
// disconnected sends nothing, rather than a request that waits in nats.go's
// reconnection buffer and reaches the mesh with all the others once the broker is
// back (an outage of an hour: dozens a host, a fleet's worth at once, each answered
// with the node's envelopes). The reconnection starts a sync of its own.
func TestNoSyncIsBufferedWhileDisconnected(t *testing.T) {
	f := newFixture(t)
	b := &fakeBroker{addr: "127.0.0.1:0", subject: f.a.id.Subjects.Sync}
	b.listen(t)
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect("nats://"+b.addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b.down()
	deadline := time.Now().Add(5 * time.Second)
	for nc.IsConnected() {
		if time.Now().After(deadline) {
			t.Fatal("the client did not notice the broker went away")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The retry timer fires while disconnected, as it does during an outage.
	ctx, cancel := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	sy := &syncer{a: f.a, nc: nc, done: make(chan syncResult, 1)}
	sy.start(ctx, &workers)
	b.listen(t)
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("the client did not reconnect")
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cancel()
	workers.Wait()
	if n := b.published.Load(); n != 0 {
		t.Fatalf("%d sync request(s) made while disconnected reached the broker once it was back, want 0", n)
	}
}
