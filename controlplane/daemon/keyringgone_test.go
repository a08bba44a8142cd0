package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestANodePastTheKeyringHistoryIsFailing: the mesh keeps the last 64 keyrings, 32
// rotations with their retirements. A node that was away for more (a machine off for
// 32 weeks of weekly rotations) holds a keyring older than the chain it is sent
// starts from, and refuses it as signed by no key it trusts: it refuses every
// keyring, declaration and revocation notice signed since, and must be enrolled
// again. It was shown with the host's "untrusted" alone, re-sent everything each
// round for good, held every retirement back, and the docs said it catches up when
// it returns. It is failing keyring_gone now, saying what to do, in the roster and
// signing-key status. A node as old that has not refused the chain yet, and one whose
// own keyring the chain still holds, are not.
func TestANodePastTheKeyringHistoryIsFailing(t *testing.T) {
	d := fleet(t, 3)
	report := func(node string, epoch uint64, code string) {
		t.Helper()
		st := api.Status{V: api.ProtocolVersion, Node: node, KeyringEpoch: epoch}
		if code != "" {
			st.Error = &api.StatusError{Code: code, Message: "no valid signature by a trusted key"}
		}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
		d.status.flush()
	}
	for range state.MaxKeyringHistory/2 + 1 {
		if _, err := d.rotateKey(api.RotateRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.retireKey(api.RetireRequest{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	var oldest uint64
	d.fsm.Read(func(s *state.State) { oldest = s.OldestKeptKeyring() })
	if oldest <= 1 {
		t.Fatalf("after %d rotations the oldest keyring kept is epoch %d", state.MaxKeyringHistory/2+1, oldest)
	}
	report("n-0", 1, "untrusted")      // away since the start, refused the chain
	report("n-1", 1, "")               // away as long, has not been sent it yet
	report("n-2", oldest, "untrusted") // its keyring is in the chain: refused something else
	want := map[string]bool{"n-0": true}
	res, err := d.nodes(api.NodesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Nodes {
		if gone := v.LastError != nil && v.LastError.Code == api.KeyringGone; gone != want[v.ID] {
			t.Errorf("%s, keyring epoch %d (oldest kept %d): shown %+v", v.ID, v.KeyringEpoch, oldest, v.LastError)
		}
	}
	st, err := d.keyringStatus(api.KeyringStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Gone != want[n.Node] {
			t.Errorf("signing-key status: %s gone %v, want %v", n.Node, n.Gone, want[n.Node])
		}
	}
}

// TestANodePastTheKeyringHistoryIsNotResentAndHoldsNothingBack: a live node past the
// keyring history was re-sent the chain and its declaration at every reconcile,
// for good, and a retirement was refused for it until forced: it is sent nothing,
// and a retirement goes on.
func TestANodePastTheKeyringHistoryIsNotResentAndHoldsNothingBack(t *testing.T) {
	d := fleet(t, 0)
	const node = "away"
	kp := enrolledKey(t, d, node)
	nc := dialAs(t, d, node, kp)
	key, _ := kp.PublicKey()
	waitFor(t, 10*time.Second, "the node's connection counted", func() bool { return d.presence.Open(key) == 1 })
	sent := make(chan *nats.Msg, 256)
	if _, err := nc.ChanSubscribe(api.DeclarationSubject(node), sent); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range state.MaxKeyringHistory/2 + 1 {
		if _, err := d.rotateKey(api.RotateRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.retireKey(api.RetireRequest{Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, KeyringEpoch: 1,
		Error: &api.StatusError{Code: "untrusted", Message: "no valid signature by a trusted key"}})
	if err != nil {
		t.Fatal(err)
	}
	d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
	d.status.flush()
	for len(sent) > 0 {
		<-sent // what the rotations pushed
	}
	d.reconcile(d.now())
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(sent); n != 0 {
		t.Errorf("a node past the keyring history was re-sent %d messages", n)
	}
	if _, err := d.rotateKey(api.RotateRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.retireKey(api.RetireRequest{}); err != nil {
		t.Errorf("a retirement with only a node past the history behind: %v, want it done", err)
	}
}
