package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/host/wire"
)

// lockedLog is a log written from several goroutines (the agent's loop, nats.go's,
// the status socket's): its tests read it as it grows.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAnotherMachineHoldingTheKeyIsSaid: the running agent's reports name a reply
// subject under its inbox; a mesh that answers one with the connections holding the
// node's key (this one and another machine's) makes the agent log, as an error, that
// another machine holds its key, from the other's address and not its own, once
// however many reports are answered, again after sharedKeyLogEvery or when another
// machine is named; `meshhost status` (linkStatus) says it while the mesh does,
// and stops a few heartbeats after the mesh stops.
func TestAnotherMachineHoldingTheKeyIsSaid(t *testing.T) {
	f := newFixture(t)
	var logs lockedLog
	f.a.log = slog.New(slog.NewTextHandler(&logs, nil))
	var clock struct {
		sync.Mutex
		now time.Time
	}
	clock.now = t0
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.now }
	advance := func(d time.Duration) { clock.Lock(); clock.now = clock.now.Add(d); clock.Unlock() }
	f.a.o.Now = now
	f.a.o.Heartbeat = 50 * time.Millisecond
	mb := startMeshBroker(t, f, func(int, wire.SyncRequest) int { return 0 })

	// The mesh: answers each report while others holds the key too.
	var mu sync.Mutex
	var others []wire.KeyHolder
	replies := map[string]bool{}
	if _, err := mb.nc.Subscribe(f.a.id.Subjects.Status, func(m *nats.Msg) {
		mu.Lock()
		replies[m.Reply] = true
		held := slices.Clone(others)
		mu.Unlock()
		if len(held) == 0 || m.Reply == "" {
			return
		}
		// The agent's own connection, as this broker numbers it: the one that
		// is not the mesh's.
		conns, err := mb.s.Connz(&server.ConnzOptions{})
		if err != nil {
			t.Errorf("connz: %v", err)
			return
		}
		mine, _ := mb.nc.GetClientID()
		for _, c := range conns.Conns {
			if c.Cid != mine {
				held = append(held, wire.KeyHolder{Server: mb.s.ID(), CID: c.Cid, Addr: c.IP, Since: t0})
			}
		}
		data, _ := json.Marshal(wire.StatusAnswer{V: wire.ProtocolVersion, SharedKey: held})
		mb.nc.Publish(m.Reply, data)
	}); err != nil {
		t.Fatal(err)
	}
	mb.nc.Flush()

	defer runAgent(t, f)()
	const line = "another machine holds this node's key"
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s; the log:\n%s", what, logs.String())
			}
		}
	}
	until("a report", func() bool { mu.Lock(); defer mu.Unlock(); return len(replies) > 0 })
	time.Sleep(200 * time.Millisecond) // reports a mesh that says nothing does not answer
	mu.Lock()
	for r := range replies {
		if !strings.HasPrefix(r, f.a.id.Subjects.InboxPrefix+".") {
			t.Errorf("a report names the reply subject %q, outside the node's inbox", r)
		}
	}
	mu.Unlock()
	if strings.Contains(logs.String(), line) || f.a.linkStatus().SharedKey != nil {
		t.Fatalf("said with no other machine named:\n%s", logs.String())
	}

	mu.Lock()
	others = []wire.KeyHolder{{Server: "NOTHER", CID: 7, Addr: "192.0.2.9", Since: t0.Add(-5 * time.Minute)}}
	mu.Unlock()
	until("logged", func() bool { return strings.Contains(logs.String(), line) })
	time.Sleep(300 * time.Millisecond) // six more heartbeats, each answered
	got := logs.String()
	if n := strings.Count(got, line); n != 1 {
		t.Fatalf("%d lines, want 1 however many reports are answered:\n%s", n, got)
	}
	said := got[strings.LastIndex(got[:strings.Index(got, line)], "\n")+1:]
	said = said[:strings.Index(said, "\n")]
	if !strings.Contains(said, "level=ERROR") || !strings.Contains(said, "from=192.0.2.9 ") || strings.Contains(said, "127.0.0.1") || !strings.Contains(said, "connections=2") {
		t.Fatalf("the line does not name the other machine alone, as an error: %s", said)
	}
	st := f.a.linkStatus().SharedKey
	if st == nil || !slices.Equal(st.From, []string{"192.0.2.9"}) || st.Connections != 2 || !st.Since.Equal(t0.Add(-5*time.Minute)) {
		t.Fatalf("meshhost status: %+v", st)
	}

	advance(sharedKeyLogEvery)
	until("logged again after the interval", func() bool { return strings.Count(logs.String(), line) == 2 })
	mu.Lock()
	others = append(others, wire.KeyHolder{Server: "NOTHER", CID: 8, Addr: "198.51.100.4"})
	mu.Unlock()
	// Another machine is news, but not more than a line each sharedKeyLogGap.
	time.Sleep(200 * time.Millisecond) // answers naming it, within the gap
	if n := strings.Count(logs.String(), line); n != 2 {
		t.Fatalf("%d lines within %s of the last, want 2:\n%s", n, sharedKeyLogGap, logs.String())
	}
	advance(sharedKeyLogGap)
	until("logged once the gap passed when another machine is named", func() bool {
		return strings.Count(logs.String(), line) == 3 && strings.Contains(logs.String(), "from=\"192.0.2.9, 198.51.100.4\"")
	})

	mu.Lock()
	others = nil
	mu.Unlock()
	time.Sleep(100 * time.Millisecond) // an answer on its way
	advance(sharedKeyShownFor*f.a.o.Heartbeat + time.Second)
	if st := f.a.linkStatus().SharedKey; st != nil {
		t.Fatalf("meshhost status still says it after the mesh stopped: %+v", st)
	}
}

