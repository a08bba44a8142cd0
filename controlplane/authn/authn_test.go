package authn

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/logging"
	"mesh/tokenfmt"
)

var now0 = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)

// fixture is a mesh roster with an admin account, a node, a revoked node, a node whose
// id enrolled again after revocation, and an unused token.
type fixture struct {
	fsm       *state.FSM
	index     uint64
	account   nkeys.KeyPair
	web1      nkeys.KeyPair // enrolled, live
	gone      nkeys.KeyPair // enrolled, revoked
	oldDB     nkeys.KeyPair // db-1's first key, revoked; db-1 enrolled again with newDB
	newDB     nkeys.KeyPair
	secret    string // hex secret of an unused token for web-2
	used      string // hex secret of a token web-5 enrolled with, key web5
	web5      nkeys.KeyPair
	expired   string // hex secret of an unused token for web-6 that expired
	cancelled string // hex secret of a token for web-7 an operator cancelled
	// noProofKey is the hex secret of a live token for web-8 minted without a proof key.
	noProofKey string
	clock      time.Time
	logs       bytes.Buffer
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	fx := &fixture{fsm: state.NewFSM(), clock: now0}
	fx.account = mustKey(t, nkeys.CreateAccount)
	fx.web1 = mustKey(t, nkeys.CreateUser)
	fx.gone = mustKey(t, nkeys.CreateUser)
	fx.oldDB = mustKey(t, nkeys.CreateUser)
	fx.newDB = mustKey(t, nkeys.CreateUser)
	accountPub, _ := fx.account.PublicKey()

	at := now0.Add(-time.Hour)
	// A control node whose operator key was never recorded (a mesh from before
	// it was): every operator key the account signed may log in, unless revoked
	// (TestOperatorKeysTheMeshDoesNotRecordAreRefused has them recorded).
	fx.apply(t, state.Command{Op: state.OpInit, At: at, Init: &state.InitCmd{Mesh: "demo", AdminAccount: accountPub, Validity: time.Hour,
		Control: state.ControlNode{ID: "cp-1"}}})
	enrol := func(tokenID, node string, kp nkeys.KeyPair) {
		pub, _ := kp.PublicKey()
		fx.apply(t, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: tokenID, Node: node, Role: state.RoleWorker, TTL: time.Hour}})
		fx.apply(t, state.Command{Op: state.OpEnrol, At: at, Enrol: &state.EnrolCmd{TokenID: tokenID, Node: node, Role: state.RoleWorker, PublicKey: pub}})
	}
	enrol("t1", "web-1", fx.web1)
	enrol("t2", "gone", fx.gone)
	fx.apply(t, state.Command{Op: state.OpRevoke, At: at, Revoke: &state.RevokeCmd{Node: "gone"}})
	enrol("t3", "db-1", fx.oldDB)
	fx.apply(t, state.Command{Op: state.OpRevoke, At: at, Revoke: &state.RevokeCmd{Node: "db-1"}})
	enrol("t4", "db-1", fx.newDB)

	mint := func(node string, at time.Time, ttl time.Duration) (string, string) {
		var tok tokenfmt.Token
		if _, err := rand.Read(tok.Secret[:]); err != nil {
			t.Fatal(err)
		}
		secret := hex.EncodeToString(tok.Secret[:])
		id, ok := SecretID(secret)
		if !ok {
			t.Fatal("SecretID refused a fresh secret")
		}
		fx.apply(t, state.Command{Op: state.OpCreateToken, At: at, CreateToken: &state.CreateTokenCmd{ID: id, ProofKey: hex.EncodeToString(tok.ProofKey()), Node: node, Role: state.RoleWorker, TTL: ttl}})
		return secret, id
	}
	// A token minted before tokens carried a proof key.
	var old tokenfmt.Token
	rand.Read(old.Secret[:])
	fx.noProofKey = hex.EncodeToString(old.Secret[:])
	oldID, _ := SecretID(fx.noProofKey)
	fx.apply(t, state.Command{Op: state.OpCreateToken, At: now0, CreateToken: &state.CreateTokenCmd{ID: oldID, Node: "web-8", Role: state.RoleWorker, TTL: time.Hour}})
	fx.secret, _ = mint("web-2", now0, time.Hour)
	fx.web5 = mustKey(t, nkeys.CreateUser)
	var usedID string
	fx.used, usedID = mint("web-5", now0.Add(-time.Minute), time.Hour)
	fx.apply(t, state.Command{Op: state.OpEnrol, At: now0.Add(-time.Minute), Enrol: &state.EnrolCmd{TokenID: usedID, Node: "web-5", Role: state.RoleWorker, PublicKey: pub(fx.web5)}})
	fx.expired, _ = mint("web-6", now0.Add(-2*time.Hour), time.Hour)
	fx.cancelled, _ = mint("web-7", now0, time.Hour)
	fx.apply(t, state.Command{Op: state.OpCancelTokens, At: now0, CancelTokens: &state.CancelTokensCmd{Node: "web-7"}})
	return fx
}

// enrolling is the client an enrolling host presents: the token's secret as the
// password of enrol:<node>, and the key it will register, signing the nonce.
func enrolling(t testing.TB, node, secret string, kp nkeys.KeyPair, nonce []byte) broker.Client {
	return broker.Client{Username: EnrolUserPrefix + node, Password: secret, Nkey: pub(kp), Nonce: nonce, Sig: sign(t, kp, nonce), Remote: remote1}
}

// binding is a TLS session's channel binding as the tests' sessions export it: 32
// bytes, fill but the first, 0xff, which keeps it from being valid UTF-8 (a real one
// is random, and valid UTF-8 once in 10^8 sessions; verifyNonce refuses that one).
func binding(fill byte) []byte {
	b := bytes.Repeat([]byte{fill}, broker.BindingSize)
	b[0] = 0xff
	return b
}

// proving is the client an enrolling host since decision 0018 presents: the token's
// id and its secret's proof for the node it names and the key it registers, which
// signs the nonce bound to session.
func proving(t testing.TB, node, secret string, kp nkeys.KeyPair, nonce, session []byte) broker.Client {
	var tok tokenfmt.Token
	b, _ := hex.DecodeString(secret)
	copy(tok.Secret[:], b)
	id := tok.SecretHash()
	return broker.Client{Username: EnrolUserPrefix + node, Password: api.EnrolPassword(hex.EncodeToString(id[:]), tok.Prove("demo", node, pub(kp))),
		Nkey: pub(kp), Nonce: nonce, Binding: session, Sig: sign(t, kp, broker.BoundNonce(nonce, session)), Remote: remote1}
}

func (fx *fixture) apply(t testing.TB, c state.Command) {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	fx.index++
	if r := fx.fsm.Apply(&raft.Log{Type: raft.LogCommand, Index: fx.index, Data: data}).(state.Result); r.Err != nil {
		t.Fatalf("%s: %v", c.Op, r.Err)
	}
}

