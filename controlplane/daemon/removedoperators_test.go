package daemon

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/authn"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
	"mesh/integration/freeport"
)

// rechecksAsAtLogin answers nats-server's recheck of an operator's connection (on a
// reload of its options) with the grant the operator had at login: as if no reload
// came, or came before the removal was applied.
type rechecksAsAtLogin struct{ broker.Authenticator }

func (r rechecksAsAtLogin) Authenticate(c broker.Client) (broker.Grant, error) {
	if c.Recheck && c.JWT != "" {
		if claims, err := jwt.DecodeUserClaims(c.JWT); err == nil {
			return authn.OperatorGrant(claims.Name), nil
		}
	}
	return observing{r.Authenticator}.Authenticate(c)
}

// TestARemovedControlNodesOperatorConnectionIsClosed: nats-server checks an
// operator's credentials at login and on a reload of its options, never in between.
// A connection made with a control node's operator credentials before its removal
// kept every right of an operator (every change, and every operator's answers on
// _INBOX.>) until a reload came; the only one that came was the routes' change of
// the removal, which does not come when neither the pins nor the routes change, or
// fails. Each control node now closes, as it applies the removal, the operators'
// connections its broker holds with the removed node's credentials, reload or not
// (here the broker's rechecks answer as at login), and only those. The credentials
// then log in again with the reads only.
func TestARemovedControlNodesOperatorConnectionIsClosed(t *testing.T) {
	dir := bootstrapped(t, "removedop")
	log := &lockedBuffer{}
	d, _ := runDaemon(t, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(log, nil)),
		wrapAuth: func(a broker.Authenticator) broker.Authenticator { return rechecksAsAtLogin{a} }})

	seed, err := dir.ReadFile(datadir.AccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	account, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	creds := func(name string) (string, nats.Option) {
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		userSeed, _ := user.Seed()
		claims := jwt.NewUserClaims(pub)
		claims.Name = name
		token, err := claims.Encode(account)
		if err != nil {
			t.Fatal(err)
		}
		return pub, nats.UserJWTAndSeed(token, string(userSeed))
	}
	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		t.Fatal(err)
	}
	cp2Key, cp2Creds := creds("cp-2")
	// Another operator's, recorded by name: the mesh admits no credentials it
	// holds no record of.
	otherKey, otherCreds := creds("operator")
	addrs := freeport.Addrs(t, 3)
	for _, c := range []state.Command{
		{Op: state.OpAddOperator, At: d.now().UTC(), Rules: state.RulesOperators, AddOperator: &state.AddOperatorCmd{Name: "operator", Key: otherKey, Expires: d.now().Add(time.Hour)}},
		{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2], Pin: strings.Repeat("ab", 32), Operator: cp2Key},
			Sealed:  []byte("sealed")}},
		{Op: state.OpEnrol, At: d.now().UTC(), Enrol: &state.EnrolCmd{TokenID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, PublicKey: "UCP2JOIN", CurveKey: "XCP2"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("admit cp-2: %v %v", err, res.Err)
		}
	}
	// The admission reloads the broker, which asks again about every client,
	// one still in its handshake included (no credentials yet: refused). The
	// operators log in once it is done, as the test is not about that.
	waitFor(t, 10*time.Second, "the broker reloaded for cp-2", func() bool { return strings.Contains(log.String(), "cluster peers changed") })

	conn := func(name string, o nats.Option, errs chan error) *nats.Conn {
		nc, err := nats.Connect("tls://"+d.broker.Addr(), nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(), o, nats.NoReconnect(),
			nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case errs <- err:
				default:
				}
			}))
		if err != nil {
			t.Fatalf("%s's operator credentials: %v", name, err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	errs := make(chan error, 8)
	removed, other := conn("cp-2", cp2Creds, errs), conn("another operator", otherCreds, errs)
	for _, nc := range []*nats.Conn{removed, other} {
		if _, err := nc.SubscribeSync("_INBOX.>"); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-errs:
		t.Fatalf("an operator's connection before the removal: %v", err)
	default:
	}

	if res, err := d.raft.Apply(state.Command{Op: state.OpRemoveControl, At: d.now().UTC(), RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("remove cp-2: %v %v", err, res.Err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !removed.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the connection of the removed control node's operator credentials is still open 5 s after its removal was applied")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if other.IsClosed() {
		t.Fatal("another operator's connection was closed with the removed node's")
	}
	// The credentials log in again, to the retired account: the reads only.
	again := conn("cp-2, again", cp2Creds, errs)
	if err := again.Publish("mesh.admin.token.create", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	again.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("the removed node's credentials, logged in again, asking for a change: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the removed node's credentials, logged in again, may ask for a change")
	}
}
