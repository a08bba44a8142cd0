package replication

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"mesh/controlplane/pki"
	"mesh/controlplane/state"
)

// pinOf is the pin of the leaf a TLS configuration presents.
func pinOf(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	pin := pki.PinOf(leaf)
	return hex.EncodeToString(pin[:])
}

// members is the set of pins a test allows, changed while streams read it.
type members struct {
	mu   sync.Mutex
	pins map[string]bool
}

func allow(pins ...string) *members {
	m := &members{pins: map[string]bool{}}
	m.set(pins...)
	return m
}

func (m *members) set(pins ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pins)
	for _, p := range pins {
		m.pins[p] = true
	}
}

func (m *members) allowed(pin string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pins[pin]
}

// acceptAll hands every connection s accepts to the returned channel.
func acceptAll(s *tlsStream) <-chan net.Conn {
	out := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			out <- c
		}
	}()
	return out
}

func newStream(t *testing.T, cfg *tls.Config, allowed func(string) bool, log *slog.Logger) *tlsStream {
	t.Helper()
	s, err := newTLSStream("127.0.0.1:0", nil, cfg, allowed, nil, log, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// expectClosed checks that c was closed by its peer: a read ends at once, and not
// by the deadline.
func expectClosed(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open (read: %v)", what, err)
	}
}

func expectNothingAccepted(t *testing.T, accepted <-chan net.Conn, what string) {
	t.Helper()
	select {
	case c := <-accepted:
		c.Close()
		t.Fatalf("%s reached Raft", what)
	case <-time.After(300 * time.Millisecond):
	}
}

func expectAccepted(t *testing.T, accepted <-chan net.Conn, what string) net.Conn {
	t.Helper()
	select {
	case c := <-accepted:
		return c
	case <-time.After(2 * time.Second):
		t.Fatalf("%s was not accepted", what)
		return nil
	}
}

// TestRaftPortRefusesPeersNotAllowed: with PeerAllowed set, a leaf of the mesh CA is
// not enough. A peer whose pin is not allowed is refused when it dials in (nothing
// reaches Raft, and the log says why) and when dialled (Dial says why); an allowed
// peer gets through both ways.
func TestRaftPortRefusesPeersNotAllowed(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	targetTLS, goodTLS, removedTLS := leafConfig(t, ca), leafConfig(t, ca), leafConfig(t, ca)
	var logs syncBuffer
	target := newStream(t, targetTLS, allow(pinOf(t, targetTLS), pinOf(t, goodTLS)).allowed, slog.New(slog.NewTextHandler(&logs, nil)))
	accepted := acceptAll(target)
	good := newStream(t, goodTLS, nil, slog.New(slog.DiscardHandler))
	goodAccepted := acceptAll(good)
	removed := newStream(t, removedTLS, nil, slog.New(slog.DiscardHandler))
	removedAccepted := acceptAll(removed)

	// The removed peer dials in: its handshake completes on its side, and the
	// target closes the connection before Raft sees it.
	c, err := removed.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("the removed peer's handshake failed on its side (%v); the refusal should come after it", err)
	}
	defer c.Close()
	expectClosed(t, c, "the removed peer's connection in")
	expectNothingAccepted(t, accepted, "the removed peer's connection")
	if !strings.Contains(logs.snapshot().String(), "its certificate is not a current control node's") {
		t.Errorf("the refusal was not logged with its reason:\n%s", logs.snapshot())
	}

	// The target dials the removed peer: Dial refuses it.
	if c, err := target.Dial(raft.ServerAddress(removed.Addr().String()), time.Second); !errors.Is(err, errNotMember) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling a peer that is not allowed: %v, want the refusal", err)
	} else if !strings.Contains(err.Error(), "not a current control node's") || !strings.Contains(err.Error(), removed.Addr().String()) {
		t.Errorf("the refusal does not say what it refused and why: %v", err)
	}
	dialled := expectAccepted(t, removedAccepted, "the target's connection to the removed peer")
	defer dialled.Close()
	expectClosed(t, dialled, "the target's connection to the removed peer")
	// Both refusals are counted (the metric mesh_raft_connections_refused_total).
	if n := target.notMembers.Load(); n != 2 {
		t.Errorf("%d refusals of a peer not allowed counted, want 2 (one in, one out)", n)
	}

	// The allowed peer gets through, both ways.
	in, err := good.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	expectAccepted(t, accepted, "the allowed peer's connection").Close()
	out, err := target.Dial(raft.ServerAddress(good.Addr().String()), time.Second)
	if err != nil {
		t.Fatalf("dialling an allowed peer: %v", err)
	}
	defer out.Close()
	expectAccepted(t, goodAccepted, "the target's connection to the allowed peer").Close()
}