func (fx *fixture) auth(internal string) *Authenticator {
	return New(Config{
		Roster:        fx.fsm,
		Mesh:          "demo",
		HostEvents:    []string{"$SYS.ACCOUNT.HOSTS.CONNECT", "$SYS.ACCOUNT.HOSTS.DISCONNECT"},
		InternalToken: internal,
		Logger:        slog.New(slog.NewTextHandler(&fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:           func() time.Time { return fx.clock },
		FailureLimit:  3,
		FailureWindow: time.Minute,
		// The rate-limit tests admit the same token many times; the token budget
		// has a test of its own.
		TokenConnections: 100,
	})
}

func mustKey(t testing.TB, mk func() (nkeys.KeyPair, error)) nkeys.KeyPair {
	t.Helper()
	kp, err := mk()
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func pub(kp nkeys.KeyPair) string { p, _ := kp.PublicKey(); return p }

// sign signs the nonce as nats.go does: raw URL base64 of the Ed25519 signature.
func sign(t testing.TB, kp nkeys.KeyPair, nonce []byte) string {
	t.Helper()
	sig, err := kp.Sign(nonce)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(sig)
}

func userJWT(t *testing.T, issuer nkeys.KeyPair, user nkeys.KeyPair, edit func(*jwt.UserClaims)) string {
	t.Helper()
	c := jwt.NewUserClaims(pub(user))
	c.Name = "alice"
	if edit != nil {
		edit(c)
	}
	tok, err := c.Encode(issuer)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var remote1 = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40000}

func TestAuthenticate(t *testing.T) {
	fx := newFixture(t)
	nonce := []byte("server-nonce-1234")
	operator := mustKey(t, nkeys.CreateUser)
	otherAccount := mustKey(t, nkeys.CreateAccount)
	goodJWT := userJWT(t, fx.account, operator, nil)
	tampered := goodJWT[:len(goodJWT)-4] + "AAAA"
	if tampered == goodJWT {
		tampered = goodJWT[:len(goodJWT)-4] + "BBBB"
	}

	newKey := mustKey(t, nkeys.CreateUser)
	// Two TLS sessions' channel bindings: the client's with a relay, and the
	// relay's with the broker.
	session1, session2 := binding(1), binding(2)
	tests := []struct {
		name     string
		internal string
		client   broker.Client
		want     error        // nil: granted
		grant    broker.Grant // checked when want is nil (Deadline compared separately)
		deadline time.Duration
	}{
		// The control plane's own connections, one per role.
		{name: "internal hosts role", internal: "s3cret-internal", client: broker.Client{Username: string(RoleHosts), Token: "s3cret-internal"},
			grant: broker.Grant{User: string(RoleHosts), Account: broker.AccountHosts,
				Subscribe: []string{"mesh.enrol.>", "mesh.node.*.sync", "mesh.node.*.status"},
				Publish:   []string{"_INBOX.node.*.>", "_INBOX.enrol.*.>"}}},
		{name: "internal publisher role", internal: "s3cret-internal", client: broker.Client{Username: string(RolePublisher), Token: "s3cret-internal"},
			grant: broker.Grant{User: string(RolePublisher), Account: broker.AccountControl, Publish: []string{"mesh.node.*.decl"}}},
		{name: "internal admin role", internal: "s3cret-internal", client: broker.Client{Username: string(RoleAdmin), Token: "s3cret-internal"},
			grant: broker.Grant{User: string(RoleAdmin), Account: broker.AccountControl, Subscribe: []string{"mesh.admin.>", "mesh.retired.>", "mesh.controlstatus"}, Publish: []string{"_R_.>"}}},
		{name: "internal control role", internal: "s3cret-internal", client: broker.Client{Username: string(RoleControl), Token: "s3cret-internal"},
			grant: broker.Grant{User: string(RoleControl), Account: broker.AccountControl, Subscribe: []string{"mesh.control.*.heartbeat"}, Publish: []string{"mesh.control.*.heartbeat"}}},
		{name: "internal events role", internal: "s3cret-internal", client: broker.Client{Username: string(RoleEvents), Token: "s3cret-internal"},
			grant: broker.Grant{User: string(RoleEvents), Account: broker.AccountSystem,
				Subscribe: []string{"_INBOX.>", "$SYS.ACCOUNT.HOSTS.CONNECT", "$SYS.ACCOUNT.HOSTS.DISCONNECT"},
				Publish:   []string{"$SYS.REQ.SERVER.*.CONNZ", "$SYS.REQ.SERVER.*.KICK", "$SYS.REQ.SERVER.PING.IDZ"}}},
		{name: "internal token, no role", internal: "s3cret-internal", client: broker.Client{Token: "s3cret-internal"}, want: ErrInternalMissing},
		{name: "internal token, unknown role", internal: "s3cret-internal", client: broker.Client{Username: "control-plane:everything", Token: "s3cret-internal"}, want: ErrInternalMissing},
		{name: "internal token wrong", internal: "s3cret-internal", client: broker.Client{Username: string(RoleHosts), Token: "s3cret-internaX"}, want: ErrInternalMissing},
		{name: "internal token prefix", internal: "s3cret-internal", client: broker.Client{Username: string(RoleHosts), Token: "s3cret"}, want: ErrInternalMissing},
		{name: "internal token not configured", internal: "", client: broker.Client{Username: string(RoleHosts), Token: "anything"}, want: ErrInternalMissing},

		// Operators.
		{name: "operator", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: sign(t, operator, nonce)}, grant: OperatorGrant("alice")},
		{name: "operator std base64 sig", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: func() string {
			s, _ := operator.Sign(nonce)
			return base64.StdEncoding.EncodeToString(s)
		}()}, grant: OperatorGrant("alice")},
		{name: "operator of another account", client: broker.Client{JWT: userJWT(t, otherAccount, operator, nil), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator signed by another account claiming ours", client: broker.Client{JWT: userJWT(t, otherAccount, operator, func(c *jwt.UserClaims) {
			c.IssuerAccount = pub(fx.account)
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator expired", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.Expires = now0.Add(-time.Second).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrOperatorExpired},
		// Expired from the second it names on, as the connection's deadline has it:
		// a login within that second was admitted and closed at once.
		{name: "operator expiring this second", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.Expires = now0.Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrOperatorExpired},
		{name: "operator not yet valid", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.NotBefore = now0.Add(time.Hour).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator expiring later", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.Expires = now0.Add(time.Hour).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, grant: OperatorGrant("alice"), deadline: time.Hour},
		{name: "operator JWT tampered", client: broker.Client{JWT: tampered, Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator JWT garbage", client: broker.Client{JWT: "not.a.jwt", Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator nonce signed by another key", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: sign(t, fx.web1, nonce)}, want: ErrBadSignature},
		{name: "operator no nonce", client: broker.Client{JWT: goodJWT, Sig: sign(t, operator, nonce)}, want: ErrBadSignature},
		{name: "operator no sig", client: broker.Client{JWT: goodJWT, Nonce: nonce}, want: ErrBadSignature},

		// Enrolled nodes.
		{name: "node", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, nonce)},
			grant: broker.Grant{
				User:      "node:web-1",
				Account:   broker.AccountHosts,
				Publish:   []string{"mesh.node.web-1.status", "mesh.node.web-1.sync"},
				Subscribe: []string{"mesh.node.web-1.decl", "_INBOX.node.web-1.>"},
				Host:      true,
			}},
		{name: "node, bound to its session", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session1, Sig: sign(t, fx.web1, broker.BoundNonce(nonce, session1))},
			grant: NodeGrant("web-1")},
		{name: "node, bound to another session (a relay)", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session2, Sig: sign(t, fx.web1, broker.BoundNonce(nonce, session1))},
			want: ErrBadSignature},
		{name: "node, bound, on a session that exports none", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, broker.BoundNonce(nonce, session1))},
			want: ErrBadSignature},
		{name: "operator, bound to another session (a relay)", client: broker.Client{JWT: goodJWT, Nonce: nonce, Binding: session2, Sig: sign(t, operator, broker.BoundNonce(nonce, session1))},
			want: ErrBadSignature},
		{name: "operator, bound", client: broker.Client{JWT: goodJWT, Nonce: nonce, Binding: session2, Sig: sign(t, operator, broker.BoundNonce(nonce, session2))},
			grant: OperatorGrant("alice")},
		{name: "node enrolled again with a new key", client: broker.Client{Nkey: pub(fx.newDB), Nonce: nonce, Sig: sign(t, fx.newDB, nonce)},
			grant: NodeGrant("db-1")},
		{name: "node unknown key", client: func() broker.Client {
			kp := mustKey(t, nkeys.CreateUser)
			return broker.Client{Nkey: pub(kp), Nonce: nonce, Sig: sign(t, kp, nonce)}
		}(), want: ErrUnknownKey},
		// A revoked key is let in, for a few seconds and in an account of its own, to
		// be told it was revoked: only a signed notice stops an agent.
		{name: "node revoked", client: broker.Client{Nkey: pub(fx.gone), Nonce: nonce, Sig: sign(t, fx.gone, nonce)},
			grant: broker.Grant{
				User:      "revoked:gone",
				Account:   broker.AccountRevoked,
				Publish:   []string{"mesh.node.gone.status", "mesh.node.gone.sync"},
				Subscribe: []string{"mesh.node.gone.decl", "_INBOX.node.gone.>"},
				Host:      true,
			}, deadline: RevokedConnectionLifetime},
		{name: "node key revoked, id enrolled again", client: broker.Client{Nkey: pub(fx.oldDB), Nonce: nonce, Sig: sign(t, fx.oldDB, nonce)},
			grant: RevokedGrant("db-1", time.Time{}), deadline: RevokedConnectionLifetime},
		{name: "node revoked, bad sig", client: broker.Client{Nkey: pub(fx.gone), Nonce: nonce, Sig: sign(t, fx.web1, nonce)}, want: ErrBadSignature},
		{name: "node key revoked, id enrolled again, no sig", client: broker.Client{Nkey: pub(fx.oldDB), Nonce: nonce}, want: ErrBadSignature},
		{name: "node bad sig", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.newDB, nonce)}, want: ErrBadSignature},
		{name: "node sig of another nonce", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, []byte("old-nonce"))}, want: ErrBadSignature},
		{name: "node sig not base64", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: "!!!"}, want: ErrBadSignature},
		{name: "node missing nonce", client: broker.Client{Nkey: pub(fx.web1), Sig: sign(t, fx.web1, nonce)}, want: ErrBadSignature},
		{name: "node missing sig", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce}, want: ErrBadSignature},
		{name: "node key is an account key", client: broker.Client{Nkey: pub(fx.account), Nonce: nonce, Sig: sign(t, fx.account, nonce)}, want: ErrUnknownKey},
		{name: "node key garbage", client: broker.Client{Nkey: "Uxyz", Nonce: nonce, Sig: "x"}, want: ErrUnknownKey},

		// Enrolling clients: a live token, under its own node, with the key to register.
		{name: "enrolling", client: enrolling(t, "web-2", fx.secret, newKey, nonce),
			grant: broker.Grant{User: "enrol:web-2", Account: broker.AccountHosts, Publish: []string{"mesh.enrol.web-2." + pub(newKey), "mesh.enrol.web-2"},
				Subscribe: []string{"_INBOX.enrol.web-2." + pub(newKey) + ".>"}, Host: true}, deadline: EnrolConnectionLifetime},
		{name: "enrolling upper-case hex", client: enrolling(t, "web-2", strings.ToUpper(fx.secret), newKey, nonce),
			grant: EnrolGrant("web-2", pub(newKey), time.Time{}), deadline: EnrolConnectionLifetime},
		// The same enrolment run again with the key the token enrolled: admitted.
		{name: "enrolling again, same key", client: enrolling(t, "web-5", fx.used, fx.web5, nonce),
			grant: EnrolGrant("web-5", pub(fx.web5), time.Time{}), deadline: EnrolConnectionLifetime},
		// A used token with another key, or an expired one: admitted for a few
		// seconds, able to ask and be told why, nothing more.
		{name: "enrolling a used token, another key", client: enrolling(t, "web-5", fx.used, newKey, nonce),
			grant: EnrolGrant("web-5", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		{name: "enrolling an expired token", client: enrolling(t, "web-6", fx.expired, newKey, nonce),
			grant: EnrolGrant("web-6", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		{name: "enrolling a cancelled token", client: enrolling(t, "web-7", fx.cancelled, newKey, nonce),
			grant: EnrolGrant("web-7", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		// Under another node's name: told so on its key's subject, and nowhere
		// else (the node's old subject shares its budget among its enrolments).
		{name: "enrolling names another node", client: enrolling(t, "web-3", fx.secret, newKey, nonce),
			grant: broker.Grant{User: "enrol:web-3", Account: broker.AccountHosts, Publish: []string{"mesh.enrol.web-3." + pub(newKey)},
				Subscribe: []string{"_INBOX.enrol.web-3." + pub(newKey) + ".>"}, Host: true}, deadline: RefusalConnectionLifetime},
		{name: "enrolling a used token names another node", client: enrolling(t, "web-3", fx.used, newKey, nonce),
			grant: OtherNodeGrant("web-3", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		{name: "enrolling with a revoked key", client: enrolling(t, "web-2", fx.secret, fx.gone, nonce), want: ErrRevoked},

		// Enrolling clients that prove the secret rather than send it (decision 0018).
		{name: "proving", client: proving(t, "web-2", fx.secret, newKey, nonce, session1),
			grant: EnrolGrant("web-2", pub(newKey), time.Time{}), deadline: EnrolConnectionLifetime},
		{name: "proving again, same key", client: proving(t, "web-5", fx.used, fx.web5, nonce, session1),
			grant: EnrolGrant("web-5", pub(fx.web5), time.Time{}), deadline: EnrolConnectionLifetime},
		{name: "proving a used token, another key", client: proving(t, "web-5", fx.used, newKey, nonce, session1),
			grant: EnrolGrant("web-5", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		{name: "proving names another node", client: proving(t, "web-3", fx.secret, newKey, nonce, session1),
			grant: OtherNodeGrant("web-3", pub(newKey), time.Time{}), deadline: RefusalConnectionLifetime},
		{name: "proving, nonce bound to another session (a relay)", client: func() broker.Client {
			c := proving(t, "web-2", fx.secret, newKey, nonce, session1)
			c.Binding = session2
			return c
		}(), want: ErrBadSignature},
		{name: "proving, bare nonce signature", client: func() broker.Client {
			c := proving(t, "web-2", fx.secret, newKey, nonce, session1)
			c.Sig = sign(t, newKey, nonce)
			return c
		}(), want: ErrBadSignature},
		{name: "proving, a proof captured for another key", client: func() broker.Client {
			c := proving(t, "web-2", fx.secret, newKey, nonce, session1)
			attacker := proving(t, "web-2", fx.secret, fx.web1, nonce, session2)
			attacker.Password = c.Password
			return attacker
		}(), want: ErrUnknownSecret},
		{name: "proving, a proof for another node", client: func() broker.Client {
			c := proving(t, "web-2", fx.secret, newKey, nonce, session1)
			c.Username = EnrolUserPrefix + "web-3"
			return c
		}(), want: ErrUnknownSecret},
		{name: "proving a token minted without a proof key", client: proving(t, "web-8", fx.noProofKey, newKey, nonce, session1), want: ErrUnknownSecret},
		{name: "sending the secret of a token minted without a proof key", client: enrolling(t, "web-8", fx.noProofKey, newKey, nonce),
			grant: EnrolGrant("web-8", pub(newKey), time.Time{}), deadline: EnrolConnectionLifetime},
		{name: "proving an unknown token", client: proving(t, "web-2", strings.Repeat("ab", 32), newKey, nonce, session1), want: ErrUnknownSecret},
		{name: "proving, garbage after the prefix", client: func() broker.Client {
			c := proving(t, "web-2", fx.secret, newKey, nonce, session1)
			c.Password = "proof1." + strings.Repeat("x", 200)
			return c
		}(), want: ErrUnknownSecret},
		{name: "enrolling without a key", client: broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1}, want: ErrNoEnrolKey},
		{name: "enrolling, key but no signature", client: broker.Client{Username: "enrol:web-2", Password: fx.secret, Nkey: pub(newKey), Nonce: nonce, Remote: remote1}, want: ErrBadSignature},
		{name: "enrolling with an account key", client: broker.Client{Username: "enrol:web-2", Password: fx.secret, Nkey: pub(fx.account), Nonce: nonce, Sig: sign(t, fx.account, nonce), Remote: remote1}, want: ErrNoEnrolKey},
		{name: "enrolling, nonce signed by another key", client: broker.Client{Username: "enrol:web-2", Password: fx.secret, Nkey: pub(newKey), Nonce: nonce, Sig: sign(t, fx.web1, nonce), Remote: remote1}, want: ErrBadSignature},
		{name: "enrolling unknown secret", client: enrolling(t, "web-2", strings.Repeat("ab", 32), newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling short secret", client: enrolling(t, "web-2", fx.secret[:62], newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling long secret", client: enrolling(t, "web-2", fx.secret+"00", newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling non-hex secret", client: enrolling(t, "web-2", strings.Repeat("zz", 32), newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling the token id instead of the secret", client: enrolling(t, "web-2", func() string { id, _ := SecretID(fx.secret); return id }(), newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling empty secret", client: enrolling(t, "web-2", "", newKey, nonce), want: ErrUnknownSecret},
		{name: "enrolling no node", client: enrolling(t, "", fx.secret, newKey, nonce), want: ErrBadNode},
		{name: "enrolling wildcard node", client: enrolling(t, ">", fx.secret, newKey, nonce), want: ErrBadNode},
		{name: "enrolling dotted node", client: enrolling(t, "web-2.decl", fx.secret, newKey, nonce), want: ErrBadNode},
		{name: "enrolling star node", client: enrolling(t, "*", fx.secret, newKey, nonce), want: ErrBadNode},
		{name: "enrolling upper-case node", client: enrolling(t, "WEB-2", fx.secret, newKey, nonce), want: ErrBadNode},

		// Nothing presented.
		{name: "nothing", client: broker.Client{}, want: ErrNoCredentials},
		{name: "user and password not enrolling", client: broker.Client{Username: "admin", Password: "admin"}, want: ErrNoCredentials},
		{name: "name only", client: broker.Client{Name: "enrol:web-2"}, want: ErrNoCredentials},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := fx.auth(tt.internal)
			g, err := a.Authenticate(tt.client)
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if !errors.Is(err, broker.ErrRefused) {
					t.Fatalf("refusal %v does not wrap broker.ErrRefused", err)
				}
				if code := broker.RefusalCode(err); !slices.ContainsFunc(Refusals(), func(r *broker.Refusal) bool { return r.Code == code }) {
					t.Fatalf("refusal %v has code %q, which Refusals does not list: the metrics would not show it from the start", err, code)
				}
				if g.User != "" || g.Account != broker.AccountNone || g.Publish != nil || g.Subscribe != nil {
					t.Fatalf("a refusal came with a grant: %+v", g)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			// Host too: a host's grant without it escapes the broker's bound on
			// hosts (Capacity.MaxHosts), and one of the control plane's own with
			// it would count against that bound.
			if g.User != tt.grant.User || g.Account != tt.grant.Account || g.Host != tt.grant.Host ||
				!slices.Equal(g.Publish, tt.grant.Publish) || !slices.Equal(g.Subscribe, tt.grant.Subscribe) {
				t.Fatalf("grant = %+v, want %+v", g, tt.grant)
			}
			if tt.deadline != 0 {
				if !g.Deadline.Equal(now0.Add(tt.deadline)) {
					t.Fatalf("deadline = %v, want now+%s", g.Deadline, tt.deadline)
				}
			} else if !g.Deadline.IsZero() {
				t.Fatalf("%s got a connection deadline %v", g.User, g.Deadline)
			}
		})
	}
}

// TestTokenConnectionBudget: one token is granted at most TokenConnections
// connections per EnrolConnectionLifetime, so at most that many are open at once.
func TestTokenConnectionBudget(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{Roster: fx.fsm, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	// The broker makes a nonce for every connection.
	conns := 0
	nonce := func() []byte { conns++; return []byte(fmt.Sprintf("nonce-%d", conns)) }
	var first broker.Client
	for i := range DefaultTokenConnections {
		c := enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), nonce())
		if i == 0 {
			first = c
		}
		if _, err := a.Authenticate(c); err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
	if _, err := a.Authenticate(enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), nonce())); !errors.Is(err, ErrTokenBusy) {
		t.Fatalf("one connection over the budget: %v, want ErrTokenBusy", err)
	}
	// nats-server checks every connected client again when it reloads its options
	// (a change of the control nodes): a connection already admitted is admitted
	// again, and spends nothing.
	for range 3 {
		if _, err := a.Authenticate(first); err != nil {
			t.Fatalf("a connection already admitted, checked again at a reload: %v", err)
		}
	}
	// Another token is unaffected.
	if _, err := a.Authenticate(enrolling(t, "web-5", fx.used, fx.web5, nonce())); err != nil {
		t.Fatalf("another token: %v", err)
	}
	// Once the connections granted have lived out their lifetime, the token may
	// connect again.
	fx.clock = fx.clock.Add(EnrolConnectionLifetime)
	if _, err := a.Authenticate(enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), nonce())); err != nil {
		t.Fatalf("after the lifetime: %v", err)
	}
}

// TestRevokedKeyConnectionBudget: a revoked key is let in to hear its notice, and
// holds each connection for RevokedConnectionLifetime: it is granted at most
// RevokedConnections of them at once, so that a revoked key cannot hold the broker's
// connection slots. A connection checked again at a reload spends nothing; another
// revoked key is unaffected; after the lifetime the key is let in again.
func TestRevokedKeyConnectionBudget(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{Roster: fx.fsm, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	conns := 0
	revokedConn := func(kp nkeys.KeyPair) broker.Client {
		conns++
		nonce := []byte(fmt.Sprintf("nonce-%d", conns))
		return broker.Client{Nkey: pub(kp), Nonce: nonce, Sig: sign(t, kp, nonce)}
	}
	var first broker.Client
	for i := range RevokedConnections {
		c := revokedConn(fx.gone)
		if i == 0 {
			first = c
		}
		if g, err := a.Authenticate(c); err != nil || g.Account != broker.AccountRevoked {
			t.Fatalf("connection %d: %+v, %v", i+1, g, err)
		}
	}
	if _, err := a.Authenticate(revokedConn(fx.gone)); !errors.Is(err, ErrRevokedBusy) {
		t.Fatalf("one connection over the budget: %v, want ErrRevokedBusy", err)
	}
	if _, err := a.Authenticate(first); err != nil {
		t.Fatalf("a connection already admitted, checked again at a reload: %v", err)
	}
	if _, err := a.Authenticate(revokedConn(fx.oldDB)); err != nil {
		t.Fatalf("another revoked key: %v", err)
	}
	fx.clock = fx.clock.Add(RevokedConnectionLifetime)
	if _, err := a.Authenticate(revokedConn(fx.gone)); err != nil {
		t.Fatalf("after the lifetime: %v", err)
	}
}

// Errors are distinct: a person reading the log can tell every refusal apart, and so
// can the metrics, whose reason is each one's code: letters and underscores, no
// sentence that a rewording would rename.
func TestRefusalsAreDistinct(t *testing.T) {
	errs := Refusals()
	if declared := refusalsDeclared(t); len(errs) != declared {
		t.Errorf("Refusals lists %d refusals; the package makes %d (list a new one there)", len(errs), declared)
	}
	code := regexp.MustCompile(`^[a-z_]+$`)
	for i, a := range errs {
		if !errors.Is(a, broker.ErrRefused) {
			t.Errorf("%v does not wrap broker.ErrRefused", a)
		}
		if !code.MatchString(a.Code) || broker.RefusalCode(a) != a.Code {
			t.Errorf("%v has code %q: want lower-case letters and underscores, the metric's reason", a, a.Code)
		}
		for j, b := range errs {
			if i != j && (errors.Is(a, b) || a.Error() == b.Error() || a.Code == b.Code) {
				t.Errorf("%v and %v are not distinct", a, b)
			}
		}
	}
}

func TestOperatorBeforeInit(t *testing.T) {
	a := New(Config{Roster: state.NewFSM(), Logger: slog.New(slog.DiscardHandler)})
	account := mustKey(t, nkeys.CreateAccount)
	user := mustKey(t, nkeys.CreateUser)
	nonce := []byte("n")
	// An uninitialised state has no admin account: nobody is an operator, even a JWT
	// with an empty issuer check.
	if _, err := a.Authenticate(broker.Client{JWT: userJWT(t, account, user, nil), Nonce: nonce, Sig: sign(t, user, nonce)}); !errors.Is(err, ErrBadOperator) {
		t.Fatalf("err = %v, want ErrBadOperator", err)
	}
}

func TestRateLimit(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	bad := strings.Repeat("cd", 32)
	other := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 2), Port: 40000}
	samehost := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 40001} // another port of remote1's host
	try := func(secret string, from net.Addr) error {
		c := enrolling(t, "web-2", secret, mustKey(t, nkeys.CreateUser), []byte("n"))
		c.Remote = from
		_, err := a.Authenticate(c)
		return err
	}

	// Two failures: still admitted with the right secret.
	for range 2 {
		if err := try(bad, remote1); !errors.Is(err, ErrUnknownSecret) {
			t.Fatalf("bad secret: %v", err)
		}
	}
	if err := try(fx.secret, remote1); err != nil {
		t.Fatalf("good secret after 2 failures: %v", err)
	}
	// The third failure within the window blocks the address from another port
	// of the same host too, for what it could be guessing: a secret the mesh does
	// not know. One it knows is still admitted: five made-up logins from an
	// address that many share (a NAT, a proxy) shut out every enrolment behind it.
	fx.clock = fx.clock.Add(30 * time.Second)
	if err := try(bad, samehost); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("third bad secret: %v", err)
	}
	for _, from := range []net.Addr{remote1, samehost} {
		if err := try(bad, from); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("unknown secret from a blocked address %v: err = %v, want ErrRateLimited", from, err)
		}
	}
	if err := try(fx.secret, samehost); err != nil {
		t.Fatalf("a valid secret from a blocked address: %v, want admitted", err)
	}
	if !strings.Contains(fx.logs.String(), "blocked") {
		t.Error("the block was not logged")
	}
	// Other addresses are unaffected.
	if err := try(bad, other); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("another address: %v", err)
	}
	// Still blocked just before the window passes.
	fx.clock = fx.clock.Add(time.Minute - time.Second)
	if err := try(bad, remote1); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("1s before the block ends: %v", err)
	}
	fx.clock = fx.clock.Add(time.Second)
	if err := try(bad, remote1); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("after the window: %v", err)
	}
	// The other kinds of client are never rate limited.
	nonce := []byte("n")
	if _, err := a.Authenticate(broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, nonce), Remote: remote1}); err != nil {
		t.Fatalf("a node from a once-blocked address: %v", err)
	}
}

