package daemon

import (
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestAnIdEnrolledAgainClosesItsRevokedKeysConnections: the broker grants a node's
// subjects by its id and refuses a revoked key at login only. A connection of web-1's
// first key, open since before its revocation, whose closing was lost (the leader
// that was to close it after RevokeGrace died; here nothing closes it: the revocation
// is committed without the operator API, which sends the notice and closes), still
// held web-1's grant when a new machine enrolled as web-1, and heard the declarations
// of the new one (their files' contents) until the next listing of the brokers'
// connections closed it, a minute at most. Before, the enrolment went ahead with the
// connection open, and it heard the declaration below. The enrolment now closes the
// connections of the id's revoked keys first, and answers unavailable while any
// stays open (the host runs enrol again).
func TestAnIdEnrolledAgainClosesItsRevokedKeysConnections(t *testing.T) {
	d := fleet(t, 0)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: hex.EncodeToString([]byte(strings.Repeat("w", 32))), Node: "web-1", Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpEnrol, At: d.now().UTC(), Enrol: &state.EnrolCmd{TokenID: hex.EncodeToString([]byte(strings.Repeat("w", 32))), Node: "web-1", Role: state.RoleWorker, PublicKey: pub}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("enrol web-1: %v %v", err, res.Err)
		}
	}
	old, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.NoReconnect(),
		nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	if err != nil {
		t.Fatalf("web-1's first key: %v", err)
	}
	t.Cleanup(old.Close)
	heard, err := old.SubscribeSync(api.DeclarationSubject("web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Flush(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); d.presence.Open(pub) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the control plane never heard of web-1's connection")
		}
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpRevoke, At: d.now().UTC(), Revoke: &state.RevokeCmd{Node: "web-1"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("revoke web-1: %v %v", err, res.Err)
	}
	time.Sleep(300 * time.Millisecond)
	if old.IsClosed() {
		t.Fatal("the revoked key's connection was closed before the enrolment: the test shows nothing")
	}

	// A new machine enrols as web-1: answered once the old key's connection is gone.
	e := newEnrolling(t, d, "web-1")
	var resp api.EnrolResponse
	for deadline := time.Now().Add(10 * time.Second); ; {
		if resp, _ = e.ask(t, e.request()); resp.OK {
			break
		}
		if resp.Error == nil || resp.Error.Code != api.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("the new machine's enrolment as web-1: %+v", resp.Error)
		}
		time.Sleep(200 * time.Millisecond)
	}
	body := []byte(`{"files":[{"path":"etc/app.conf","content":"secret of the new machine\n","mode":"0640"}]}`)
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"web-1"}, Body: body}, requestCall{}); err != nil {
		t.Fatalf("declare for the new web-1: %v", err)
	}
	if m, err := heard.NextMsg(time.Second); err == nil {
		t.Fatalf("the connection of web-1's revoked key heard the new machine's declaration (%d bytes)", len(m.Data))
	}
	if !old.IsClosed() {
		t.Fatal("the connection of web-1's revoked key is still open after web-1 enrolled again")
	}
}