// TestDropPeersNotAllowed: once a peer is no longer allowed, dropNotAllowed closes
// its connections, accepted and dialled, and no other peer's; Raft reading the
// accepted one sees the end of the stream, not an error to log. The peer cannot
// connect again, either way.
func TestDropPeersNotAllowed(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	targetTLS, leavingTLS, stayingTLS := leafConfig(t, ca), leafConfig(t, ca), leafConfig(t, ca)
	set := allow(pinOf(t, targetTLS), pinOf(t, leavingTLS), pinOf(t, stayingTLS))
	target := newStream(t, targetTLS, set.allowed, slog.New(slog.DiscardHandler))
	accepted := acceptAll(target)
	leaving := newStream(t, leavingTLS, nil, slog.New(slog.DiscardHandler))
	leavingAccepted := acceptAll(leaving)
	staying := newStream(t, stayingTLS, nil, slog.New(slog.DiscardHandler))

	leavingIn, err := leaving.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer leavingIn.Close()
	acceptedFromLeaving := expectAccepted(t, accepted, "the leaving peer's connection")
	defer acceptedFromLeaving.Close()
	dialledToLeaving, err := target.Dial(raft.ServerAddress(leaving.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer dialledToLeaving.Close()
	leavingOut := expectAccepted(t, leavingAccepted, "the target's connection to the leaving peer")
	defer leavingOut.Close()
	stayingIn, err := staying.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer stayingIn.Close()
	acceptedFromStaying := expectAccepted(t, accepted, "the staying peer's connection")
	defer acceptedFromStaying.Close()

	if n := target.dropNotAllowed(); n != 0 {
		t.Fatalf("dropped %d connections with every peer allowed", n)
	}
	set.set(pinOf(t, targetTLS), pinOf(t, stayingTLS))
	if n := target.dropNotAllowed(); n != 2 {
		t.Fatalf("dropped %d connections, want the leaving peer's 2", n)
	}
	if n := target.dropNotAllowed(); n != 0 {
		t.Fatalf("dropped %d more connections on a second call", n)
	}
	expectClosed(t, leavingIn, "the leaving peer's connection in")
	expectClosed(t, leavingOut, "the target's connection out to the leaving peer")
	if _, err := acceptedFromLeaving.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("Raft reading a dropped connection gets %v, want io.EOF", err)
	}

	// The staying peer's connection still carries bytes both ways.
	if _, err := stayingIn.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = acceptedFromStaying.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(acceptedFromStaying, make([]byte, 1)); err != nil {
		t.Fatalf("the staying peer's connection was disturbed: %v", err)
	}

	// The leaving peer cannot come back.
	again, err := leaving.Dial(raft.ServerAddress(target.Addr().String()), time.Second)
	if err == nil {
		defer again.Close()
		expectClosed(t, again, "the leaving peer's new connection")
	}
	expectNothingAccepted(t, accepted, "the leaving peer's new connection")
	if c, err := target.Dial(raft.ServerAddress(leaving.Addr().String()), time.Second); !errors.Is(err, errNotMember) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling the leaving peer again: %v, want the refusal", err)
	}
	// Closed connections are no longer tracked.
	acceptedFromStaying.Close()
	target.mu.Lock()
	tracked := len(target.peers)
	target.mu.Unlock()
	if tracked != 0 {
		t.Errorf("%d connections still tracked after every one was closed", tracked)
	}
}