func TestRateLimitBlocksNodeAndSecretAlike(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	for range 3 {
		a.Authenticate(broker.Client{Username: "enrol:web-9", Password: "x", Remote: remote1})
	}
	// The block is per address, not per node name.
	if _, err := a.Authenticate(enrolling(t, "web-2", strings.Repeat("cd", 32), mustKey(t, nkeys.CreateUser), []byte("n"))); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	// Invalid node names are refused before the limiter and do not count.
	fx2 := newFixture(t)
	b := fx2.auth("")
	for range 10 {
		b.Authenticate(broker.Client{Username: "enrol:BAD", Password: "x", Remote: remote1})
	}
	if _, err := b.Authenticate(enrolling(t, "web-2", fx2.secret, mustKey(t, nkeys.CreateUser), []byte("n"))); err != nil {
		t.Fatalf("invalid node names counted as failures: %v", err)
	}
}

func TestFailuresSpreadOverTimeDoNotBlock(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	for range 6 {
		a.Authenticate(broker.Client{Username: "enrol:web-2", Password: "x", Remote: remote1})
		fx.clock = fx.clock.Add(31 * time.Second) // two per window at most
	}
	if _, err := a.Authenticate(enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), []byte("n"))); err != nil {
		t.Fatalf("slow failures blocked the address: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{Roster: fx.fsm, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	for i := range 5 {
		if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: "x", Remote: remote1}); !errors.Is(err, ErrUnknownSecret) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	// Five failures within the default minute block.
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: "x", Remote: remote1}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("after 5 failures: %v", err)
	}
	fx.clock = fx.clock.Add(time.Minute)
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: "x", Remote: remote1}); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("after a minute: %v", err)
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("internal-token-value")
	wrongSecret := strings.Repeat("9f", 32)
	for range 5 {
		a.Authenticate(broker.Client{Username: "enrol:web-2", Password: wrongSecret, Remote: remote1})
		a.Authenticate(enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), []byte("n")))
		a.Authenticate(broker.Client{Token: "internal-token-valuX"})
	}
	logs := fx.logs.String()
	if logs == "" {
		t.Fatal("nothing was logged; the test would prove nothing")
	}
	for _, s := range []string{wrongSecret, fx.secret, "internal-token-val"} {
		if strings.Contains(logs, s) {
			t.Fatalf("a secret reached the log:\n%s", logs)
		}
	}
	// Error texts do not carry secrets either.
	_, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: wrongSecret, Remote: other()})
	if err == nil || strings.Contains(err.Error(), wrongSecret) {
		t.Fatalf("error %v", err)
	}
}

