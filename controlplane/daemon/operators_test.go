package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/operatorcreds"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
	"mesh/integration/freeport"
	"mesh/tokenfmt"
)

// operatorJWT is a user JWT named name expiring at exp (0: never), signed by account.
func operatorJWT(t *testing.T, account nkeys.KeyPair, name string, exp int64) string {
	t.Helper()
	return operatorJWTWith(t, account, name, exp, nil)
}

func operatorJWTWith(t *testing.T, account nkeys.KeyPair, name string, exp int64, edit func(*jwt.UserClaims)) string {
	t.Helper()
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	claims := jwt.NewUserClaims(pub)
	claims.Name, claims.Expires = name, exp
	if edit != nil {
		edit(claims)
	}
	tok, err := claims.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func accountKey(t *testing.T, d *Daemon) nkeys.KeyPair {
	t.Helper()
	seed, err := datadir.Dir(d.opts.Dir).ReadFile(datadir.AccountKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// TestOperatorCredentialsAreRecordedOnlyAsTheirJWTSays: the control plane reads the
// name, key and expiry from the credentials' JWT, and records only credentials the
// mesh's operator account issued, that expire, within MaxOperatorLife, under a name
// every list and log shows as it is. Nothing else is recorded.
func TestOperatorCredentialsAreRecordedOnlyAsTheirJWTSays(t *testing.T) {
	d := fleet(t, 0)
	account := accountKey(t, d)
	other, _ := nkeys.CreateAccount()
	now := d.now()
	inAMonth := now.Add(30 * 24 * time.Hour).Unix()
	for name, c := range map[string]struct {
		jwt  string
		code string
	}{
		"another account's":     {operatorJWT(t, other, "alice", inAMonth), api.CodeBadRequest},
		"never expiring":        {operatorJWT(t, account, "alice", 0), api.CodeBadRequest},
		"expired":               {operatorJWT(t, account, "alice", now.Add(-time.Minute).Unix()), api.CodeBadRequest},
		"living past the cap":   {operatorJWT(t, account, "alice", now.Add(MaxOperatorLife+time.Hour).Unix()), api.CodeBadRequest},
		"a name with a slash":   {operatorJWT(t, account, "alice/../root", inAMonth), api.CodeBadRequest},
		"a name with a escape":  {operatorJWT(t, account, "al\x1b[2Jice", inAMonth), api.CodeBadRequest},
		"no JWT":                {"not a jwt", api.CodeBadRequest},
		"the first node's name": {operatorJWT(t, account, "admin", inAMonth), api.CodeBadRequest},
		"a control node's name": {operatorJWT(t, account, d.cfg.Node, inAMonth), api.CodeBadRequest},
		"a bearer token":        {operatorJWTWith(t, account, "alice", inAMonth, func(c *jwt.UserClaims) { c.BearerToken = true }), api.CodeBadRequest},
		"with permissions":      {operatorJWTWith(t, account, "alice", inAMonth, func(c *jwt.UserClaims) { c.Pub.Allow.Add(">") }), api.CodeBadRequest},
		"with limits":           {operatorJWTWith(t, account, "alice", inAMonth, func(c *jwt.UserClaims) { c.Limits.Subs = 1 }), api.CodeBadRequest},
		"with tags":             {operatorJWTWith(t, account, "alice", inAMonth, func(c *jwt.UserClaims) { c.Tags.Add("x") }), api.CodeBadRequest},
	} {
		_, err := d.operatorAdd(api.OperatorAddRequest{JWT: c.jwt})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
	}
	var n int
	d.fsm.Read(func(s *state.State) { n = len(s.Operators) })
	if n != 0 {
		t.Fatalf("%d credentials recorded from refused requests", n)
	}
	good := operatorJWT(t, account, "alice", inAMonth)
	res, err := d.operatorAdd(api.OperatorAddRequest{JWT: good, IssuedBy: "cp-9"})
	if err != nil || res.Operator.Name != "alice" || res.Operator.State != api.OperatorValid || res.Operator.Expires.Unix() != inAMonth || res.Repeated ||
		res.Operator.IssuedBy != "cp-9" {
		t.Fatalf("recorded: %+v, %v", res, err)
	}
	// Sent again (its answer lost): the same record, said to be one.
	if again, err := d.operatorAdd(api.OperatorAddRequest{JWT: good}); err != nil || !again.Repeated || again.Operator.Key != res.Operator.Key {
		t.Fatalf("sent again: %+v, %v", again, err)
	}
	_, err = d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", inAMonth)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOperatorExists {
		t.Fatalf("another credential under alice: %v, want operator_exists", err)
	}
	if _, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice", "bob"}}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Fatalf("revoking bob, never issued: %v, want not_found", err)
	}
	rev, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}})
	if err != nil || len(rev.Revoked) != 1 || rev.Revoked[0].State != api.OperatorRevoked {
		t.Fatalf("revoke: %+v, %v", rev, err)
	}
	if d.fsm.OperatorStanding(res.Operator.Key) != state.OperatorRevokedByName {
		t.Fatal("the revoked key is not refused")
	}
	list, _ := d.operatorList(api.OperatorListRequest{})
	if len(list.Operators) != 1 || list.Operators[0].State != api.OperatorRevoked {
		t.Fatalf("list: %+v", list)
	}
}

