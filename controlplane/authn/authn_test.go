package authn

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/state"
	"mesh/tokenfmt"
)

var now0 = time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)

// fixture is a mesh roster with an admin account, a node, a revoked node, a node whose
// id enrolled again after revocation, and an unused token.
type fixture struct {
	fsm     *state.FSM
	index   uint64
	account nkeys.KeyPair
	web1    nkeys.KeyPair // enrolled, live
	gone    nkeys.KeyPair // enrolled, revoked
	oldDB   nkeys.KeyPair // db-1's first key, revoked; db-1 enrolled again with newDB
	newDB   nkeys.KeyPair
	secret  string // hex secret of an unused token for web-2
	clock   time.Time
	logs    bytes.Buffer
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
	fx.apply(t, state.Command{Op: state.OpInit, At: at, Init: &state.InitCmd{Mesh: "demo", AdminAccount: accountPub, Validity: time.Hour}})
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

	var tok tokenfmt.Token
	if _, err := rand.Read(tok.Secret[:]); err != nil {
		t.Fatal(err)
	}
	fx.secret = hex.EncodeToString(tok.Secret[:])
	id, ok := SecretID(fx.secret)
	if !ok {
		t.Fatal("SecretID refused a fresh secret")
	}
	fx.apply(t, state.Command{Op: state.OpCreateToken, At: now0, CreateToken: &state.CreateTokenCmd{ID: id, Node: "web-2", Role: state.RoleWorker, TTL: time.Hour}})
	return fx
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
		FSM:           fx.fsm,
		InternalToken: internal,
		Logger:        slog.New(slog.NewTextHandler(&fx.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:           func() time.Time { return fx.clock },
		FailureLimit:  3,
		FailureWindow: time.Minute,
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
func sign(t *testing.T, kp nkeys.KeyPair, nonce []byte) string {
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

	tests := []struct {
		name     string
		internal string
		client   broker.Client
		want     error        // nil: granted
		grant    broker.Grant // checked when want is nil (Deadline compared separately)
	}{
		// The control plane's own client.
		{name: "internal token", internal: "s3cret-internal", client: broker.Client{Token: "s3cret-internal"},
			grant: broker.Grant{User: InternalUser, AllowAll: true}},
		{name: "internal token wrong", internal: "s3cret-internal", client: broker.Client{Token: "s3cret-internaX"}, want: ErrInternalMissing},
		{name: "internal token prefix", internal: "s3cret-internal", client: broker.Client{Token: "s3cret"}, want: ErrInternalMissing},
		{name: "internal token not configured", internal: "", client: broker.Client{Token: "anything"}, want: ErrInternalMissing},

		// Operators.
		{name: "operator", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: sign(t, operator, nonce)},
			grant: broker.Grant{User: OperatorUserPrefix + "alice", AllowAll: true}},
		{name: "operator std base64 sig", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: func() string {
			s, _ := operator.Sign(nonce)
			return base64.StdEncoding.EncodeToString(s)
		}()}, grant: broker.Grant{User: OperatorUserPrefix + "alice", AllowAll: true}},
		{name: "operator of another account", client: broker.Client{JWT: userJWT(t, otherAccount, operator, nil), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator signed by another account claiming ours", client: broker.Client{JWT: userJWT(t, otherAccount, operator, func(c *jwt.UserClaims) {
			c.IssuerAccount = pub(fx.account)
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator expired", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.Expires = now0.Add(-time.Second).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator not yet valid", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.NotBefore = now0.Add(time.Hour).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator expiring later", client: broker.Client{JWT: userJWT(t, fx.account, operator, func(c *jwt.UserClaims) {
			c.Expires = now0.Add(time.Hour).Unix()
		}), Nonce: nonce, Sig: sign(t, operator, nonce)}, grant: broker.Grant{User: OperatorUserPrefix + "alice", AllowAll: true}},
		{name: "operator JWT tampered", client: broker.Client{JWT: tampered, Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator JWT garbage", client: broker.Client{JWT: "not.a.jwt", Nonce: nonce, Sig: sign(t, operator, nonce)}, want: ErrBadOperator},
		{name: "operator nonce signed by another key", client: broker.Client{JWT: goodJWT, Nonce: nonce, Sig: sign(t, fx.web1, nonce)}, want: ErrBadSignature},
		{name: "operator no nonce", client: broker.Client{JWT: goodJWT, Sig: sign(t, operator, nonce)}, want: ErrBadSignature},
		{name: "operator no sig", client: broker.Client{JWT: goodJWT, Nonce: nonce}, want: ErrBadSignature},

		// Enrolled nodes.
		{name: "node", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, nonce)},
			grant: broker.Grant{
				User:      "node:web-1",
				Publish:   []string{"mesh.node.web-1.status", "mesh.node.web-1.sync"},
				Subscribe: []string{"mesh.node.web-1.decl", "_INBOX.node.web-1.>"},
			}},
		{name: "node enrolled again with a new key", client: broker.Client{Nkey: pub(fx.newDB), Nonce: nonce, Sig: sign(t, fx.newDB, nonce)},
			grant: broker.Grant{
				User:      "node:db-1",
				Publish:   []string{"mesh.node.db-1.status", "mesh.node.db-1.sync"},
				Subscribe: []string{"mesh.node.db-1.decl", "_INBOX.node.db-1.>"},
			}},
		{name: "node unknown key", client: func() broker.Client {
			kp := mustKey(t, nkeys.CreateUser)
			return broker.Client{Nkey: pub(kp), Nonce: nonce, Sig: sign(t, kp, nonce)}
		}(), want: ErrUnknownKey},
		{name: "node revoked", client: broker.Client{Nkey: pub(fx.gone), Nonce: nonce, Sig: sign(t, fx.gone, nonce)}, want: ErrRevoked},
		{name: "node key revoked, id enrolled again", client: broker.Client{Nkey: pub(fx.oldDB), Nonce: nonce, Sig: sign(t, fx.oldDB, nonce)}, want: ErrRevoked},
		{name: "node bad sig", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.newDB, nonce)}, want: ErrBadSignature},
		{name: "node sig of another nonce", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: sign(t, fx.web1, []byte("old-nonce"))}, want: ErrBadSignature},
		{name: "node sig not base64", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce, Sig: "!!!"}, want: ErrBadSignature},
		{name: "node missing nonce", client: broker.Client{Nkey: pub(fx.web1), Sig: sign(t, fx.web1, nonce)}, want: ErrBadSignature},
		{name: "node missing sig", client: broker.Client{Nkey: pub(fx.web1), Nonce: nonce}, want: ErrBadSignature},
		{name: "node key is an account key", client: broker.Client{Nkey: pub(fx.account), Nonce: nonce, Sig: sign(t, fx.account, nonce)}, want: ErrUnknownKey},
		{name: "node key garbage", client: broker.Client{Nkey: "Uxyz", Nonce: nonce, Sig: "x"}, want: ErrUnknownKey},

		// Enrolling clients.
		{name: "enrolling", client: broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1},
			grant: broker.Grant{User: "enrol:web-2", Publish: []string{"mesh.enrol.web-2"}, Subscribe: []string{"_INBOX.enrol.web-2.>"}}},
		{name: "enrolling upper-case hex", client: broker.Client{Username: "enrol:web-2", Password: strings.ToUpper(fx.secret), Remote: remote1},
			grant: broker.Grant{User: "enrol:web-2", Publish: []string{"mesh.enrol.web-2"}, Subscribe: []string{"_INBOX.enrol.web-2.>"}}},
		// A known secret for another node gets that node's enrolment subject only; the
		// enrolment handler then says "issued for another node".
		{name: "enrolling names another node", client: broker.Client{Username: "enrol:web-3", Password: fx.secret, Remote: remote1},
			grant: broker.Grant{User: "enrol:web-3", Publish: []string{"mesh.enrol.web-3"}, Subscribe: []string{"_INBOX.enrol.web-3.>"}}},
		{name: "enrolling unknown secret", client: broker.Client{Username: "enrol:web-2", Password: strings.Repeat("ab", 32), Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling short secret", client: broker.Client{Username: "enrol:web-2", Password: fx.secret[:62], Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling long secret", client: broker.Client{Username: "enrol:web-2", Password: fx.secret + "00", Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling non-hex secret", client: broker.Client{Username: "enrol:web-2", Password: strings.Repeat("zz", 32), Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling the token id instead of the secret", client: broker.Client{Username: "enrol:web-2", Password: func() string { id, _ := SecretID(fx.secret); return id }(), Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling empty secret", client: broker.Client{Username: "enrol:web-2", Remote: remote1}, want: ErrUnknownSecret},
		{name: "enrolling no node", client: broker.Client{Username: "enrol:", Password: fx.secret, Remote: remote1}, want: broker.ErrRefused},
		{name: "enrolling wildcard node", client: broker.Client{Username: "enrol:>", Password: fx.secret, Remote: remote1}, want: broker.ErrRefused},
		{name: "enrolling dotted node", client: broker.Client{Username: "enrol:web-2.decl", Password: fx.secret, Remote: remote1}, want: broker.ErrRefused},
		{name: "enrolling star node", client: broker.Client{Username: "enrol:*", Password: fx.secret, Remote: remote1}, want: broker.ErrRefused},
		{name: "enrolling upper-case node", client: broker.Client{Username: "enrol:WEB-2", Password: fx.secret, Remote: remote1}, want: broker.ErrRefused},

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
				if g.User != "" || g.AllowAll || g.Publish != nil || g.Subscribe != nil {
					t.Fatalf("a refusal came with a grant: %+v", g)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if g.User != tt.grant.User || g.AllowAll != tt.grant.AllowAll ||
				!slices.Equal(g.Publish, tt.grant.Publish) || !slices.Equal(g.Subscribe, tt.grant.Subscribe) {
				t.Fatalf("grant = %+v, want %+v", g, tt.grant)
			}
			if strings.HasPrefix(g.User, EnrolUserPrefix) {
				if !g.Deadline.Equal(now0.Add(30 * time.Second)) {
					t.Fatalf("enrolling deadline = %v, want now+30s", g.Deadline)
				}
			} else if !g.Deadline.IsZero() {
				t.Fatalf("%s got a connection deadline %v", g.User, g.Deadline)
			}
		})
	}
}

// Errors are distinct: a person reading the log can tell every refusal apart.
func TestRefusalsAreDistinct(t *testing.T) {
	errs := []error{ErrNoCredentials, ErrBadSignature, ErrUnknownKey, ErrRevoked, ErrUnknownSecret, ErrRateLimited, ErrBadOperator, ErrInternalMissing}
	for i, a := range errs {
		if !errors.Is(a, broker.ErrRefused) {
			t.Errorf("%v does not wrap broker.ErrRefused", a)
		}
		for j, b := range errs {
			if i != j && (errors.Is(a, b) || a.Error() == b.Error()) {
				t.Errorf("%v and %v are not distinct", a, b)
			}
		}
	}
}

func TestOperatorBeforeInit(t *testing.T) {
	a := New(Config{FSM: state.NewFSM(), Logger: slog.New(slog.DiscardHandler)})
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
		_, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: secret, Remote: from})
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
	// The third failure within the window blocks the address, even for a valid
	// secret, and from another port of the same host.
	fx.clock = fx.clock.Add(30 * time.Second)
	if err := try(bad, samehost); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("third bad secret: %v", err)
	}
	for _, from := range []net.Addr{remote1, samehost} {
		if err := try(fx.secret, from); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("valid secret from a blocked address %v: err = %v, want ErrRateLimited", from, err)
		}
	}
	if !strings.Contains(fx.logs.String(), "blocked") {
		t.Error("the block was not logged")
	}
	// Other addresses are unaffected.
	if err := try(fx.secret, other); err != nil {
		t.Fatalf("another address: %v", err)
	}
	// Still blocked just before the window passes.
	fx.clock = fx.clock.Add(time.Minute - time.Second)
	if err := try(fx.secret, remote1); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("1s before the block ends: %v", err)
	}
	fx.clock = fx.clock.Add(time.Second)
	if err := try(fx.secret, remote1); err != nil {
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
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("err = %v, want ErrRateLimited", err)
	}
	// Invalid node names are refused before the limiter and do not count.
	fx2 := newFixture(t)
	b := fx2.auth("")
	for range 10 {
		b.Authenticate(broker.Client{Username: "enrol:BAD", Password: "x", Remote: remote1})
	}
	if _, err := b.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx2.secret, Remote: remote1}); err != nil {
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
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1}); err != nil {
		t.Fatalf("slow failures blocked the address: %v", err)
	}
}

