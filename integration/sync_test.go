package integration

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/declarations"
	"mesh/host/state"
	"mesh/integration/harness"
)

// TestSyncSendsWhatTheNodeLacks: a sync is answered with the envelopes the node
// does not hold, and only those. A node that says it holds its current declaration
// applied, valid as long, is not sent it again (at fleet scale every reconnection
// would otherwise cost a signature on the control plane and a verification on the
// host for nothing); one that holds an older version, a copy that expires sooner
// (a refresh is due), or says nothing (an older agent) gets it.
func TestSyncSendsWhatTheNodeLacks(t *testing.T) {
	cp, h, node, pushed, errs := syncingNode(t, "sync")

	type payload struct {
		Version   uint64    `json:"version"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	// sync sends req and returns the acknowledgement's count and the envelopes
	// that arrived: their payload types and the declaration's payload, if any.
	sync := func(req api.SyncRequest) (int, []string, *payload) {
		t.Helper()
		req.V = api.ProtocolVersion
		data, _ := json.Marshal(req)
		m, err := node.Request("mesh.node.web-1.sync", data, 10*time.Second)
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		var resp api.SyncResponse
		if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error != nil {
			t.Fatalf("sync answered %s: %v", m.Data, err)
		}
		var types []string
		var decl *payload
		for range resp.Sent {
			msg, err := pushed.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("the sync said %d were sent; %d arrived: %v", resp.Sent, len(types), err)
			}
			var env declarations.Envelope
			if err := json.Unmarshal(msg.Data, &env); err != nil {
				t.Fatalf("not an envelope: %s", msg.Data)
			}
			types = append(types, env.PayloadType)
			if env.PayloadType == declarations.PayloadTypeDeclaration {
				decl = new(payload)
				if err := json.Unmarshal(env.Payload, decl); err != nil {
					t.Fatal(err)
				}
			}
		}
		if extra, err := pushed.NextMsg(200 * time.Millisecond); err == nil {
			t.Fatalf("an envelope beyond the %d acknowledged: %s", resp.Sent, extra.Data)
		}
		return resp.Sent, types, decl
	}

	// Everything, as a node that holds nothing is sent.
	all, types, decl := sync(api.SyncRequest{})
	if decl == nil || types[len(types)-1] != declarations.PayloadTypeDeclaration {
		t.Fatalf("a node holding nothing was sent %v, without its declaration last", types)
	}
	holds := api.SyncRequest{HaveApplied: true, AppliedVersion: decl.Version, AppliedExpiresAt: decl.ExpiresAt}

	// Enrolment recorded the empty first declaration as applied, so the agent's
	// first sync, which asks with what the state holds, is not sent it again.
	applied, err := state.Load(h.State)
	if err != nil {
		t.Fatal(err)
	}
	if !applied.HaveApplied || applied.Version != decl.Version || !applied.ExpiresAt.Equal(decl.ExpiresAt) || len(applied.Managed) != 0 {
		t.Fatalf("after enrolment the state holds have_applied %v, v%d, valid until %s, managing %v; want v%d applied, valid until %s, managing nothing",
			applied.HaveApplied, applied.Version, applied.ExpiresAt, applied.Managed, decl.Version, decl.ExpiresAt)
	}
	first := api.SyncRequest{HaveApplied: applied.HaveApplied, AppliedVersion: applied.Version, AppliedExpiresAt: applied.ExpiresAt,
		KeyringEpoch: applied.KeyringEpoch, MembershipVersion: applied.MembershipVersion}
	if n, types, d := sync(first); d != nil || n != 0 {
		t.Errorf("the first sync after enrolment was sent %d envelopes %v (declaration %+v); want none (a node holding nothing is sent %d)", n, types, d, all)
	}

	if n, types, d := sync(holds); n != all-1 || d != nil {
		t.Errorf("a node holding its declaration was sent %d envelopes %v (declaration %+v), want the %d others", n, types, d, all-1)
	}
	longer := holds
	longer.AppliedExpiresAt = decl.ExpiresAt.Add(time.Hour)
	if n, _, d := sync(longer); n != all-1 || d != nil {
		t.Errorf("a node holding a copy valid longer was sent %d envelopes (declaration %+v)", n, d)
	}
	for name, req := range map[string]api.SyncRequest{
		"a copy that expires sooner": {HaveApplied: true, AppliedVersion: decl.Version, AppliedExpiresAt: decl.ExpiresAt.Add(-time.Second)},
		"nothing applied":            {AppliedVersion: decl.Version, AppliedExpiresAt: decl.ExpiresAt},
		"an older agent's request":   {AppliedVersion: decl.Version},
	} {
		if n, _, d := sync(req); n != all || d == nil || d.Version != decl.Version {
			t.Errorf("%s: sent %d envelopes, declaration %+v; want all %d with v%d", name, n, d, all, decl.Version)
		}
	}

	// A new declaration: the copy held is now the old version.
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/motd","content":"hello"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	// The push of the new version, which this test's connection also receives.
	harness.Eventually(t, 10*time.Second, "the new version pushed", func() bool {
		_, err := pushed.NextMsg(100 * time.Millisecond)
		return err == nil
	})
	if n, _, d := sync(holds); n != all || d == nil || d.Version <= decl.Version {
		t.Errorf("after a new declaration a node holding v%d was sent %d envelopes, declaration %+v", decl.Version, n, d)
	}
	select {
	case err := <-errs:
		t.Fatalf("the node's connection: %v", err)
	default:
	}
}

// TestSyncTagCrossesTheBroker: the tag a node puts on its sync request comes back on
// the envelopes and the acknowledgement through the real broker, its accounts and
// imports, so that the agent can tell the sync's envelopes from a push (protocol.md,
// Sync). Without it the agent falls back to counting every envelope, which a push
// during the sync fools.
func TestSyncTagCrossesTheBroker(t *testing.T) {
	_, _, node, pushed, _ := syncingNode(t, "synctag")
	data, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	req := &nats.Msg{Subject: "mesh.node.web-1.sync", Data: data, Header: nats.Header{api.SyncHeader: []string{"31"}}}
	m, err := node.RequestMsg(req, 10*time.Second)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	var resp api.SyncResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error != nil || resp.Sent == 0 {
		t.Fatalf("sync answered %s: %v", m.Data, err)
	}
	if got := m.Header.Get(api.SyncHeader); got != "31" {
		t.Errorf("the acknowledgement carries tag %q, want 31", got)
	}
	for i := range resp.Sent {
		env, err := pushed.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("envelope %d of %d: %v", i+1, resp.Sent, err)
		}
		if got := env.Header.Get(api.SyncHeader); got != "31" {
			t.Errorf("envelope %d of %d carries tag %q, want 31", i+1, resp.Sent, got)
		}
	}
}

// syncingNode serves a control plane without reconciling (its re-sends would arrive
// among a sync's), enrols web-1, and connects as web-1 itself, subscribed to its
// declaration subject: what the agent does before it syncs.
func syncingNode(t *testing.T, mesh string) (*harness.ControlPlane, *harness.Host, *nats.Conn, *nats.Subscription, chan error) {
	t.Helper()
	cp := harness.NewControlPlane(t, bin, mesh)
	cp.Serve("--reconcile", "1h")
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	errs := make(chan error, 4)
	node := nodeConn(t, cp.Dir, h.State, cp.Listen, errs)
	pushed, err := node.SubscribeSync("mesh.node.web-1.decl")
	if err != nil {
		t.Fatal(err)
	}
	node.Flush()
	return cp, h, node, pushed, errs
}