func other() net.Addr { return &net.TCPAddr{IP: net.IPv4(198, 51, 100, 7), Port: 1} }

func TestSecretID(t *testing.T) {
	var tok tokenfmt.Token
	for i := range tok.Secret {
		tok.Secret[i] = byte(i)
	}
	h := tok.SecretHash()
	id, ok := SecretID(hex.EncodeToString(tok.Secret[:]))
	if !ok || id != hex.EncodeToString(h[:]) {
		t.Fatalf("SecretID = %q, %v; want tokenfmt's SecretHash", id, ok)
	}
	if len(id) != 64 {
		t.Fatalf("id length %d", len(id))
	}
	for _, bad := range []string{"", "00", strings.Repeat("0", 63), strings.Repeat("0", 66), strings.Repeat("g", 64), " " + strings.Repeat("0", 63)} {
		if _, ok := SecretID(bad); ok {
			t.Errorf("SecretID(%q) accepted", bad)
		}
	}
}

func TestGrantSubjectsMatchTheProtocol(t *testing.T) {
	// docs/protocol.md spells these out; the host agent builds the same strings on its
	// own side, so they are pinned here as literals.
	if NodeUserPrefix != "node:" || EnrolUserPrefix != "enrol:" || EnrolConnectionLifetime != 30*time.Second {
		t.Fatal("user prefixes or the enrolment lifetime changed")
	}
}