// TestOperatorCredentialsWaitForEveryControlNode: a control node on older rules
// would not know the command (and stop at it): nothing is recorded, and the answer
// names it.
func TestOperatorCredentialsWaitForEveryControlNode(t *testing.T) {
	d := fleet(t, 0)
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.RulesOperators - 1}, d.now(), 0)
	_, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, accountKey(t, d), "alice", d.now().Add(time.Hour).Unix())})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode || !strings.Contains(ae.Message, "cp-2") {
		t.Fatalf("with cp-2 on older rules: %v, want older_control_node naming cp-2", err)
	}
	if _, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}}); !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode {
		t.Fatalf("revoke with cp-2 on older rules: %v, want older_control_node", err)
	}
}

// TestOperatorRenewalsWaitForEveryControlNode: with a control node on the rules
// before renewals, a renewal and a revocation by key are refused, naming it: it
// would refuse the first and revoke the whole name for the second. A plain add and
// revoke still go. With every node on the rules, the renewal is recorded beside
// the valid credentials and the revocation by key takes the older alone.
func TestOperatorRenewalsWaitForEveryControlNode(t *testing.T) {
	d := fleet(t, 0)
	account := accountKey(t, d)
	exp := d.now().Add(time.Hour).Unix()
	first, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", exp)})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.raft.AddNonvoter("cp-2", "127.0.0.1:1", time.Minute); err != nil {
		t.Fatal(err)
	}
	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.RulesOperatorRenewal - 1}, d.now(), 0)
	var ae *api.Error
	_, err = d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", exp), Renew: true})
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode || !strings.Contains(ae.Message, "cp-2") || !strings.Contains(ae.Message, "renews") {
		t.Fatalf("a renewal with cp-2 on older rules: %v, want older_control_node naming cp-2", err)
	}
	_, err = d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}, Keys: []string{first.Operator.Key}})
	if !errors.As(err, &ae) || ae.Code != api.CodeOlderControlNode {
		t.Fatalf("a revocation by key with cp-2 on older rules: %v, want older_control_node", err)
	}
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "bob", exp)}); err != nil {
		t.Fatalf("a plain add with cp-2 on the rules of operator credentials: %v", err)
	}

	d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-2", Raft: api.RaftNonvoter, Rules: state.RulesOperatorRenewal}, d.now(), 0)
	renewed, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", exp), Renew: true})
	if err != nil || renewed.Operator.Key == first.Operator.Key {
		t.Fatalf("the renewal: %+v %v", renewed, err)
	}
	for _, bad := range []api.OperatorRevokeRequest{
		{Names: []string{"alice", "bob"}, Keys: []string{first.Operator.Key}},
		{Names: []string{"alice"}, Keys: []string{"UNOTAKEY"}},
	} {
		if _, err := d.operatorRevoke(bad); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Fatalf("revoke %+v: %v, want bad_request", bad, err)
		}
	}
	// "keys":[] as the API decodes it (an empty variable in a script) revoked every
	// key of the name (a review).
	if _, err := adminCall(api.OpOperatorRevoke, []byte(`{"v":2,"op":"operator.revoke","args":{"names":["alice"],"keys":[]}}`), d.operatorRevoke); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Fatalf("revoke with keys empty: %v, want bad_request", err)
	}
	if d.fsm.OperatorStanding(first.Operator.Key) != state.OperatorRecorded || d.fsm.OperatorStanding(renewed.Operator.Key) != state.OperatorRecorded {
		t.Fatal("a refused revocation revoked a key")
	}
	res, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}, Keys: []string{first.Operator.Key}})
	if err != nil || len(res.Revoked) != 1 || res.Revoked[0].Key != first.Operator.Key {
		t.Fatalf("revoke the older by key: %+v %v", res, err)
	}
	if d.fsm.OperatorStanding(first.Operator.Key) != state.OperatorRevokedByName || d.fsm.OperatorStanding(renewed.Operator.Key) != state.OperatorRecorded {
		t.Fatal("want the older key revoked and the renewal valid")
	}
}

// TestOperatorNamesAndControlNodeIdsStayApart: an operator's name is never a
// control node's id in any letter case, nor the id a pending control token admits,
// and a control token is not minted for an id that is an operator's name: the
// broker's listings and logs name both alike. Before (a review), the check was
// made at the operator's add alone, in one case: an operator cp-6 and then a
// control node cp-6 both stood, and CP-1 was taken beside cp-1.
func TestOperatorNamesAndControlNodeIdsStayApart(t *testing.T) {
	d := fleet(t, 0)
	account := accountKey(t, d)
	exp := d.now().Add(time.Hour).Unix()
	if res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: "tok-cp-8", Node: "cp-8", Role: state.RoleControl,
		TTL: time.Hour, Control: &state.ControlAddrs{Broker: "127.0.0.8:7300", Raft: "127.0.0.8:7301", Cluster: "127.0.0.8:7302"}, Sealed: []byte("sealed")}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("a control token for cp-8: %v %v", err, res.Err)
	}
	var ae *api.Error
	for _, name := range []string{strings.ToUpper(d.cfg.Node), "cp-8", "CP-8", "Admin"} {
		if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, name, exp)}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
			t.Errorf("operator %s: %v, want bad_request", name, err)
		}
	}
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "Cp-9", exp)}); err != nil {
		t.Fatal(err)
	}
	_, err := d.createToken(controlTokenRequest("cp-9", 9, d.now().Add(time.Hour)))
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "Cp-9") {
		t.Fatalf("a control token for cp-9 beside operator Cp-9: %v, want bad_request naming it", err)
	}
}