// startFollower opens cfg and adds it to leader's cluster as a nonvoter, and waits
// until it applied what the leader has.
func startFollower(t *testing.T, leader *Node, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := leader.AddNonvoter(cfg.ID, cfg.Bind, time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower catches up", func() bool { return n.AppliedIndex() >= leader.raft.LastIndex() })
	return n
}

// twoVoters are the timeouts of a test cluster of two voters. Its leader steps down
// when the other voter has not answered within the leader lease, and then every
// command fails with leadership lost. Heartbeat 100 ms, a 50 ms lease, is shorter
// than the stalls of the race detector on a loaded 2-core machine; a 1 s heartbeat
// (a 500 ms lease, half the product's default) outlasts them and costs the test
// about half a second more for the first leader's election.
var twoVoters = Timeouts{Heartbeat: time.Second, Commit: 5 * time.Millisecond}

func probe(t *testing.T, n *Node, id string) {
	t.Helper()
	if _, err := n.Apply(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: id}}, 2*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestRemovedPeerStopsReplicating: a follower whose pin the leader no longer allows
// stops receiving the log once the leader drops its connections: Raft redials it,
// and the leader's own dial refuses it. Allowed again, it catches up.
func TestRemovedPeerStopsReplicating(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	quick := Timeouts{Heartbeat: 100 * time.Millisecond, Commit: 5 * time.Millisecond}
	discard := slog.New(slog.DiscardHandler)
	leaderTLS, followerTLS := leafConfig(t, ca), leafConfig(t, ca)
	set := allow(pinOf(t, leaderTLS), pinOf(t, followerTLS))
	leader := startLeader(t, Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leaderTLS, FSM: &countFSM{}, Logger: discard, Timeouts: quick, PeerAllowed: set.allowed})
	defer leader.Close()
	fsm := &countFSM{}
	follower := startFollower(t, leader, Config{Dir: t.TempDir(), ID: "cp-2", Bind: freeAddr(t), TLS: followerTLS, FSM: fsm, Logger: discard, Timeouts: quick})
	probe(t, leader, "p1")
	waitFor(t, "the follower applies p1", func() bool { return fsm.n.Load() == 1 })

	set.set(pinOf(t, leaderTLS))
	if n := leader.DropPeersNotAllowed(); n == 0 {
		t.Fatal("the leader dropped no connection of the removed follower")
	}
	for i := range 5 {
		probe(t, leader, fmt.Sprintf("after-%d", i))
	}
	time.Sleep(time.Second) // ten heartbeats: time enough for Raft to redial
	if got := fsm.n.Load(); got != 1 {
		t.Fatalf("the removed follower applied %d commands, want only the 1 before its removal", got)
	}

	set.set(pinOf(t, leaderTLS), pinOf(t, followerTLS))
	waitFor(t, "the follower, allowed again, catches up", func() bool { return fsm.n.Load() == 6 })
	_ = follower
}

// TestReplicationAcrossADropThatClosesNothing: with every member allowed,
// DropPeersNotAllowed closes nothing on either node, and a two-voter cluster goes
// on committing (each command needs the follower's vote).
func TestReplicationAcrossADropThatClosesNothing(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "mesh")
	discard := slog.New(slog.DiscardHandler)
	leaderTLS, followerTLS := leafConfig(t, ca), leafConfig(t, ca)
	set := allow(pinOf(t, leaderTLS), pinOf(t, followerTLS))
	lcfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: leaderTLS, FSM: &countFSM{}, Logger: discard, Timeouts: twoVoters, PeerAllowed: set.allowed}
	leader := startLeader(t, lcfg)
	defer leader.Close()
	fsm := &countFSM{}
	fcfg := Config{Dir: t.TempDir(), ID: "cp-2", Bind: freeAddr(t), TLS: followerTLS, FSM: fsm, Logger: discard, Timeouts: twoVoters, PeerAllowed: set.allowed}
	follower := startFollower(t, leader, fcfg)
	if err := leader.Promote("cp-2", fcfg.Bind, time.Second); err != nil {
		t.Fatal(err)
	}
	probe(t, leader, "p1")
	for i := range 5 {
		if n := leader.DropPeersNotAllowed() + follower.DropPeersNotAllowed(); n != 0 {
			t.Fatalf("dropped %d connections with every member allowed", n)
		}
		probe(t, leader, fmt.Sprintf("p%d", i+2))
	}
	waitFor(t, "the follower applies every command", func() bool { return fsm.n.Load() == 6 })
	if !leader.IsLeader() {
		t.Fatal("the leader lost its leadership")
	}
}