func FuzzAuthenticate(f *testing.F) {
	f.Add("enrol:web-2", "00", "", "", "", []byte("n"), "x", []byte(nil))
	f.Add("", "", "tok", "", "", []byte(nil), "x", []byte(nil))
	f.Add("", "", "", "UABC", "sig", []byte("nonce"), "x", []byte(nil))
	f.Add("", "", "", "", "eyJhbGciOiJlZDI1NTE5In0.e30.sig", []byte("nonce"), "x", []byte(nil))
	fx := newFixture(f)
	// A proof of the fixture's live token for a key the fuzzer holds no private half
	// of, over a session binding of its choice (decision 0018).
	var tok tokenfmt.Token
	b, _ := hex.DecodeString(fx.secret)
	copy(tok.Secret[:], b)
	id := tok.SecretHash()
	f.Add("enrol:web-2", api.EnrolPassword(hex.EncodeToString(id[:]), tok.Prove("demo", "web-2", pub(fx.web1))), "", pub(fx.web1), "",
		[]byte("nonce"), "x", bytes.Repeat([]byte{1}, broker.BindingSize))
	f.Fuzz(func(t *testing.T, user, pass, token, nkey, jwtText string, nonce []byte, sig string, binding []byte) {
		a := New(Config{Roster: fx.fsm, Mesh: "demo", InternalToken: "internal", Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now0 }})
		g, err := a.Authenticate(broker.Client{Username: user, Password: pass, Token: token, Nkey: nkey, JWT: jwtText, Sig: sig, Nonce: nonce, Binding: binding, Remote: remote1})
		if err != nil {
			if !errors.Is(err, broker.ErrRefused) {
				t.Fatalf("refusal %v does not wrap ErrRefused", err)
			}
			return
		}
		// The fuzzer holds no private key of the fixture, so it cannot sign the nonce,
		// bound or bare: only the internal token, with one of its roles, gets in.
		if token != "internal" || !strings.HasPrefix(g.User, "control-plane:") || g.Account == broker.AccountNone {
			t.Fatalf("granted %+v to a client that proved nothing", g)
		}
	})
}