// TestOperatorNamesDifferMoreThanInCase: alice and Alice were both recorded, and
// `operator revoke alice` left Alice's credentials valid, lists and logs telling
// them apart by letter case alone (a docs walkthrough). A name differing from a
// recorded one only in case is refused, naming it; the same name is a renewal's
// business (operator_exists without --renew), as before.
func TestOperatorNamesDifferMoreThanInCase(t *testing.T) {
	d := fleet(t, 0)
	account := accountKey(t, d)
	exp := d.now().Add(time.Hour).Unix()
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", exp)}); err != nil {
		t.Fatal(err)
	}
	var ae *api.Error
	for _, name := range []string{"Alice", "ALICE"} {
		if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, name, exp)}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, `"alice", recorded already, only in letter case`) {
			t.Errorf("operator %s beside alice: %v, want bad_request naming alice", name, err)
		}
	}
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", exp)}); !errors.As(err, &ae) || ae.Code == api.CodeBadRequest {
		t.Errorf("alice again: %v, want the refusal of a name recorded (not bad_request)", err)
	}
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alicia", exp)}); err != nil {
		t.Errorf("another name: %v", err)
	}
	// Twins recorded before the check: each is renewed as before (refused, neither
	// could be, a review).
	user, _ := nkeys.CreateUser()
	key, _ := user.PublicKey()
	if res, err := d.raft.Apply(state.Command{Op: state.OpAddOperator, At: d.now().UTC(), Rules: state.RulesOperators,
		AddOperator: &state.AddOperatorCmd{Name: "Bob", Key: key, Expires: time.Unix(exp, 0).UTC()}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("record Bob: %v %v", err, res.Err)
	}
	user, _ = nkeys.CreateUser()
	key, _ = user.PublicKey()
	if res, err := d.raft.Apply(state.Command{Op: state.OpAddOperator, At: d.now().UTC(), Rules: state.RulesOperators,
		AddOperator: &state.AddOperatorCmd{Name: "bob", Key: key, Expires: time.Unix(exp, 0).UTC()}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("record bob beside Bob, as before the check: %v %v", err, res.Err)
	}
	for _, name := range []string{"bob", "Bob"} {
		if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, name, exp), Renew: true}); err != nil {
			t.Errorf("renew %s, a twin recorded before the check: %v", name, err)
		}
	}
	// A revoked record under the name (kept for months) lets no new twin in beside
	// a valid one (a review).
	if _, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"Bob"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "Bob", exp)}); !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
		t.Errorf("Bob anew, revoked, beside a valid bob: %v, want bad_request", err)
	}
}

// TestAnOperatorRevokedAgainIsSaidAlreadyRevoked: `operator revoke alice` run again
// read as a revocation made now (a docs walkthrough): the answer marks credentials
// revoked before the request, by the request's own time.
func TestAnOperatorRevokedAgainIsSaidAlreadyRevoked(t *testing.T) {
	d := fleet(t, 0)
	account := accountKey(t, d)
	if _, err := d.operatorAdd(api.OperatorAddRequest{JWT: operatorJWT(t, account, "alice", d.now().Add(time.Hour).Unix())}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		res, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}})
		if err != nil || len(res.Revoked) != 1 || res.Revoked[0].AlreadyRevoked != want {
			t.Fatalf("revoke %d: %+v, %v; want already_revoked %v", i+1, res, err, want)
		}
	}
}

