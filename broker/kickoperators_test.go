package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
)

// TestKickOperatorsClosesTheNamedKeysConnections: nats-server checks a connection's
// credentials at login and on a reload, never in between, so the operator
// credentials of a control node removed from the mesh kept every right of the
// operators' account on a connection opened before, unless a reload happened to
// come. KickOperators closes the operators' connections of the keys it is told,
// and nobody else's: another operator's, or a client of another account whose
// connection presented the same credentials (a removed node's, retired).
func TestKickOperatorsClosesTheNamedKeysConnections(t *testing.T) {
	m := newMesh(t)
	account, _ := nkeys.CreateAccount()
	creds := func(name string) (string, nats.Option) {
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		seed, _ := user.Seed()
		claims := jwt.NewUserClaims(pub)
		claims.Name = name
		token, err := claims.Encode(account)
		if err != nil {
			t.Fatal(err)
		}
		return pub, nats.UserJWTAndSeed(token, string(seed))
	}
	removedKey, removed := creds("cp-2")
	_, active := creds("cp-1")
	auth := &fakeAuth{decide: func(c broker.Client) (broker.Grant, error) {
		switch {
		case c.JWT == "":
			return broker.Grant{}, broker.ErrRefused
		case c.Name == "retired":
			return broker.Grant{User: "operator:cp-2 of removed control node cp-2", Account: broker.AccountRetired, Subscribe: []string{"_INBOX.>"}}, nil
		}
		return broker.Grant{User: "operator:" + c.Name, Account: broker.AccountOperators, Subscribe: []string{"_INBOX.>"}}, nil
	}}
	s, _ := start(t, m, auth)
	before := mustDial(t, s, m.ca.Pin(), removed, nats.Name("cp-2"))
	other := mustDial(t, s, m.ca.Pin(), active, nats.Name("cp-1"))
	retired := mustDial(t, s, m.ca.Pin(), removed, nats.Name("retired"))

	n, err := s.KickOperators(func(key string) bool { return key == removedKey })
	if err != nil || n != 1 {
		t.Fatalf("KickOperators: %d closed, %v; want the one connection of the removed key", n, err)
	}
	waitClosed(t, before)
	time.Sleep(200 * time.Millisecond)
	for name, c := range map[string]*client{"another operator's": other, "the removed key's, retired": retired} {
		if c.nc.IsClosed() {
			t.Errorf("%s connection was closed", name)
		}
	}
}