// TestUnboundLogins: every login not bound to its TLS session is counted by kind of
// client, and refused when bound logins are required; bound ones are admitted
// either way.
func TestUnboundLogins(t *testing.T) {
	fx := newFixture(t)
	nonce := []byte("server-nonce-1234")
	session := binding(7)
	operator := mustKey(t, nkeys.CreateUser)
	opJWT := userJWT(t, fx.account, operator, nil)
	newKey := mustKey(t, nkeys.CreateUser)
	cases := []struct {
		name   string
		client broker.Client
		kind   string // "" for a bound login
	}{
		{"node, bare", broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session, Sig: sign(t, fx.web1, nonce)}, UnboundNode},
		{"node, bound", broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: session, Sig: sign(t, fx.web1, broker.BoundNonce(nonce, session))}, ""},
		{"revoked key, bare", broker.Client{Nkey: pub(fx.gone), Nonce: nonce, Binding: session, Sig: sign(t, fx.gone, nonce)}, UnboundNode},
		{"operator, bare", broker.Client{JWT: opJWT, Nonce: nonce, Binding: session, Sig: sign(t, operator, nonce)}, UnboundOperator},
		{"operator, bound", broker.Client{JWT: opJWT, Nonce: nonce, Binding: session, Sig: sign(t, operator, broker.BoundNonce(nonce, session))}, ""},
		{"enrolling, secret sent", enrolling(t, "web-2", fx.secret, newKey, nonce), UnboundEnrolling},
		{"enrolling, secret sent, nonce bound", func() broker.Client {
			c := enrolling(t, "web-2", fx.secret, newKey, nonce)
			c.Binding, c.Sig = session, sign(t, newKey, broker.BoundNonce(nonce, session))
			return c
		}(), UnboundEnrolling},
		{"enrolling, proved", proving(t, "web-2", fx.secret, newKey, nonce, session), ""},
	}
	for _, require := range []bool{false, true} {
		var heard []string
		a := fx.auth("")
		a.cfg.RequireBound = require
		a.cfg.Unbound = func(kind string) { heard = append(heard, kind) }
		for _, c := range cases {
			heard = heard[:0]
			_, err := a.Authenticate(c.client)
			switch {
			case c.kind == "" && err != nil:
				t.Errorf("require=%v, %s: %v, want admitted", require, c.name, err)
			case c.kind != "" && require && !errors.Is(err, ErrUnbound):
				t.Errorf("require=%v, %s: %v, want ErrUnbound", require, c.name, err)
			case c.kind != "" && !require && err != nil:
				t.Errorf("require=%v, %s: %v, want admitted", require, c.name, err)
			}
			if want := []string{c.kind}; c.kind == "" && len(heard) != 0 || c.kind != "" && !slices.Equal(heard, want) {
				t.Errorf("require=%v, %s: counted %v, want %q", require, c.name, heard, c.kind)
			}
		}
	}
}