// TestExpiredOperatorCredentialsAreSaidToBe: the broker refuses credentials past
// their JWT's expiry without saying why; meshctl says they expired, not that the
// control node may be older or the credentials another mesh's.
func TestExpiredOperatorCredentialsAreSaidToBe(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "expired")})
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	claims := jwt.NewUserClaims(pub)
	claims.Name, claims.Expires = "alice", time.Now().Add(-time.Minute).Unix()
	tok, err := claims.Encode(accountKey(t, d))
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := jwt.FormatUserConfig(tok, seed)
	e, path := credsEndpoint(t, d, creds)
	if _, err := operator.DialEndpoint(e, operator.Options{LeaderWait: -1}); !errors.Is(err, operator.ErrCredsExpired) {
		t.Fatalf("dial with expired credentials: %v, want ErrCredsExpired", err)
	}
	// Issued by operatorcreds, they work.
	issued, err := operatorcreds.Issue(datadir.Dir(d.opts.Dir), operatorcreds.Options{Name: "bob", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFile(path, issued.Creds); err != nil {
		t.Fatal(err)
	}
	c, err := operator.DialEndpoint(e, operator.Options{LeaderWait: -1})
	if err != nil {
		t.Fatalf("dial with bob's credentials: %v", err)
	}
	c.Close()
}

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

// credsEndpoint writes creds to a file of their own (mode 0600) and returns where
// d's control plane is reached with them, and the file.
func credsEndpoint(t *testing.T, d *Daemon, creds []byte) (operator.Endpoint, string) {
	t.Helper()
	path := t.TempDir() + "/op.creds"
	if err := writeFile(path, creds); err != nil {
		t.Fatal(err)
	}
	e, err := operator.DirEndpoint(datadir.Dir(d.opts.Dir), false)
	if err != nil {
		t.Fatal(err)
	}
	e.Creds = path
	return e, path
}

// TestRevokedOperatorConnectionsAreSweptWhereTheKickMissedThem: a control node that
// caught up from a snapshot runs no apply, and so no kick, for a revocation in it (a
// review); its broker kept the revoked credentials' open connection. Every node
// closes such connections every operatorSweepEvery. Here the kick at the apply is
// lost as it is for an entry replayed before the node opened.
func TestRevokedOperatorConnectionsAreSweptWhereTheKickMissedThem(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "sweep"), operatorSweepEvery: 200 * time.Millisecond})
	issued, err := operatorcreds.Issue(datadir.Dir(d.opts.Dir), operatorcreds.Options{Name: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e, path := credsEndpoint(t, d, issued.Creds)
	closed := make(chan struct{})
	nc, err := nats.Connect("tls://"+e.Servers[0], append(operator.CredsLogin(path, pki.PinnedClientConfig(e.Pin), 10*time.Second),
		nats.NoReconnect(), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d.effects.opened.Store(false) // the apply's kick is lost
	if _, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}}); err != nil {
		t.Fatal(err)
	}
	d.effects.opened.Store(true)
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked credentials' connection is still open")
	}
}

// TestAConnectionEndsWithItsCredentials: the broker closes an operator's connection
// when its credentials expire (a review: it kept every right past the expiry), and
// the call made on it says the credentials expired, not that the connection was
// lost (exit 3, "look before running it again", as if the mesh were unreachable).
func TestAConnectionEndsWithItsCredentials(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "ends")})
	user, _ := nkeys.CreateUser()
	key, _ := user.PublicKey()
	seed, _ := user.Seed()
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	claims := jwt.NewUserClaims(key)
	claims.Name, claims.Expires = "alice", exp.Unix()
	tok, err := claims.Encode(accountKey(t, d))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpAddOperator, At: d.now().UTC(), Rules: state.RulesOperators,
		AddOperator: &state.AddOperatorCmd{Name: "alice", Key: key, Expires: exp}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("record alice: %v %v", err, res.Err)
	}
	creds, _ := jwt.FormatUserConfig(tok, seed)
	e, _ := credsEndpoint(t, d, creds)
	c, err := operator.DialEndpoint(e, operator.Options{LeaderWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var res api.PingResult
	if err := c.Call(api.OpPing, struct{}{}, &res); err != nil {
		t.Fatalf("ping before the expiry: %v", err)
	}
	time.Sleep(time.Until(exp) + 500*time.Millisecond)
	if err := c.Call(api.OpPing, struct{}{}, &res); !errors.Is(err, operator.ErrCredsExpired) {
		t.Fatalf("ping after the expiry: %v, want ErrCredsExpired", err)
	}
}

// servingDaemon runs a control node with opts (runDaemon) and waits until it serves
// the API as the leader.
func servingDaemon(t *testing.T, opts Options) *Daemon {
	t.Helper()
	opts.ReadyTimeout = 20 * time.Second
	d, _ := runDaemon(t, opts)
	waitFor(t, 20*time.Second, "the control node serves", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.subs) > 0
	})
	return d
}