func TestDefaults(t *testing.T) {
	fx := newFixture(t)
	a := New(Config{FSM: fx.fsm, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return fx.clock }})
	for i := range 5 {
		if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: "x", Remote: remote1}); !errors.Is(err, ErrUnknownSecret) {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	// Five failures within the default minute block.
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1}); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("after 5 failures: %v", err)
	}
	fx.clock = fx.clock.Add(time.Minute)
	if _, err := a.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1}); err != nil {
		t.Fatalf("after a minute: %v", err)
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	fx := newFixture(t)
	a := fx.auth("internal-token-value")
	wrongSecret := strings.Repeat("9f", 32)
	for range 5 {
		a.Authenticate(broker.Client{Username: "enrol:web-2", Password: wrongSecret, Remote: remote1})
		a.Authenticate(broker.Client{Username: "enrol:web-2", Password: fx.secret, Remote: remote1})
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
	f.Add("enrol:web-2", "00", "", "", "", []byte("n"))
	f.Add("", "", "tok", "", "", []byte(nil))
	f.Add("", "", "", "UABC", "sig", []byte("nonce"))
	f.Add("", "", "", "", "eyJhbGciOiJlZDI1NTE5In0.e30.sig", []byte("nonce"))
	fx := newFixture(f)
	f.Fuzz(func(t *testing.T, user, pass, token, nkey, jwtText string, nonce []byte) {
		a := New(Config{FSM: fx.fsm, InternalToken: "internal", Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now0 }})
		g, err := a.Authenticate(broker.Client{Username: user, Password: pass, Token: token, Nkey: nkey, JWT: jwtText, Sig: "x", Nonce: nonce, Remote: remote1})
		if err != nil {
			if !errors.Is(err, broker.ErrRefused) {
				t.Fatalf("refusal %v does not wrap ErrRefused", err)
			}
			return
		}
		// Only the internal token and a minted secret can get in without a signature.
		switch {
		case g.AllowAll && token == "internal":
		case strings.HasPrefix(g.User, EnrolUserPrefix):
			if _, ok := SecretID(pass); !ok {
				t.Fatalf("granted %+v for a malformed secret", g)
			}
		default:
			t.Fatalf("granted %+v to an unsigned client", g)
		}
	})
}