// TestABareSignerIsNotMadeToSignABoundNonce: a client older than the binding signs
// whatever nonce the INFO it read carries, as text. A relay holding a leaf of the
// mesh CA, whose own session with a broker exports a binding that is valid UTF-8,
// hands such a client that session's bound message as the nonce and forwards the
// signature: it must not log in bound, required or not (a review; 1 session in 10^8
// exports such a binding). An honest bound signature over such a session is
// refused with it, and the client connects again over another session.
func TestABareSignerIsNotMadeToSignABoundNonce(t *testing.T) {
	fx := newFixture(t)
	relayed := []byte("0123456789abcdef0123456789ABCDEF") // the relay's session, valid UTF-8
	nonce := []byte("Xq3w9m-broker-nonce")
	info, err := json.Marshal(map[string]string{"nonce": string(broker.BoundNonce(nonce, relayed))})
	if err != nil {
		t.Fatal(err)
	}
	var read struct{ Nonce string }
	if err := json.Unmarshal(info, &read); err != nil || read.Nonce != string(broker.BoundNonce(nonce, relayed)) {
		t.Fatalf("the relay's INFO does not carry its bound message as text: %q, %v", read.Nonce, err)
	}
	operator := mustKey(t, nkeys.CreateUser)
	opJWT := userJWT(t, fx.account, operator, nil)
	for _, c := range []struct {
		name   string
		client broker.Client
	}{
		{"node", broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Binding: relayed, Sig: sign(t, fx.web1, []byte(read.Nonce)), Remote: remote1}},
		{"operator", broker.Client{JWT: opJWT, Nonce: nonce, Binding: relayed, Sig: sign(t, operator, []byte(read.Nonce)), Remote: remote1}},
	} {
		for _, require := range []bool{false, true} {
			a := fx.auth("")
			a.cfg.RequireBound = require
			if g, err := a.Authenticate(c.client); err == nil {
				t.Errorf("require=%v, %s: a bare signature over the relay's bound message logged in as %s", require, c.name, g.User)
			}
		}
	}
}

// TestHostsRefusedOnAFullBrokerSpendNothing: while the broker has no room for
// another host (Client.HostsFull), an enrolling client and a node are refused with
// broker.ErrFull before anything is spent on them: the token's connection budget and
// the address's failure count are untouched, so the token works at once when there is
// room. The control plane's own connections and operators are admitted.
func TestHostsRefusedOnAFullBrokerSpendNothing(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("s3cret-internal")
	nonce := []byte("nonce")
	full := func(c broker.Client) broker.Client { c.HostsFull = true; return c }
	bad := strings.Repeat("cd", 32)
	for range DefaultTokenConnections + 3 {
		for _, c := range []broker.Client{
			enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), nonce),
			enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), nonce),
			{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, nonce), Remote: remote1},
			{Nkey: pub(fx.gone), Nonce: nonce, Sig: "not a signature", Remote: remote1},
		} {
			if _, err := a.Authenticate(full(c)); !errors.Is(err, broker.ErrFull) {
				t.Fatalf("host %q %q on a full broker: %v, want broker.ErrFull", c.Username, c.Nkey, err)
			}
		}
	}
	// Nothing was spent: every connection of the token's budget, and no block.
	for i := range DefaultTokenConnections {
		if _, err := a.Authenticate(enrolling(t, "web-2", fx.secret, mustKey(t, nkeys.CreateUser), []byte(fmt.Sprint("n", i)))); err != nil {
			t.Fatalf("enrolling connection %d once there is room: %v", i+1, err)
		}
	}
	if g, err := a.Authenticate(broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, nonce), Remote: remote1}); err != nil || !g.Host {
		t.Fatalf("node once there is room: %+v, %v", g, err)
	}
	// Not hosts: admitted on a full broker.
	if g, err := a.Authenticate(full(broker.Client{Username: string(RoleHosts), Token: "s3cret-internal"})); err != nil || g.Host {
		t.Fatalf("the control plane's own connection on a full broker: %+v, %v", g, err)
	}
	operator := mustKey(t, nkeys.CreateUser)
	if g, err := a.Authenticate(full(broker.Client{JWT: userJWT(t, fx.account, operator, nil), Nonce: nonce, Sig: sign(t, operator, nonce)})); err != nil || g.Host {
		t.Fatalf("an operator on a full broker: %+v, %v", g, err)
	}
}

// TestLoginsWaitForReplication: a follower asks AwaitReplication about a new login
// whose key or token it does not know, and admits it if the state catches up
// meanwhile; a recheck (nats-server's reload) never waits; a token unknown still
// after the wait is refused and its failure counted once, before the wait, so
// logins in parallel get no more guesses than logins in turn.
func TestLoginsWaitForReplication(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	// arrive is what the leader committed and this follower has not applied yet.
	var arrive []state.Command
	waits := 0
	a.cfg.AwaitReplication = func(found func() bool) {
		waits++
		for _, c := range arrive {
			fx.apply(t, c)
			if found() {
				break
			}
		}
		arrive = nil
	}
	nonce := []byte("n")
	host := func(kp nkeys.KeyPair) broker.Client {
		return broker.Client{Nkey: pub(kp), Nonce: nonce, Sig: sign(t, kp, nonce), Remote: remote1}
	}

	// A node enrolled on the leader, its login here before the entry: admitted,
	// the unrelated entry applied before it notwithstanding.
	fresh := mustKey(t, nkeys.CreateUser)
	arrive = []state.Command{
		{Op: state.OpCreateToken, At: now0, CreateToken: &state.CreateTokenCmd{ID: "t9", Node: "app-9", Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpCreateToken, At: now0, CreateToken: &state.CreateTokenCmd{ID: "t10", Node: "app-10", Role: state.RoleWorker, TTL: time.Hour}},
		{Op: state.OpEnrol, At: now0, Enrol: &state.EnrolCmd{TokenID: "t10", Node: "app-10", Role: state.RoleWorker, PublicKey: pub(fresh)}},
	}
	g, err := a.Authenticate(host(fresh))
	if err != nil || g.User != NodeGrant("app-10").User {
		t.Fatalf("a key enrolled during the wait: %+v, %v", g, err)
	}
	if waits != 1 {
		t.Fatalf("waited %d times, want 1", waits)
	}
	// A known key never waits; an unknown one waits and is refused.
	if _, err := a.Authenticate(host(fx.web1)); err != nil || waits != 1 {
		t.Fatalf("a known key: %v, waits %d", err, waits)
	}
	if _, err := a.Authenticate(host(mustKey(t, nkeys.CreateUser))); !errors.Is(err, ErrUnknownKey) || waits != 2 {
		t.Fatalf("a key never enrolled: %v, waits %d", err, waits)
	}
	// nats-server's recheck of a connected client on a reload does not wait.
	c := host(mustKey(t, nkeys.CreateUser))
	c.Recheck = true
	if _, err := a.Authenticate(c); !errors.Is(err, ErrUnknownKey) || waits != 2 {
		t.Fatalf("a recheck: %v, waits %d", err, waits)
	}

	// A token minted on the leader, used here before the entry: admitted.
	var tok tokenfmt.Token
	rand.Read(tok.Secret[:])
	secret := hex.EncodeToString(tok.Secret[:])
	id, _ := SecretID(secret)
	arrive = []state.Command{{Op: state.OpCreateToken, At: now0, CreateToken: &state.CreateTokenCmd{ID: id, ProofKey: hex.EncodeToString(tok.ProofKey()), Node: "app-11", Role: state.RoleWorker, TTL: time.Hour}}}
	session := binding(3)
	if _, err := a.Authenticate(proving(t, "app-11", secret, mustKey(t, nkeys.CreateUser), nonce, session)); err != nil || waits != 3 {
		t.Fatalf("a token minted during the wait: %v, waits %d", err, waits)
	}
	// Unknown secrets: each waits, and the third failure (FailureLimit) blocks the
	// address, the one that arrived during the wait counted as a failure too.
	bad := strings.Repeat("ab", 32)
	for i := range 2 {
		if _, err := a.Authenticate(enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), nonce)); !errors.Is(err, ErrUnknownSecret) {
			t.Fatalf("unknown secret %d: %v", i, err)
		}
	}
	if waits != 5 {
		t.Fatalf("waits %d, want 5", waits)
	}
	// Blocked, an unknown secret is refused at once, without a wait.
	if _, err := a.Authenticate(enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), nonce)); !errors.Is(err, ErrRateLimited) || waits != 5 {
		t.Fatalf("after three counted failures: %v (waits %d), want ErrRateLimited without a wait", err, waits)
	}
}

