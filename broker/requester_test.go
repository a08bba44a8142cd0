package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
)

// TestAnOperatorRequestSaysWhoSentIt: a request an operator sends on the operator
// API reaches the control account with the requester's user JWT in
// broker.RequesterHeader, put there by the broker: what the requester wrote there
// itself is replaced, so the control plane can log who asked for each change.
func TestAnOperatorRequestSaysWhoSentIt(t *testing.T) {
	m := newMesh(t)
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	key, _ := user.PublicKey()
	seed, _ := user.Seed()
	claims := jwt.NewUserClaims(key)
	claims.Name = "alice"
	token, err := claims.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		if c.JWT != "" {
			return broker.Grant{User: "operator:alice", Account: broker.AccountOperators, Publish: []string{"mesh.admin.>"}, Subscribe: []string{"_INBOX.>"}}, nil
		}
		return everything("control", broker.AccountControl), nil
	}}
	s, _ := start(t, m, auth)
	control := mustDial(t, s, m.ca.Pin(), nats.Token("control"))
	got := make(chan *nats.Msg, 4)
	sub, err := control.nc.Subscribe("mesh.admin.>", func(msg *nats.Msg) {
		got <- msg
		_ = msg.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	control.nc.Flush()
	op := mustDial(t, s, m.ca.Pin(), nats.UserJWTAndSeed(token, string(seed)))
	forged := nats.NewMsg("mesh.admin.declare")
	forged.Header.Set(broker.RequesterHeader, `{"jwt":"someone else's"}`)
	for _, req := range []*nats.Msg{nats.NewMsg("mesh.admin.ping"), forged} {
		if _, err := op.nc.RequestMsg(req, 5*time.Second); err != nil {
			t.Fatalf("%s: %v", req.Subject, err)
		}
		msg := <-got
		name, k, ok := broker.Requester(msg.Header)
		if !ok || name != "alice" || k != key {
			t.Fatalf("%s: requester %q %q %t, want alice %s (header %q)", req.Subject, name, k, ok, key, msg.Header.Get(broker.RequesterHeader))
		}
	}
	// From inside the control account, nobody is named.
	if _, _, ok := broker.Requester(nats.Header{}); ok {
		t.Fatal("a request without the header named a requester")
	}
}
