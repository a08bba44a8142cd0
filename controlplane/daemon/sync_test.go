package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// TestSyncEnvelopesCarryTheRequestsTag: the envelopes a sync publishes, and its
// acknowledgement, carry the tag the node put on its request, so that the agent
// counts them apart from a declaration pushed meanwhile (which would otherwise stand
// in for one of them that was lost). A tag that is not a short number is not sent
// back; neither is one on a request that has none.
func TestSyncEnvelopesCarryTheRequestsTag(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	e.enrol(t)
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1"}, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}, requestCall{}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	decls, err := nc.SubscribeSync(api.DeclarationSubject("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	acks, err := nc.SubscribeSync(api.NodeInbox("web-1") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1, MembershipVersion: 1 << 20})
	for _, c := range []struct{ sent, want string }{
		{"42", "42"},
		{"", ""},
		{"4x2", ""},
		{"1\r\nX: y", ""},
		{strings.Repeat("9", api.MaxSyncTag+1), ""},
		{strings.Repeat("9", api.MaxSyncTag), strings.Repeat("9", api.MaxSyncTag)},
	} {
		m := &nats.Msg{Subject: api.SyncSubject("web-1"), Reply: api.NodeInbox("web-1") + ".1", Data: req}
		if c.sent != "" {
			m.Header = nats.Header{api.SyncHeader: []string{c.sent}}
		}
		d.handleSync(m)
		env, err := decls.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("tag %q: the sync sent no declaration: %v", c.sent, err)
		}
		ack, err := acks.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("tag %q: no acknowledgement: %v", c.sent, err)
		}
		if got := env.Header.Get(api.SyncHeader); got != c.want {
			t.Errorf("tag %q: the envelope carries %q, want %q", c.sent, got, c.want)
		}
		if got := ack.Header.Get(api.SyncHeader); got != c.want {
			t.Errorf("tag %q: the acknowledgement carries %q, want %q", c.sent, got, c.want)
		}
	}
}