// TestBlockedAddressesLogBounded: an attacker holding many addresses (an IPv6
// prefix) gets each one blocked in turn. Every block is enforced, but the log gets
// a few lines an interval, the next one counting those held back, not one line per
// address: before, 200 addresses wrote 200 lines.
func TestBlockedAddressesLogBounded(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	bad := strings.Repeat("cd", 32)
	const addresses = 200
	for i := range addresses {
		from := &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("2001:db8:%x::1", i+1)), Port: 40000}
		for range 3 { // FailureLimit
			c := enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), []byte("n"))
			c.Remote = from
			if _, err := a.Authenticate(c); !errors.Is(err, ErrUnknownSecret) {
				t.Fatalf("bad secret from %v: %v", from, err)
			}
		}
		c := enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), []byte("n"))
		c.Remote = from
		if _, err := a.Authenticate(c); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("%v not blocked after 3 failures: %v", from, err)
		}
	}
	lines := strings.Count(fx.logs.String(), "enrolment attempts from this address are blocked")
	if lines < 1 || lines > 5 {
		t.Fatalf("%d addresses blocked gave %d log lines, want 1 to 5:\n%s", addresses, lines, fx.logs.String())
	}
	// The next block after the interval says how many were held back.
	fx.clock = fx.clock.Add(logging.RepeatInterval)
	from := &net.TCPAddr{IP: net.ParseIP("2001:db9::1"), Port: 40000}
	for range 3 {
		c := enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), []byte("n"))
		c.Remote = from
		a.Authenticate(c)
	}
	if want := fmt.Sprintf("suppressed=%d", addresses-lines); !strings.Contains(fx.logs.String(), want) {
		t.Fatalf("the line after the interval does not say %s:\n%s", want, fx.logs.String())
	}
}

// TestAnIPv6PrefixIsOneAddress: failed enrolments from the addresses of one /64 count
// together, as one holder's: each address on its own was a fresh budget, 2^64 of them.
func TestAnIPv6PrefixIsOneAddress(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("")
	bad := strings.Repeat("cd", 32)
	try := func(ip string) error {
		c := enrolling(t, "web-2", bad, mustKey(t, nkeys.CreateUser), []byte("n"))
		c.Remote = &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}
		_, err := a.Authenticate(c)
		return err
	}
	for _, ip := range []string{"2001:db8::1", "2001:db8::2", "2001:db8::ffff:3"} {
		if err := try(ip); !errors.Is(err, ErrUnknownSecret) {
			t.Fatalf("from %s: %v", ip, err)
		}
	}
	if err := try("2001:db8::4"); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("a fourth address of the /64: %v, want ErrRateLimited", err)
	}
	if err := try("2001:db8:0:1::1"); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("another /64: %v, want its own budget", err)
	}
}

// refusalsDeclared counts the refusals the package's source makes (broker.NewRefusal).
func refusalsDeclared(t *testing.T) int {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pkgs {
		ast.Inspect(p, func(node ast.Node) bool {
			if call, ok := node.(*ast.CallExpr); ok {
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewRefusal" {
					n++
				}
			}
			return true
		})
	}
	return n
}

// TestOperatorKeysTheMeshDoesNotRecordAreRefused: once every control node's operator
// key is recorded, an operator logs in with a control node's credentials or with
// credentials recorded by name, and with nothing else the account signed (issued
// after the backup the mesh was restored from, or outside meshctl operator add);
// revoked ones, and bearer tokens, are refused; a connection ends at its
// credentials' expiry (a review: it outlived it with every right).
func TestOperatorKeysTheMeshDoesNotRecordAreRefused(t *testing.T) {
	fx := &fixture{fsm: state.NewFSM(), clock: now0}
	fx.account = mustKey(t, nkeys.CreateAccount)
	cp, alice, bob, stranger := mustKey(t, nkeys.CreateUser), mustKey(t, nkeys.CreateUser), mustKey(t, nkeys.CreateUser), mustKey(t, nkeys.CreateUser)
	at := now0.Add(-time.Hour)
	fx.apply(t, state.Command{Op: state.OpInit, At: at, Init: &state.InitCmd{Mesh: "demo", AdminAccount: pub(fx.account), Validity: time.Hour,
		Control: state.ControlNode{ID: "cp-1", Operator: pub(cp)}}})
	exp := now0.Add(30 * 24 * time.Hour)
	for name, kp := range map[string]nkeys.KeyPair{"alice": alice, "bob": bob} {
		fx.apply(t, state.Command{Op: state.OpAddOperator, At: at, Rules: state.RulesOperators, AddOperator: &state.AddOperatorCmd{Name: name, Key: pub(kp), Expires: exp}})
	}
	fx.apply(t, state.Command{Op: state.OpRevokeOperators, At: at, Rules: state.RulesOperators, RevokeOperators: &state.RevokeOperatorsCmd{Names: []string{"bob"}}})
	nonce := []byte("nonce-1")
	login := func(kp nkeys.KeyPair, edit func(*jwt.UserClaims)) (broker.Grant, error) {
		return fx.auth("").Authenticate(broker.Client{JWT: userJWT(t, fx.account, kp, edit), Nonce: nonce, Sig: sign(t, kp, nonce)})
	}
	if g, err := login(cp, nil); err != nil || g.Account != broker.AccountOperators || !g.Deadline.IsZero() {
		t.Fatalf("the control node's own credentials: %+v, %v", g, err)
	}
	g, err := login(alice, func(c *jwt.UserClaims) { c.Expires = exp.Unix() })
	if err != nil || g.Account != broker.AccountOperators || !g.Deadline.Equal(time.Unix(exp.Unix(), 0)) {
		t.Fatalf("alice, recorded: %+v, %v; want admitted until %s", g, err, exp)
	}
	if _, err := login(bob, func(c *jwt.UserClaims) { c.Expires = exp.Unix() }); !errors.Is(err, ErrOperatorRevoked) {
		t.Fatalf("bob, revoked: %v", err)
	}
	if _, err := login(stranger, nil); !errors.Is(err, ErrOperatorUnrecorded) {
		t.Fatalf("a key the account signed and nobody recorded: %v", err)
	}
	if _, err := login(alice, func(c *jwt.UserClaims) { c.Expires = exp.Unix(); c.BearerToken = true }); !errors.Is(err, ErrBadOperator) {
		t.Fatalf("alice's key in a bearer token: %v", err)
	}
}
