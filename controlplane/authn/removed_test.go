package authn

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestRemovedControlNodeOperatorCredentials: the operator credentials issued with a
// control node may only read once the node is removed: the removed machine keeps
// its admin.creds, and without this it could go on declaring, revoking and minting.
// Another control node's credentials keep their full grant.
func TestRemovedControlNodeOperatorCredentials(t *testing.T) {
	fx := newFixture(t)
	nonce := []byte("server-nonce-removed")
	removed, kept := mustKey(t, nkeys.CreateUser), mustKey(t, nkeys.CreateUser)
	at := now0.Add(-30 * time.Minute)
	for i, n := range []struct {
		id  string
		key nkeys.KeyPair
	}{{"cp-2", removed}, {"cp-3", kept}} {
		tok := "ctl-" + n.id
		fx.apply(t, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: tok, Node: n.id, Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302", Pin: "pin" + n.id, Operator: pub(n.key)},
			Sealed:  []byte("sealed")}})
		fx.apply(t, state.Command{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: tok, Node: n.id, Role: state.RoleControl,
			PublicKey: pub(mustKey(t, nkeys.CreateUser)), CurveKey: "X" + string(rune('A'+i))}})
	}
	fx.apply(t, state.Command{Op: state.OpRemoveControl, At: at.Add(time.Minute), RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}})

	a := fx.auth("internal")
	conn := func(kp nkeys.KeyPair, nonce []byte) broker.Client {
		return broker.Client{JWT: userJWT(t, fx.account, kp, nil), Nonce: nonce, Sig: sign(t, kp, nonce)}
	}
	client := func(kp nkeys.KeyPair) broker.Client { return conn(kp, nonce) }
	g, err := a.Authenticate(client(removed))
	if err != nil {
		t.Fatalf("a removed node's credentials are refused outright (%v): the machine could not learn that it was removed", err)
	}
	if g.Account != broker.AccountRetired {
		t.Fatalf("grant in account %q", g.Account)
	}
	for _, op := range api.AdminOps() {
		allowed := slices.Contains(g.Publish, api.AdminSubject(op))
		if allowed != api.ReadOnly(op) {
			t.Errorf("%s: publish allowed %v, want %v (reads only)", op, allowed, api.ReadOnly(op))
		}
	}
	for _, s := range broker.MonitoringSubjects() {
		if slices.Contains(g.Publish, s) {
			t.Errorf("a removed node's credentials may ask the broker's monitoring %s", s)
		}
	}
	if want := []string{api.OperatorInbox(pub(removed)) + ".>"}; !slices.Equal(g.Subscribe, want) {
		t.Errorf("a removed node's credentials may subscribe to %v, want its own inbox %v only", g.Subscribe, want)
	}
	if g2, err := a.Authenticate(client(kept)); err != nil || !slices.Equal(g2.Publish, OperatorGrant("alice").Publish) {
		t.Fatalf("an active control node's credentials: %+v, %v; want the full operator grant", g2, err)
	}
	// A connection of a removed node's credentials ends within a minute, and each
	// such key gets a few a minute: a copy of the file held 171 connections, every
	// descriptor the broker keeps for operators, for as long as it liked.
	if want := now0.Add(RetiredConnectionLifetime); !g.Deadline.Equal(want) {
		t.Errorf("a removed node's credentials' connection ends at %v, want %v", g.Deadline, want)
	}
	other := func(i int) []byte { return fmt.Appendf(nil, "server-nonce-%d", i) }
	for i := 1; i < RetiredConnections; i++ {
		if _, err := a.Authenticate(conn(removed, other(i))); err != nil {
			t.Fatalf("connection %d of a removed node's credentials in a minute: %v", i+1, err)
		}
	}
	if _, err := a.Authenticate(conn(removed, other(RetiredConnections))); !errors.Is(err, ErrRetiredBusy) {
		t.Fatalf("connection %d of a removed node's credentials in a minute: %v, want ErrRetiredBusy", RetiredConnections+1, err)
	}
	for i := range RetiredConnections + 1 {
		if _, err := a.Authenticate(conn(kept, other(i))); err != nil {
			t.Fatalf("an active control node's credentials are counted with a removed one's: %v", err)
		}
	}
}