// TestAChangeIsLoggedByWhoSignedIt: each change is logged with the recorded name of
// the key that signed the request (meshctl signs every change with the credentials'
// key): alice's by alice, the control node's own credentials' by its id. A request
// unsigned, one whose body is not what was signed, or signed too long ago, is
// logged so, never under someone's name (a review of a first version, which took
// the name from a header the broker writes and a client can write before it). One
// whose signature does not verify is refused; so is one signed by credentials
// revoked since, whether it waited its turn behind the revocation or came later
// (through a broker that had not applied it): it was carried out, logged as by a
// revoked key (a review).
func TestAChangeIsLoggedByWhoSignedIt(t *testing.T) {
	var log lockedBuffer
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "signed"), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	dir := datadir.Dir(d.opts.Dir)
	issued, err := operatorcreds.Issue(dir, operatorcreds.Options{Name: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e, path := credsEndpoint(t, d, issued.Creds)
	if !strings.Contains(log.String(), `msg="operator change" op=operator.add by="`+d.cfg.Node+` (its admin.creds)"`) {
		t.Fatalf("the add through the node's own credentials is not logged by it:\n%s", log.String())
	}
	c, err := operator.DialEndpoint(e, operator.Options{LeaderWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.MintToken("web-1", tokenfmt.RoleWorker, time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), `msg="operator change" op=token.create by=alice key=`+issued.Record.Key+` outcome=done`) {
		t.Fatalf("alice's mint is not logged by her:\n%s", log.String())
	}
	// Requests made by hand on a connection of alice's.
	raw, err := nats.Connect("tls://"+e.Servers[0], operator.CredsLogin(path, pki.PinnedClientConfig(e.Pin), 10*time.Second)...)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	kp, err := jwt.ParseDecoratedUserNKey(issued.Creds)
	if err != nil {
		t.Fatal(err)
	}
	// answer sends a token.cancel signed over sigFor at at, and says how it was
	// answered: "done", the refusal's code, or what went wrong (no t.Fatal: it
	// runs in a goroutine too).
	answer := func(sigFor []byte, at int64, body []byte) string {
		m := nats.NewMsg(api.AdminSubject(api.OpTokenCancel))
		m.Data = body
		if sigFor != nil {
			sig, _ := kp.Sign(api.OperatorSigned(api.OpTokenCancel, at, "", sigFor))
			m.Header.Set(api.OperatorSigHeader, api.FormatOperatorSig(issued.Record.Key, at, sig))
		}
		r, err := raw.RequestMsg(m, 10*time.Second)
		if err != nil {
			return "no answer: " + err.Error()
		}
		var resp api.AdminResponse
		if err := json.Unmarshal(r.Data, &resp); err != nil {
			return "not an answer: " + err.Error()
		}
		if resp.Error == nil {
			return "done"
		}
		return resp.Error.Code
	}
	send := func(sigFor []byte, at int64, body []byte) string {
		t.Helper()
		got := answer(sigFor, at, body)
		if strings.HasPrefix(got, "no answer") || strings.HasPrefix(got, "not an answer") {
			t.Fatal(got)
		}
		return got
	}
	body := []byte(`{"v":2,"op":"token.cancel","args":{"node":"web-1"}}`)
	other := []byte(`{"v":2,"op":"token.cancel","args":{"node":"web-2"}}`)
	now := time.Now().Unix()
	before := strings.Count(log.String(), "by=alice")
	for _, c := range []struct {
		name       string
		sigFor     []byte
		at         int64
		wantAnswer string
	}{
		{"unsigned", nil, now, "done"},
		{"signed another body", other, now, api.CodeNotSigned},
		{"signed too long ago", body, now - int64(api.MaxOperatorSigSkew/time.Second) - 60, "done"},
	} {
		mintFor(t, d, "web-1")
		if got := send(c.sigFor, c.at, body); got != c.wantAnswer {
			t.Errorf("%s: answered %s, want %s", c.name, got, c.wantAnswer)
		}
	}
	if !strings.Contains(log.String(), `op=token.cancel by=(unsigned)`) {
		t.Fatalf("the unsigned request is not logged as such:\n%s", log.String())
	}
	if strings.Count(log.String(), `op=token.cancel by="(bad signature)"`) != 1 ||
		strings.Count(log.String(), `op=token.cancel by="(signed more than 5 minutes off this node's clock)"`) != 1 {
		t.Fatalf("want one request logged as badly signed, one as signed too long ago:\n%s", log.String())
	}
	if strings.Count(log.String(), "by=alice") != before {
		t.Fatalf("a request alice did not sign as sent was logged as hers:\n%s", log.String())
	}
	// From here on, alice's signature travels on the node's own connection
	// (hers is closed by her revocation).
	raw.Close()
	admin, err := nats.Connect("tls://"+e.Servers[0], operator.CredsLogin(dir.Path(datadir.AdminCredsFile), pki.PinnedClientConfig(e.Pin), 10*time.Second)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	raw = admin
	// A change of alice's that waits its turn behind her revocation is named as
	// her key stands when it runs, revoked, and refused.
	mintFor(t, d, "web-1")
	d.adminMu.Lock()
	waited := make(chan string)
	go func() {
		waited <- answer(body, time.Now().Unix(), body)
	}()
	// It arrives and waits for adminMu, judged after the revocation below: not
	// one that came after it, which is refused as well (a review).
	waitFor(t, 10*time.Second, "the change waits its turn", func() bool { return waitingForAdminMu() == 1 })
	if res, err := d.raft.Apply(state.Command{Op: state.OpRevokeOperators, At: d.now().UTC(), Rules: state.RulesOperators,
		RevokeOperators: &state.RevokeOperatorsCmd{Names: []string{"alice"}}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("revoke alice: %v %v", err, res.Err)
	}
	d.adminMu.Unlock()
	if got := <-waited; got != api.CodeCredentialsNotValid {
		t.Errorf("a change of alice's that waited behind her revocation: answered %s, want %s", got, api.CodeCredentialsNotValid)
	}
	if strings.Count(log.String(), "by=alice") != before || !strings.Contains(log.String(), `op=token.cancel by="alice (revoked key)" key=`+issued.Record.Key+` outcome=credentials_not_valid`) {
		t.Fatalf("a change that ran after alice's revocation is named as before it, or not refused:\n%s", log.String())
	}
	// Revoked, alice's key still signs (a leaked file): a change so signed, sent
	// through another's connection (as through a broker whose state has not
	// applied the revocation), is refused, said to be by a revoked key.
	if got := send(body, time.Now().Unix(), body); got != api.CodeCredentialsNotValid {
		t.Errorf("a change signed by a revoked key: answered %s, want %s", got, api.CodeCredentialsNotValid)
	}
	if strings.Count(log.String(), `op=token.cancel by="alice (revoked key)" key=`+issued.Record.Key+` outcome=credentials_not_valid`) != 2 {
		t.Fatalf("a change signed by a revoked key is not said to be, or not refused:\n%s", log.String())
	}
	if !tokenPending(d, "web-1") {
		t.Fatal("a change signed by a revoked key cancelled the token")
	}
}

// TestAChangeThatCannotBeSignedIsNotSent: a change meshctl cannot sign (its
// credentials file removed or damaged since it logged in) is not sent: before, it
// went unsigned without a word, carried out and logged as by nobody. Reads, which
// are not signed, still go.
func TestAChangeThatCannotBeSignedIsNotSent(t *testing.T) {
	var log lockedBuffer
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "unsignable"), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	issued, err := operatorcreds.Issue(datadir.Dir(d.opts.Dir), operatorcreds.Options{Name: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e, path := credsEndpoint(t, d, issued.Creds)
	c, err := operator.DialEndpoint(e, operator.Options{LeaderWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bob, err := operatorcreds.Issue(datadir.Dir(d.opts.Dir), operatorcreds.Options{Name: "bob", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, damage := range []struct {
		do     func() error
		advice string
	}{
		{func() error { return os.Remove(path) }, "put the credentials file back"},
		{func() error { return writeFile(path, []byte("not a creds file\n")) }, "put the credentials file back"},
		// Another operator's credentials in its place: a change on alice's
		// connection would be logged as bob's (a review).
		{func() error { return writeFile(path, bob.Creds) }, "run the command again"},
	} {
		if err := damage.do(); err != nil {
			t.Fatal(err)
		}
		_, err := c.MintToken("web-1", tokenfmt.RoleWorker, time.Hour, nil)
		if !errors.Is(err, operator.ErrNotSigned) {
			t.Fatalf("a change that cannot be signed: %v, want ErrNotSigned", err)
		}
		if !strings.Contains(err.Error(), damage.advice) {
			t.Errorf("the error does not say what to do (%q): %v", damage.advice, err)
		}
		if _, err := c.Nodes(api.NodesRequest{}); err != nil {
			t.Fatalf("a read after it: %v", err)
		}
	}
	if strings.Contains(log.String(), "op=token.create") {
		t.Fatalf("a change that could not be signed reached the control plane:\n%s", log.String())
	}
	var toks int
	d.fsm.Read(func(s *state.State) { toks = len(s.Tokens) })
	if toks != 0 {
		t.Fatalf("a change that could not be signed was carried out: %d token(s)", toks)
	}
}

// TestOperatorAddAwayFromTheAccountKeyNamesWhereItIs: operator add on a control
// node whose data directory holds no operator account key names the control node
// that holds it now, as the mesh's heartbeats say (as a control token's mint does),
// not mesh.json's holder at this node's join, which may have been lost and its keys
// restored elsewhere (a walkthrough was sent to the removed machine).
func TestOperatorAddAwayFromTheAccountKeyNamesWhereItIs(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "where")})
	src := datadir.Dir(d.opts.Dir)
	other := datadir.Dir(t.TempDir())
	for _, f := range []string{datadir.ConfigFile, datadir.CACertFile, datadir.AdminCredsFile} {
		data, err := src.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(other.Path(f), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	waitFor(t, 20*time.Second, "the error names the holder the mesh reports", func() bool {
		_, err = operatorcreds.Issue(other, operatorcreds.Options{Name: "alice", TTL: time.Hour})
		return err != nil && strings.Contains(err.Error(), d.cfg.Node+", which holds it now")
	})
	if !errors.Is(err, operatorcreds.ErrNoAccountKey) {
		t.Fatalf("%v, want ErrNoAccountKey", err)
	}
}

// mintFor records a pending worker token for node (replacing one pending), as an
// operator's mint does.
func mintFor(t *testing.T, d *Daemon, node string) {
	t.Helper()
	var id [32]byte
	rand.Read(id[:])
	if _, err := d.createToken(api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: node,
		Role: state.RoleWorker, TTL: api.Duration(time.Hour), Replace: true}); err != nil {
		t.Fatalf("mint for %s: %v", node, err)
	}
}

// tokenPending reports whether node has a pending token.
func tokenPending(d *Daemon, node string) (pending bool) {
	d.fsm.Read(func(s *state.State) { pending = len(s.PendingTokens(node, d.now())) > 0 })
	return pending
}

// TestRequireSignedChanges: with RequireSignedChanges a change unsigned (the stock
// nats CLI, an older meshctl) or signed too far from the node's clock is refused,
// not_signed, and nothing done; one signed by valid credentials is carried out.
// Signed by credentials that expired since, it is refused with or without the
// option: credentials_not_valid (decision 0042).
func TestRequireSignedChanges(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "require"), RequireSignedChanges: true, Now: now})
	dir := datadir.Dir(d.opts.Dir)
	issued, err := operatorcreds.Issue(dir, operatorcreds.Options{Name: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e, _ := credsEndpoint(t, d, issued.Creds)
	admin, err := nats.Connect("tls://"+e.Servers[0], operator.CredsLogin(dir.Path(datadir.AdminCredsFile), pki.PinnedClientConfig(e.Pin), 10*time.Second)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	creds, err := os.ReadFile(dir.Path(datadir.AdminCredsFile))
	if err != nil {
		t.Fatal(err)
	}
	node, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := jwt.ParseDecoratedUserNKey(issued.Creds)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"v":2,"op":"token.cancel","args":{"node":"web-1"}}`)
	send := func(kp nkeys.KeyPair, at time.Time) (string, string) {
		t.Helper()
		m := nats.NewMsg(api.AdminSubject(api.OpTokenCancel))
		m.Data = body
		if kp != nil {
			pub, _ := kp.PublicKey()
			sig, _ := kp.Sign(api.OperatorSigned(api.OpTokenCancel, at.Unix(), "", body))
			m.Header.Set(api.OperatorSigHeader, api.FormatOperatorSig(pub, at.Unix(), sig))
		}
		r, err := admin.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var resp api.AdminResponse
		if err := json.Unmarshal(r.Data, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.Error == nil {
			return "done", ""
		}
		return resp.Error.Code, resp.Error.Message
	}
	for _, c := range []struct {
		name   string
		kp     nkeys.KeyPair
		at     time.Duration
		want   string
		saying string
	}{
		{"unsigned", nil, 0, api.CodeNotSigned, "--require-signed-changes"},
		{"signed too long ago", node, -api.MaxOperatorSigSkew - time.Minute, api.CodeNotSigned, "set the clock"},
		{"signed ahead of the clock", node, api.MaxOperatorSigSkew + time.Minute, api.CodeNotSigned, "set the clock"},
		{"signed by the node's credentials", node, 0, "done", ""},
		{"signed by alice's", alice, 0, "done", ""},
	} {
		mintFor(t, d, "web-1")
		code, msg := send(c.kp, now().Add(c.at))
		if code != c.want || !strings.Contains(msg, c.saying) {
			t.Errorf("%s: answered %s (%s), want %s saying %q", c.name, code, msg, c.want, c.saying)
		}
		if pending := tokenPending(d, "web-1"); pending != (c.want != "done") {
			t.Errorf("%s: the token is pending %t after the answer %s", c.name, pending, code)
		}
	}
	// An operation this node does not know (a newer meshctl's read, unsigned) is
	// not_found, as ever, not refused as a change not signed (a review).
	r, err := admin.Request(api.AdminSubject("nosuch.read"), []byte(`{"v":2,"op":"nosuch.read","args":{}}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp api.AdminResponse
	if json.Unmarshal(r.Data, &resp) != nil || resp.Error == nil || resp.Error.Code != api.CodeNotFound {
		t.Errorf("an unknown operation, unsigned: %s, want not_found", r.Data)
	}
	// Two hours on, alice's credentials have expired: her key still signs.
	skew.Store(int64(2 * time.Hour))
	mintFor(t, d, "web-1")
	if code, msg := send(alice, now()); code != api.CodeCredentialsNotValid || !strings.Contains(msg, "expired at") || !strings.Contains(msg, "alice's credentials") {
		t.Errorf("signed by expired credentials: answered %s (%s), want %s", code, msg, api.CodeCredentialsNotValid)
	}
	if !tokenPending(d, "web-1") {
		t.Error("a change signed by expired credentials cancelled the token")
	}
}

// TestARenewalWhoseAnswerIsLostNamesItsKey (a review): credentials issued whose
// answer never came may be recorded, their seed gone with meshctl; the error
// names their key and how to revoke them alone, and revoking it so leaves the
// credentials in use valid.
func TestARenewalWhoseAnswerIsLostNamesItsKey(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "lostanswer")})
	dir := datadir.Dir(d.opts.Dir)
	first, err := operatorcreds.Issue(dir, operatorcreds.Options{Name: "alice", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	d.adminMu.Lock() // the renewal waits its turn past meshctl's timeout
	_, err = operatorcreds.Issue(dir, operatorcreds.Options{Name: "alice", TTL: time.Hour, Renew: true, Operator: operator.Options{Timeout: 500 * time.Millisecond}})
	d.adminMu.Unlock()
	if !errors.Is(err, operator.ErrNoAnswer) {
		t.Fatalf("want no answer, got %v", err)
	}
	var key string
	waitFor(t, 10*time.Second, "the renewal recorded once its turn came", func() bool {
		d.fsm.Read(func(s *state.State) {
			for _, o := range s.OperatorList() {
				if o.Name == "alice" && o.Key != first.Record.Key {
					key = o.Key
				}
			}
		})
		return key != ""
	})
	if want := "meshctl operator revoke alice --key " + key; !strings.Contains(err.Error(), want) {
		t.Fatalf("the error does not say %q: %v", want, err)
	}
	if _, err := d.operatorRevoke(api.OperatorRevokeRequest{Names: []string{"alice"}, Keys: []string{key}}); err != nil {
		t.Fatal(err)
	}
	if d.fsm.OperatorStanding(first.Record.Key) != state.OperatorRecorded {
		t.Fatal("revoking the lost renewal revoked the credentials in use")
	}
}

// TestTheSignerIsJudgedAsTheChangeRuns (a review): the key that signed a change is
// judged by the leader's state whatever the signature's time: a removed control
// node's admin.creds, credentials the mesh holds no record of, and revoked ones
// signing with their clock set back are refused, credentials_not_valid; valid
// credentials out of time are carried out (without RequireSignedChanges). While a
// control node's key was never recorded (an older mesh) an unrecorded key is not
// refused, as its login is not. A commit left pending makes the next judgement
// wait for everything before it (a Barrier) first.
func TestTheSignerIsJudgedAsTheChangeRuns(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "judged")})
	apply := func(c state.Command) {
		t.Helper()
		c.At = d.now().UTC()
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	admit := func(node, operatorKey string) {
		t.Helper()
		addrs := freeport.Addrs(t, 3)
		apply(state.Command{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: "tok-" + node, Node: node, Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2], Pin: strings.Repeat("ab", 32), Operator: operatorKey},
			Sealed:  []byte("sealed")}})
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		curve, _ := nkeys.CreateCurveKeys()
		cpub, _ := curve.PublicKey()
		apply(state.Command{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: "tok-" + node, Node: node, Role: state.RoleControl, PublicKey: pub, CurveKey: cpub}})
	}
	key := func() string {
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		return pub
	}
	cp2, alice, stranger := key(), key(), key()
	admit("cp-2", cp2)
	apply(state.Command{Op: state.OpRemoveControl, RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}})
	apply(state.Command{Op: state.OpAddOperator, Rules: state.RulesOperators, AddOperator: &state.AddOperatorCmd{Name: "alice", Key: alice, Expires: d.now().Add(time.Hour)}})
	apply(state.Command{Op: state.OpRevokeOperators, Rules: state.RulesOperators, RevokeOperators: &state.RevokeOperatorsCmd{Names: []string{"alice"}}})
	var self string
	d.fsm.Read(func(s *state.State) {
		for _, n := range s.ControlNodes {
			if n.ID == d.cfg.Node {
				self = n.Operator
			}
		}
	})
	if self == "" {
		t.Fatal("this node's credentials' key is not recorded")
	}
	var ae *api.Error
	for _, c := range []struct {
		name, key, signed string
		refused           bool
		by                string
	}{
		{"a removed control node's admin.creds", cp2, "", true, "cp-2 (removed; its admin.creds)"},
		{"unrecorded credentials", stranger, "", true, byUnrecorded},
		{"revoked credentials, signed long ago", alice, byOutOfTime, true, byOutOfTime},
		{"this node's credentials, signed long ago", self, byOutOfTime, false, byOutOfTime},
		{"this node's credentials", self, "", false, d.cfg.Node + " (its admin.creds)"},
		{"unsigned", "", byUnsigned, false, byUnsigned},
	} {
		by, err := d.judgeSigner(c.key, c.signed)
		if refused := errors.As(err, &ae) && ae.Code == api.CodeCredentialsNotValid; refused != c.refused || (err != nil && !refused) || by != c.by {
			t.Errorf("%s: named %q, %v; want named %q, refused %t", c.name, by, err, c.by, c.refused)
		}
		if c.refused && (strings.Contains(ae.Message, "((") || !strings.Contains(ae.Message, c.key)) {
			t.Errorf("%s: the refusal does not name the key, or names it badly: %s", c.name, ae.Message)
		}
	}
	if _, err := d.judgeSigner(cp2, ""); !strings.Contains(err.Error(), "active control node's admin.creds") {
		t.Errorf("a removed node's refusal advises new credentials by name alone: %v", err)
	}
	// An older mesh: a control node whose key was never recorded.
	admit("cp-3", "")
	if by, err := d.judgeSigner(stranger, ""); err != nil || by != byUnrecorded {
		t.Errorf("an unrecorded key while a control node's key is unrecorded: named %q, %v; want carried out", by, err)
	}
	// There, --require-signed-changes carried out a change signed by any key made
	// on the spot (a review): only recorded credentials may sign under it.
	d.opts.RequireSignedChanges = true
	if _, err := d.judgeSigner(stranger, ""); !errors.As(err, &ae) || ae.Code != api.CodeCredentialsNotValid || !strings.Contains(ae.Message, "--require-signed-changes") {
		t.Errorf("an unrecorded key under --require-signed-changes, a control node's key unrecorded: %v, want %s", err, api.CodeCredentialsNotValid)
	}
	if by, err := d.judgeSigner(self, ""); err != nil || by != d.cfg.Node+" (its admin.creds)" {
		t.Errorf("this node's recorded credentials under --require-signed-changes: named %q, %v", by, err)
	}
	d.opts.RequireSignedChanges = false
	d.changePending.Store(true)
	if _, err := d.judgeSigner(self, ""); err != nil || d.changePending.Load() {
		t.Errorf("a judgement after a pending commit: %v, still pending %t; want the pending change waited for", err, d.changePending.Load())
	}
	// A change that waited its turn across a step-down and a new term of this
	// node is judged once what the terms between committed is applied (a review).
	d.currentTerm.Store(0)
	if _, err := d.judgeSigner(self, ""); err != nil || d.currentTerm.Load() != d.raft.Status().Term {
		t.Errorf("a judgement in a term not barriered: %v, term barriered %d, want %d", err, d.currentTerm.Load(), d.raft.Status().Term)
	}
}

// waitingForAdminMu counts the operator requests waiting for adminMu, their turn
// to run, by the goroutines' stacks.
func waitingForAdminMu() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sync.(*Mutex).Lock") && strings.Contains(g, "(*Daemon).serveAdmin") {
			n++
		}
	}
	return n
}