// TestAnAgentHoldsThreeSubscriptions: the mesh's brokers cap a host connection's
// subscriptions at 4, and close one that holds 4 at their next reload (a control
// node admitted or removed: broker.DefaultHostSubscriptions), so 3 is what an agent
// may hold: its declaration subject, its status reports' inbox and nats.go's request
// inbox (its syncs). A 4th would close every agent of the fleet at each admission.
func TestAnAgentHoldsThreeSubscriptions(t *testing.T) {
	f := newFixture(t)
	f.a.o.Heartbeat = 50 * time.Millisecond
	synced := make(chan struct{}, 1)
	mb := startMeshBroker(t, f, func(int, wire.SyncRequest) int {
		select {
		case synced <- struct{}{}:
		default:
		}
		return 0
	})
	reported := make(chan struct{}, 1)
	if _, err := mb.nc.Subscribe(f.a.id.Subjects.Status, func(*nats.Msg) {
		select {
		case reported <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	mb.nc.Flush()
	defer runAgent(t, f)()
	for _, c := range []chan struct{}{synced, reported} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("the agent neither synced nor reported within 10 s")
		}
	}
	time.Sleep(200 * time.Millisecond) // a few heartbeats more: nothing subscribes later
	conns, err := mb.s.Connz(&server.ConnzOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := mb.nc.GetClientID()
	found := false
	for _, c := range conns.Conns {
		if c.Cid == mine {
			continue
		}
		found = true
		if c.NumSubs != 3 {
			t.Errorf("the agent's connection holds %d subscriptions, want 3 (below the mesh's cap of 4): %v", c.NumSubs, c.Subs)
		}
	}
	if !found {
		t.Fatal("no connection of the agent's at the broker")
	}
}

// runAgent runs the fixture's agent until the returned function stops it, which
// fails t if Run returned an error.
func runAgent(t *testing.T, f *fixture) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.a.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// TestANoRespondersAnswerToAStatusReportIsNoWarning: where nothing serves status
// reports (between two leaders; a revoked key's account while it waits for its
// notice), the broker answers a report's reply subject with an empty message whose
// Status header is 503. The agent passes over it: every agent of a fleet warned
// that the mesh's answer was not understood at each change of leader. An answer it
// does not understand, with a body, is still warned about.
func TestANoRespondersAnswerToAStatusReportIsNoWarning(t *testing.T) {
	f := newFixture(t)
	var logs lockedLog
	f.a.log = slog.New(slog.NewTextHandler(&logs, nil))
	f.a.o.Heartbeat = 50 * time.Millisecond
	mb := startMeshBroker(t, f, func(int, wire.SyncRequest) int { return 0 })
	var mu sync.Mutex
	var answer *nats.Msg
	answered := 0
	if _, err := mb.nc.Subscribe(f.a.id.Subjects.Status, func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if answer == nil || m.Reply == "" {
			return
		}
		reply := *answer
		reply.Subject = m.Reply
		if mb.nc.PublishMsg(&reply) == nil {
			answered++
		}
	}); err != nil {
		t.Fatal(err)
	}
	mb.nc.Flush()
	defer runAgent(t, f)()
	const line = "answer to a status report was not understood"
	answerWith := func(m *nats.Msg) {
		mu.Lock()
		answer, answered = m, 0
		mu.Unlock()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := answered
			mu.Unlock()
			if n >= 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d reports answered in 10s, want 3", n)
			}
		}
		time.Sleep(100 * time.Millisecond) // the last answer on its way to the agent
	}
	noResponders := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	answerWith(noResponders)
	if strings.Contains(logs.String(), line) {
		t.Fatalf("the broker's no-responders answer was warned about:\n%s", logs.String())
	}
	answerWith(&nats.Msg{Header: nats.Header{"Status": []string{"503"}}, Data: []byte("not an answer")})
	if !strings.Contains(logs.String(), line) {
		t.Fatalf("an answer with a body the agent does not understand was not warned about:\n%s", logs.String())
	}
}