// TestForgedAppendEntriesFromALeafNotAllowed is the attack pins stop: a machine
// that kept a leaf of the mesh CA (a control node since removed) sends an
// AppendEntries RPC claiming to lead at a higher term, with a command after the
// target's last entry, committed. Raft believes the header and the term of any
// peer that completes the handshake: without pins the target steps down, takes
// the term and applies the command. With pins it applies nothing and keeps
// leading.
func TestForgedAppendEntriesFromALeafNotAllowed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		pinned      bool
		wantApplied bool
	}{
		{"no pins, as before", false, true},
		{"pinned", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ca := newCA(t, "mesh")
			targetTLS, attackerTLS := leafConfig(t, ca), leafConfig(t, ca)
			fsm := &countFSM{}
			cfg := Config{Dir: t.TempDir(), ID: "cp-1", Bind: freeAddr(t), TLS: targetTLS, FSM: fsm, Logger: slog.New(slog.DiscardHandler),
				Timeouts: Timeouts{Heartbeat: time.Minute}} // no election of its own while the test looks
			if tt.pinned {
				cfg.PeerAllowed = allow(pinOf(t, targetTLS)).allowed
			}
			target := startLeader(t, cfg)
			defer target.Close()
			probe(t, target, "p1")
			term, last := target.raft.CurrentTerm(), target.raft.LastIndex()
			var lastLog raft.Log
			if err := target.store.GetLog(last, &lastLog); err != nil {
				t.Fatal(err)
			}

			resp, err := forgeAppendEntries(t, attackerTLS, cfg.ID, cfg.Bind, term+10, lastLog)
			if tt.wantApplied {
				waitFor(t, "the target applies the forged command", func() bool { return fsm.n.Load() == 2 })
				return
			}
			time.Sleep(300 * time.Millisecond)
			if got := fsm.n.Load(); got != 1 {
				t.Fatalf("the target applied %d commands, the forged one among them (RPC: %+v, %v)", got, resp, err)
			}
			if err == nil {
				t.Errorf("the forged RPC was answered: %+v", resp)
			}
			if got := target.raft.CurrentTerm(); got != term || !target.IsLeader() || target.raft.LastIndex() != last {
				t.Fatalf("the target took the forged RPC: term %d → %d, leader %v, last index %d → %d", term, got, target.IsLeader(), last, target.raft.LastIndex())
			}
		})
	}
}

// forgeAppendEntries sends, as an attacker would, over the stream layer with leaf
// attacker, an AppendEntries that claims leadership at term and appends one
// command after last, committed.
func forgeAppendEntries(t *testing.T, attacker *tls.Config, targetID, target string, term uint64, last raft.Log) (*raft.AppendEntriesResponse, error) {
	t.Helper()
	stream := newStream(t, attacker, nil, slog.New(slog.DiscardHandler))
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 1, Timeout: 2 * time.Second, Logger: hclog.NewNullLogger()})
	defer trans.Close()
	data, err := json.Marshal(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: "forged"}, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	addr := []byte(stream.Addr().String())
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("cp-9"), Addr: addr},
		Term:              term,
		Leader:            addr,
		PrevLogEntry:      last.Index,
		PrevLogTerm:       last.Term,
		Entries:           []*raft.Log{{Index: last.Index + 1, Term: term, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last.Index + 1,
	}
	var resp raft.AppendEntriesResponse
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- trans.AppendEntries(raft.ServerID(targetID), raft.ServerAddress(target), req, &resp) }()
	select {
	case err := <-done:
		return &resp, err
	case <-ctx.Done():
		t.Fatal("the forged RPC neither failed nor was answered")
		return nil, nil
	}
}
