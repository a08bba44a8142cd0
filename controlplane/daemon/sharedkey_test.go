package daemon

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestAKeyHeldTwicePastTheGraceIsFailing: a node whose key two connections hold is
// shown with both, and counted converged while that may still be a reconnection.
// Past the grace it is failing key_shared wherever convergence is judged: the
// roster that `status` reads, `declare --wait`'s progress and the metrics. Each
// report naming a reply subject is then answered with the connections holding the
// key, this one among them by its broker's id and its connection id there; before
// the grace, and once one connection is left, reports are not answered.
func TestAKeyHeldTwicePastTheGraceIsFailing(t *testing.T) {
	const grace = 3 * time.Second
	d, _ := runDaemon(t, Options{Dir: bootstrapped(t, "clone"), SharedKeyGrace: grace, wrapAuth: withObserver})
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	id := hex.EncodeToString([]byte(strings.Repeat("c", 32)))
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: id, Node: "web-1", Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpEnrol, At: d.now().UTC(), Enrol: &state.EnrolCmd{TokenID: id, Node: "web-1", Role: state.RoleWorker, PublicKey: pub}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("enrol web-1: %v %v", err, res.Err)
		}
	}
	var declared uint64
	var epoch uint64
	d.fsm.Read(func(s *state.State) { declared, epoch = s.Nodes["web-1"].Declared.Version, s.Keyring.Epoch })

	connect := func(name string) *nats.Conn {
		t.Helper()
		nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.NoReconnect(), nats.Name(name),
			nats.CustomInboxPrefix(api.NodeInbox("web-1")), nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	report, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "web-1", HaveApplied: true, AppliedVersion: declared, KeyringEpoch: epoch})
	// ask sends a report naming a reply subject and returns the answer, if one
	// comes within wait.
	ask := func(nc *nats.Conn, wait time.Duration) (api.StatusAnswer, bool) {
		t.Helper()
		inbox := nc.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := nc.PublishMsg(&nats.Msg{Subject: api.StatusSubject("web-1"), Reply: inbox, Data: report}); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(wait)
		if err != nil {
			return api.StatusAnswer{}, false
		}
		var a api.StatusAnswer
		if err := json.Unmarshal(m.Data, &a); err != nil {
			t.Fatalf("the answer %q: %v", m.Data, err)
		}
		return a, true
	}
	view := func() api.NodeView {
		t.Helper()
		res, err := d.nodes(api.NodesRequest{Nodes: []string{"web-1"}})
		if err != nil || len(res.Nodes) != 1 {
			t.Fatalf("nodes: %+v, %v", res, err)
		}
		return res.Nodes[0]
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
		}
	}
	progress := func() api.TargetProgress {
		t.Helper()
		res, err := d.progress(api.ProgressRequest{Targets: []api.Assignment{{Node: "web-1", Version: declared}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Others) == 0 {
			return api.TargetProgress{Node: "web-1"} // converged
		}
		return res.Others[0]
	}

	first := connect("first")
	if _, answered := ask(first, 300*time.Millisecond); answered {
		t.Fatal("a report of a node holding one connection was answered")
	}
	until("web-1 converged on its one machine", func() bool { v := view(); return v.Converged && v.State == api.StateAlive })

	second := connect("second")
	until("both connections counted", func() bool { return d.presence.Open(pub) == 2 })
	if v := view(); v.Connections != 2 || v.SharedSince.IsZero() || !v.Converged || v.LastError != nil {
		t.Fatalf("within the grace: %+v; want 2 connections, shared since set, still converged", v)
	}
	if _, answered := ask(second, 300*time.Millisecond); answered {
		t.Fatal("a report was answered within the grace: a reconnection is not a second machine")
	}
	if p := progress(); p.State != "" {
		t.Fatalf("progress within the grace: %+v, want converged", p)
	}

	until("failing key_shared past the grace", func() bool { v := view(); return v.LastError != nil })
	v := view()
	if v.Converged || v.LastError.Code != api.KeyShared || !strings.HasPrefix(v.LastError.Message, "held by 2 connections for ") ||
		!strings.Contains(v.LastError.Message, "revoke the node and enrol each machine again") {
		t.Fatalf("past the grace: converged %v, error %+v", v.Converged, v.LastError)
	}
	if p := progress(); p.State != api.ProgressFailed || p.Error == nil || p.Error.Code != api.KeyShared {
		t.Fatalf("progress past the grace: %+v, want failed key_shared", p)
	}
	counts := d.nodeCounts(d.now())
	if counts[stateConverged] != 0 || counts[stateFailing] != 1 || counts[stateAliveNotConverged] != 1 {
		t.Fatalf("metrics past the grace: %v; want failing and alive_not_converged 1, converged 0", counts)
	}
	for _, nc := range []*nats.Conn{first, second} {
		a, answered := ask(nc, 2*time.Second)
		if !answered || len(a.SharedKey) != 2 || a.V != api.ProtocolVersion {
			t.Fatalf("the answer to %s's report: %+v (answered %v), want both connections", nc.Opts.Name, a, answered)
		}
		cid, _ := nc.GetClientID()
		own := 0
		for _, h := range a.SharedKey {
			if h.Server == nc.ConnectedServerId() && h.CID == cid {
				own++
			}
			if h.Since.IsZero() {
				t.Errorf("%s told of a connection without its time: %+v", nc.Opts.Name, h)
			}
		}
		if own != 1 {
			t.Fatalf("%s cannot find its own connection (server %s, cid %d) in %+v", nc.Opts.Name, nc.ConnectedServerId(), cid, a.SharedKey)
		}
	}

	// A report naming another node's inbox is not answered there.
	observer, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(observer.Close)
	elsewhere, err := observer.SubscribeSync(api.NodeInbox("web-2") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	observer.Flush()
	if err := first.PublishMsg(&nats.Msg{Subject: api.StatusSubject("web-1"), Reply: api.NodeInbox("web-2") + ".x", Data: report}); err != nil {
		t.Fatal(err)
	}
	if _, answered := ask(first, 2*time.Second); !answered {
		t.Fatal("a report after the one naming another inbox was not answered")
	}
	if m, err := elsewhere.NextMsg(100 * time.Millisecond); err == nil {
		t.Fatalf("the answer went to another node's inbox: %s %q", m.Subject, m.Data)
	}

	second.Close()
	until("one connection left", func() bool { return d.presence.Open(pub) == 1 })
	if v := view(); !v.Converged || v.LastError != nil || v.Connections != 0 || !v.SharedSince.IsZero() {
		t.Fatalf("one machine left: %+v; want converged again", v)
	}
	if _, answered := ask(first, 300*time.Millisecond); answered {
		t.Fatal("a report was answered with one connection left")
	}
}

// TestTheGraceOutlastsAReconnection: the broker closes a client it no longer hears
// from within broker.SilentClientClosedWithin; until then an agent that reconnected
// elsewhere holds two connections with its key, and the default grace must not
// take that for a second machine.
func TestTheGraceOutlastsAReconnection(t *testing.T) {
	var o Options
	o.defaults()
	if o.SharedKeyGrace <= broker.SilentClientClosedWithin {
		t.Fatalf("the grace is %s; a broker may take %s to close a silent client's connection", o.SharedKeyGrace, broker.SilentClientClosedWithin)
	}
}
