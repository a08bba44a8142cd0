package state

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var allEnrolErrors = []error{
	ErrTokenUnknown, ErrTokenUsed, ErrTokenExpired, ErrTokenOtherNode, ErrTokenWrongRole,
	ErrNodeExists, ErrKeyRevoked, ErrKeyInUse, ErrNotInitialised, ErrBadCommand, ErrTokenExpiredAdmitted,
}

// assertOnly fails unless err is want and none of the other enrolment errors.
func assertOnly(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want %v", err, want)
	}
	for _, other := range allEnrolErrors {
		if other != want && errors.Is(err, other) {
			t.Fatalf("err = %v is also %v; refusals must be distinct", err, other)
		}
	}
}

func TestCommandsBeforeInitAreRefused(t *testing.T) {
	for _, c := range []Command{
		tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour),
		enrolCmd("tok", "web-1", RoleWorker, "K", t0),
		declareCmd(Selector{All: true}, `{"files":[]}`, t0),
		revokeCmd("web-1", t0),
		{Op: OpProbe, At: t0, Probe: &ProbeCmd{ID: "p"}},
	} {
		m := newMachine(t)
		if r := m.apply(c); !errors.Is(r.Err, ErrNotInitialised) {
			t.Errorf("%s before init: err = %v, want ErrNotInitialised", c.Op, r.Err)
		}
		if s := m.state(); s.Initialised() || len(s.Tokens) != 0 {
			t.Errorf("%s before init changed the state", c.Op)
		}
	}
}

func TestInit(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	s := m.state()
	if s.Mesh != "demo" || !s.CreatedAt.Equal(t0) || s.AdminAccount != "AADMINACCOUNT" || s.Validity != testValidity {
		t.Fatalf("state after init = %+v", s)
	}
	if s.Keyring.Epoch != 1 || !slices.Equal(s.Keyring.Keys, []string{"aa11"}) || string(s.Keyring.Envelope) != `{"payloadType":"k"}` {
		t.Fatalf("keyring after init = %+v", s.Keyring)
	}
	if got := s.Bodies[BodyDigest(EmptyBody())]; string(got) != `{"files":[]}` {
		t.Fatalf("empty body not stored: %q", got)
	}
	before := m.snapshot()

	// Repeated init of the same mesh (a restart proposing it again) changes nothing.
	again := initCmd("demo", t0.Add(time.Hour))
	again.Init.AdminAccount = "AOTHER"
	m.must(again)
	if got := m.snapshot(); string(got) != string(before) {
		t.Fatalf("repeated init changed the state:\n%s\n%s", before, got)
	}

	// Another mesh is refused, and the state keeps its mesh.
	r := m.apply(initCmd("other", t0))
	if !errors.Is(r.Err, ErrBadCommand) || !strings.Contains(r.Err.Error(), `"demo"`) {
		t.Fatalf("init of another mesh: err = %v, want ErrBadCommand naming demo", r.Err)
	}
	if got := m.snapshot(); string(got) != string(before) {
		t.Fatal("refused init changed the state")
	}
}

func TestCreateToken(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	at := t0.Add(2 * time.Minute)
	r := m.must(Command{Op: OpCreateToken, At: at, CreateToken: &CreateTokenCmd{
		ID: "tok-2", Node: "web-2", Role: RoleControl, Labels: map[string]string{"env": "prod"}, TTL: 15 * time.Minute,
		Control: &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}, Sealed: []byte("x"),
	}})
	want := Token{ID: "tok-2", Node: "web-2", Role: RoleControl, Labels: map[string]string{"env": "prod"}, CreatedAt: at, Expiry: at.Add(15 * time.Minute)}
	if r.Token == nil || r.Token.ID != want.ID || r.Token.Node != want.Node || r.Token.Role != want.Role ||
		!maps.Equal(r.Token.Labels, want.Labels) || !r.Token.CreatedAt.Equal(want.CreatedAt) || !r.Token.Expiry.Equal(want.Expiry) {
		t.Fatalf("token = %+v, want %+v", r.Token, want)
	}
	// The result is a copy: changing it does not change the state.
	r.Token.Labels["env"] = "dev"
	r.Token.Node = "mallory"
	if tk := m.state().Tokens["tok-2"]; tk.Node != "web-2" || tk.Labels["env"] != "prod" {
		t.Fatalf("result aliases the state: %+v", tk)
	}

	if r := m.apply(tokenCmd("tok-2", "web-3", RoleWorker, at, time.Hour)); !errors.Is(r.Err, ErrBadCommand) {
		t.Errorf("duplicate token id: err = %v, want ErrBadCommand", r.Err)
	}
	if r := m.apply(tokenCmd("tok-3", "web-1", RoleWorker, at, time.Hour)); !errors.Is(r.Err, ErrNodeExists) {
		t.Errorf("token for an enrolled node: err = %v, want ErrNodeExists", r.Err)
	}
	if _, ok := m.state().Tokens["tok-3"]; ok {
		t.Error("a refused token was recorded")
	}
}

func TestEnrolHappyPath(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(Command{Op: OpCreateToken, At: t0, CreateToken: &CreateTokenCmd{
		ID: "tok", Node: "web-1", Role: RoleWorker, Labels: map[string]string{"env": "prod"}, TTL: time.Hour,
	}})
	at := t0.Add(10 * time.Minute)
	r := m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at))
	n := r.Node
	if n == nil || n.ID != "web-1" || n.Role != RoleWorker || n.PublicKey != "K1" || !n.EnrolledAt.Equal(at) ||
		n.Revoked || n.Labels["env"] != "prod" {
		t.Fatalf("node = %+v", n)
	}
	wantDecl := Declared{Version: 0, BodyDigest: BodyDigest(EmptyBody()), IssuedAt: at, ExpiresAt: at.Add(testValidity)}
	if n.Declared.Version != wantDecl.Version || n.Declared.BodyDigest != wantDecl.BodyDigest ||
		!n.Declared.IssuedAt.Equal(wantDecl.IssuedAt) || !n.Declared.ExpiresAt.Equal(wantDecl.ExpiresAt) {
		t.Fatalf("declared = %+v, want %+v", n.Declared, wantDecl)
	}
	s := m.state()
	if tk := s.Tokens["tok"]; !tk.UsedAt.Equal(at) || tk.UsedKey != "K1" {
		t.Fatalf("token not marked used: %+v", tk)
	}
	if got, ok := s.NodeByKey("K1"); !ok || got.ID != "web-1" {
		t.Fatalf("NodeByKey(K1) = %v, %v", got, ok)
	}
	// Results are copies: the proposer reads them while the state machine goes on.
	r.Node.Labels["env"] = "mutated"
	if m.state().Nodes["web-1"].Labels["env"] != "prod" {
		t.Fatal("the enrol result aliases the live node's labels")
	}
	rv := m.must(revokeCmd("web-1", at))
	rv.Node.Labels["env"] = "mutated"
	if m.state().Nodes["web-1"].Labels["env"] != "prod" {
		t.Fatal("the revoke result aliases the live node's labels")
	}
	// The token's labels were copied, not shared.
	s.Tokens["tok"].Labels["env"] = "dev"
	if m.state().Nodes["web-1"].Labels["env"] != "prod" {
		t.Fatal("node labels alias token labels")
	}
}

func TestEnrolRefusals(t *testing.T) {
	type setup func(m *machine)
	at := t0.Add(10 * time.Minute)
	tests := []struct {
		name  string
		setup setup
		cmd   Command
		want  error // nil: success
	}{
		{
			name: "unknown token",
			cmd:  enrolCmd("nope", "web-1", RoleWorker, "K1", at),
			want: ErrTokenUnknown,
		},
		{
			name:  "used by another key",
			setup: func(m *machine) { m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at)) },
			cmd:   enrolCmd("tok", "web-1", RoleWorker, "K2", at.Add(time.Minute)),
			want:  ErrTokenUsed,
		},
		{
			name:  "same key again is the same enrolment",
			setup: func(m *machine) { m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at)) },
			cmd:   enrolCmd("tok", "web-1", RoleWorker, "K1", at.Add(time.Minute)),
		},
		{
			// Its answer was lost, and the machine ran enrol again after the token
			// expired: answered as the same enrolment while the record is kept.
			name:  "same key again after expiry",
			setup: func(m *machine) { m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at)) },
			cmd:   enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Hour)),
		},
		{
			name:  "same key again a day after expiry",
			setup: func(m *machine) { m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at)) },
			cmd:   enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Hour+23*time.Hour)),
		},
		{
			name:  "another key after expiry",
			setup: func(m *machine) { m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", at)) },
			cmd:   enrolCmd("tok", "web-1", RoleWorker, "K2", t0.Add(time.Hour)),
			want:  ErrTokenUsed,
		},
		{
			name: "expired at exactly its expiry",
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Hour)),
			want: ErrTokenExpired,
		},
		{
			name: "expired long ago",
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(3*time.Hour)),
			want: ErrTokenExpired,
		},
		{
			name: "one nanosecond before expiry",
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Hour-1)),
		},
		{
			name: "other node",
			cmd:  enrolCmd("tok", "web-2", RoleWorker, "K1", at),
			want: ErrTokenOtherNode,
		},
		{
			name: "wrong role",
			cmd:  enrolCmd("tok", "web-1", RoleControl, "K1", at),
			want: ErrTokenWrongRole,
		},
		{
			name: "revoked key",
			setup: func(m *machine) {
				m.must(tokenCmd("old", "db-1", RoleWorker, t0, time.Hour))
				m.must(enrolCmd("old", "db-1", RoleWorker, "KR", at))
				m.must(revokeCmd("db-1", at))
			},
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "KR", at),
			want: ErrKeyRevoked,
		},
		{
			name: "key of another enrolled node",
			setup: func(m *machine) {
				m.must(tokenCmd("tok-db", "db-1", RoleWorker, t0, time.Hour))
				m.must(enrolCmd("tok-db", "db-1", RoleWorker, "KD", at))
			},
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "KD", at),
			want: ErrKeyInUse,
		},
		{
			name: "node id already enrolled and not revoked",
			setup: func(m *machine) {
				m.must(tokenCmd("tok-b", "web-1", RoleWorker, t0, time.Hour)) // minted before web-1 enrolled
				m.must(enrolCmd("tok-b", "web-1", RoleWorker, "K0", at))
			},
			cmd:  enrolCmd("tok", "web-1", RoleWorker, "K1", at),
			want: ErrNodeExists,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(t)
			m.must(initCmd("demo", t0))
			m.must(tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour))
			if tt.setup != nil {
				tt.setup(m)
			}
			before := m.snapshot()
			r := m.apply(tt.cmd)
			if tt.want == nil {
				if r.Err != nil || r.Node == nil || r.Node.PublicKey != tt.cmd.Enrol.PublicKey {
					t.Fatalf("result = %+v, want success for key %s", r, tt.cmd.Enrol.PublicKey)
				}
				// TokenState, which the enrolment handler asks first, agrees.
				var pre error
				m.f.Read(func(s *State) {
					_, pre = s.TokenState(tt.cmd.Enrol.TokenID, tt.cmd.Enrol.Node, tt.cmd.Enrol.Role, tt.cmd.Enrol.PublicKey, tt.cmd.At)
				})
				if pre != nil {
					t.Fatalf("TokenState after success = %v", pre)
				}
				return
			}
			assertOnly(t, r.Err, tt.want)
			if r.Node != nil {
				t.Fatalf("a refusal returned node %+v", r.Node)
			}
			if after := m.snapshot(); string(after) != string(before) {
				t.Fatalf("a refused enrolment changed the state")
			}
			// The enrolment handler's quick check says the same.
			var pre error
			m.f.Read(func(s *State) {
				_, pre = s.TokenState(tt.cmd.Enrol.TokenID, tt.cmd.Enrol.Node, tt.cmd.Enrol.Role, tt.cmd.Enrol.PublicKey, tt.cmd.At)
			})
			assertOnly(t, pre, tt.want)
		})
	}
}

func TestEnrolRepeatReturnsTheSameNode(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour))
	first := m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Minute)))
	before := m.snapshot()
	again := m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(5*time.Minute)))
	a, _ := json.Marshal(first.Node)
	b, _ := json.Marshal(again.Node)
	if string(a) != string(b) {
		t.Fatalf("repeat returned another node:\n%s\n%s", a, b)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a repeated enrolment changed the state")
	}
}

func TestEnrolRefusalDoesNotConsumeTheToken(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour))
	for _, c := range []Command{
		enrolCmd("tok", "web-2", RoleWorker, "K9", t0.Add(time.Minute)),
		enrolCmd("tok", "web-1", RoleControl, "K9", t0.Add(time.Minute)),
	} {
		if r := m.apply(c); r.Err == nil {
			t.Fatalf("%+v accepted", c.Enrol)
		}
	}
	m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(2*time.Minute)))
}

// One key names one node: the broker's authentication hook maps a key to its node, so
// a key enrolled under a second id would leave the second node without an identity of
// its own, and control nodes that rebuilt the index differently would disagree on it.
func TestEnrolKeyOfAnotherNodeIsRefused(t *testing.T) {
	m := enrolled(t, map[string]string{"db-1": RoleWorker})
	at := t0.Add(2 * time.Minute)
	m.must(tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour))
	before := m.snapshot()
	r := m.apply(enrolCmd("tok", "web-1", RoleWorker, "K-db-1", at))
	assertOnly(t, r.Err, ErrKeyInUse)
	if !strings.Contains(r.Err.Error(), "db-1") || r.Node != nil {
		t.Fatalf("refusal = %v, node %+v; want the holder named and no node", r.Err, r.Node)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("the refused enrolment changed the state (the token must not be consumed)")
	}
	// The enrolment handler asks TokenState before proposing: it refuses the same way.
	var pre error
	m.f.Read(func(s *State) { _, pre = s.TokenState("tok", "web-1", RoleWorker, "K-db-1", at) })
	assertOnly(t, pre, ErrKeyInUse)
	if n, ok := m.f.NodeByKey("K-db-1"); !ok || n.ID != "db-1" {
		t.Fatalf("the key now names %+v, want db-1", n)
	}
	// The token still admits its node, with a key of its own.
	m.must(enrolCmd("tok", "web-1", RoleWorker, "K-web-1", at.Add(time.Minute)))
	// Once db-1 is revoked its key stays refused, as revoked.
	m.must(tokenCmd("tok-2", "web-2", RoleWorker, at, time.Hour))
	m.must(revokeCmd("db-1", at.Add(2*time.Minute)))
	assertOnly(t, m.apply(enrolCmd("tok-2", "web-2", RoleWorker, "K-db-1", at.Add(3*time.Minute))).Err, ErrKeyRevoked)
}

// A host whose node was revoked must not get its enrolment "repeated": the mesh would
// answer it with a freshly signed declaration.
func TestEnrolRepeatAfterRevocationIsRefused(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok", "web-1", RoleWorker, t0, time.Hour))
	m.must(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(time.Minute)))
	m.must(revokeCmd("web-1", t0.Add(2*time.Minute)))
	r := m.apply(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(3*time.Minute)))
	assertOnly(t, r.Err, ErrKeyRevoked)

	// And once the id enrolled again with a new key, the old token and key still get
	// nothing, in particular not the new node's record.
	m.must(tokenCmd("tok-2", "web-1", RoleWorker, t0.Add(4*time.Minute), time.Hour))
	m.must(enrolCmd("tok-2", "web-1", RoleWorker, "K2", t0.Add(5*time.Minute)))
	r = m.apply(enrolCmd("tok", "web-1", RoleWorker, "K1", t0.Add(6*time.Minute)))
	assertOnly(t, r.Err, ErrKeyRevoked)
	if r.Node != nil {
		t.Fatalf("revoked key got node %+v", r.Node)
	}
}

func TestRevoke(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	// Two tokens for web-1 minted before it enrolled: one is used, one stays unused.
	m.must(tokenCmd("used", "web-1", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("spare", "web-1", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("other", "web-2", RoleWorker, t0, time.Hour))
	m.must(enrolCmd("used", "web-1", RoleWorker, "K1", t0.Add(time.Minute)))

	revokedAt := t0.Add(2 * time.Minute)
	r := m.must(revokeCmd("web-1", revokedAt))
	if r.Node == nil || !r.Node.Revoked || !r.Node.RevokedAt.Equal(revokedAt) {
		t.Fatalf("revoke result = %+v", r.Node)
	}
	s := m.state()
	if s.RevokedKeys["K1"] != "web-1" {
		t.Fatalf("RevokedKeys = %v", s.RevokedKeys)
	}
	if _, ok := s.Tokens["spare"]; ok {
		t.Error("the revoked node's unused token survived")
	}
	if _, ok := s.Tokens["used"]; !ok {
		t.Error("the used token was dropped: a late repeat would read 'unknown' instead of a refusal")
	}
	if _, ok := s.Tokens["other"]; !ok {
		t.Error("another node's token was dropped")
	}

	// Revoking again changes nothing, not even the time.
	before := m.snapshot()
	m.must(revokeCmd("web-1", revokedAt.Add(time.Hour)))
	if string(m.snapshot()) != string(before) {
		t.Error("a second revocation changed the state")
	}
	if r := m.apply(revokeCmd("ghost", revokedAt)); !errors.Is(r.Err, ErrUnknownNode) {
		t.Errorf("revoke unknown: err = %v, want ErrUnknownNode", r.Err)
	}

	// The id can enrol again with a new token and a new key; the old key stays refused.
	m.must(tokenCmd("new", "web-1", RoleWorker, t0.Add(3*time.Minute), time.Hour))
	if r := m.apply(enrolCmd("new", "web-1", RoleWorker, "K1", t0.Add(4*time.Minute))); !errors.Is(r.Err, ErrKeyRevoked) {
		t.Fatalf("old key with a new token: err = %v, want ErrKeyRevoked", r.Err)
	}
	oldVersion := m.state().Nodes["web-1"].Declared.Version
	n := m.must(enrolCmd("new", "web-1", RoleWorker, "K2", t0.Add(4*time.Minute))).Node
	// Versions never restart for an id: the new enrolment's first declaration
	// comes after every version the old one was given.
	if n.Revoked || n.PublicKey != "K2" || n.Declared.Version != oldVersion+1 {
		t.Fatalf("re-enrolled node = %+v, want version %d", n, oldVersion+1)
	}
	s = m.state()
	if s.RevokedKeys["K1"] != "web-1" {
		t.Error("the old key left RevokedKeys when the id enrolled again")
	}
	if _, ok := s.NodeByKey("K1"); ok {
		t.Error("NodeByKey still finds the node by its revoked key")
	}
	if got, ok := s.NodeByKey("K2"); !ok || got.ID != "web-1" {
		t.Errorf("NodeByKey(K2) = %v, %v", got, ok)
	}
}

func TestDeclare(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker, "cp-1": RoleControl, "gone": RoleWorker})
	m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "web-1", Labels: map[string]string{"env": "prod", "tier": "web"}}})
	m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "web-2", Labels: map[string]string{"env": "dev", "tier": "web"}}})
	m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "gone", Labels: map[string]string{"env": "prod"}}})
	m.must(revokeCmd("gone", t0.Add(2*time.Minute)))

	version := func(id string) uint64 {
		if n, ok := m.state().Nodes[id]; ok {
			return n.Declared.Version
		}
		return 0 // a control node: it has no declarations
	}
	at := t0.Add(time.Hour)
	tests := []struct {
		name    string
		sel     Selector
		want    []string // nodes that get a new version
		skipped []string
		err     error
	}{
		{name: "node list", sel: Selector{Nodes: []string{"web-2", "web-1"}}, want: []string{"web-1", "web-2"}},
		{name: "one node", sel: Selector{Nodes: []string{"web-1"}}, want: []string{"web-1"}},
		{name: "unknown and revoked skipped", sel: Selector{Nodes: []string{"web-1", "ghost", "gone"}}, want: []string{"web-1"}, skipped: []string{"ghost", "gone"}},
		{name: "only unknown", sel: Selector{Nodes: []string{"ghost"}}, skipped: []string{"ghost"}, err: ErrNoTargets},
		{name: "only revoked", sel: Selector{Nodes: []string{"gone"}}, skipped: []string{"gone"}, err: ErrNoTargets},
		{name: "empty selector", sel: Selector{}, err: ErrNoTargets},
		{name: "control nodes take no declarations", sel: Selector{Role: RoleControl}, err: ErrNoTargets},
		{name: "role worker skips revoked", sel: Selector{Role: RoleWorker}, want: []string{"web-1", "web-2"}},
		{name: "label", sel: Selector{Labels: map[string]string{"env": "prod"}}, want: []string{"web-1"}},
		{name: "labels all must match", sel: Selector{Labels: map[string]string{"env": "dev", "tier": "web"}}, want: []string{"web-2"}},
		{name: "role and label", sel: Selector{Role: RoleControl, Labels: map[string]string{"tier": "web"}}, err: ErrNoTargets},
		{name: "label nobody has", sel: Selector{Labels: map[string]string{"env": "staging"}}, err: ErrNoTargets},
		{name: "all", sel: Selector{All: true}, want: []string{"web-1", "web-2"}},
		{name: "list plus role", sel: Selector{Nodes: []string{"cp-1"}, Role: RoleWorker}, want: []string{"web-1", "web-2"}, skipped: []string{"cp-1"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := map[string]uint64{}
			for _, id := range []string{"web-1", "web-2", "cp-1", "gone"} {
				before[id] = version(id)
			}
			// The daemon asks Reaches before it commits, to write no entry for a
			// declaration the state machine would refuse.
			if got := m.state().Reaches(tt.sel); got != (tt.err == nil) {
				t.Errorf("Reaches = %v, but the declaration's error is %v", got, tt.err)
			}
			idx := m.f.AppliedIndex()
			body := `{"files":[{"path":"motd","content":"` + tt.name + `"}]}`
			r := m.apply(declareCmd(tt.sel, body, at.Add(time.Duration(i)*time.Second)))
			if m.f.AppliedIndex() != idx+1 {
				t.Fatalf("one declaration took %d log entries", m.f.AppliedIndex()-idx)
			}
			if tt.err != nil {
				if !errors.Is(r.Err, tt.err) {
					t.Fatalf("err = %v, want %v", r.Err, tt.err)
				}
			} else if r.Err != nil {
				t.Fatal(r.Err)
			}
			if !slices.Equal(r.Skipped, tt.skipped) {
				t.Errorf("skipped = %v, want %v", r.Skipped, tt.skipped)
			}
			var got []string
			for _, a := range r.Assignments {
				got = append(got, a.Node)
				if a.Version != before[a.Node]+1 {
					t.Errorf("%s: version %d, want %d", a.Node, a.Version, before[a.Node]+1)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("assigned %v, want %v", got, tt.want)
			}
			s := m.state()
			for id, v := range before {
				n, ok := s.Nodes[id]
				if !ok {
					if _, control := s.ControlNodes[id]; !control {
						t.Errorf("%s vanished", id)
					}
					continue // a control node takes no declarations
				}
				if slices.Contains(tt.want, id) {
					d := n.Declared
					wantAt := at.Add(time.Duration(i) * time.Second)
					if d.Version != v+1 || d.BodyDigest != BodyDigest([]byte(body)) || !d.IssuedAt.Equal(wantAt) || !d.ExpiresAt.Equal(wantAt.Add(testValidity)) {
						t.Errorf("%s declared = %+v", id, d)
					}
					if string(s.Bodies[d.BodyDigest]) != body {
						t.Errorf("%s: body not stored under its digest", id)
					}
				} else if n.Declared.Version != v {
					t.Errorf("%s was not selected but moved from %d to %d", id, v, n.Declared.Version)
				}
			}
			if tt.err != nil {
				if _, ok := s.Bodies[BodyDigest([]byte(body))]; ok {
					t.Error("a declaration that reached nobody stored its body")
				}
			}
		})
	}
}

func TestDeclareCollectsUnusedBodies(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker})
	bodyA, bodyB := `{"files":[{"path":"a"}]}`, `{"files":[{"path":"b"}]}`
	dA, dB, dEmpty := BodyDigest([]byte(bodyA)), BodyDigest([]byte(bodyB)), BodyDigest(EmptyBody())
	has := func(d string) bool { _, ok := m.state().Bodies[d]; return ok }

	m.must(declareCmd(Selector{All: true}, bodyA, t0.Add(time.Hour)))
	if !has(dA) || !has(dEmpty) {
		t.Fatal("body A or the empty body missing after the first declaration")
	}
	m.must(declareCmd(Selector{Nodes: []string{"a"}}, bodyB, t0.Add(time.Hour)))
	if !has(dA) || !has(dB) {
		t.Fatal("body A dropped while b still holds it")
	}
	m.must(declareCmd(Selector{Nodes: []string{"b"}}, bodyB, t0.Add(time.Hour)))
	if has(dA) {
		t.Fatal("body A kept after no node holds it")
	}
	if !has(dB) || !has(dEmpty) {
		t.Fatal("a body still in use, or the empty body, was collected")
	}
	if n := len(m.state().Bodies); n != 2 {
		t.Fatalf("%d bodies stored, want 2", n)
	}
	// The same body twice is stored once, and a revoked node keeps its body alive.
	m.must(revokeCmd("b", t0.Add(time.Hour)))
	m.must(declareCmd(Selector{Nodes: []string{"a"}}, bodyA, t0.Add(time.Hour)))
	if !has(dB) {
		t.Fatal("the revoked node's body was collected")
	}
}

func TestStatusBatch(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker, "c": RoleWorker})
	m.must(revokeCmd("c", t0.Add(time.Minute)))
	at := t0.Add(time.Hour)
	idx := m.f.AppliedIndex()
	m.must(Command{Op: OpStatus, At: at, Status: &StatusCmd{Reports: []StatusReport{
		{Node: "a", Applied: Applied{HaveApplied: true, Version: 3, KeyringEpoch: 1}},
		{Node: "b", Applied: Applied{HaveApplied: true, Version: 2, ErrorCode: "rolled_back", ErrorMessage: "x", ErrorVersion: 1, Stale: true, ReportedAt: t0.Add(100 * time.Hour)}},
		{Node: "c", Applied: Applied{HaveApplied: true, Version: 9}},
		{Node: "ghost", Applied: Applied{HaveApplied: true, Version: 9}},
	}}})
	if m.f.AppliedIndex() != idx+1 {
		t.Fatal("a batch took more than one log entry")
	}
	s := m.state()
	if a := s.Nodes["a"].Applied; !a.HaveApplied || a.Version != 3 || a.KeyringEpoch != 1 || !a.ReportedAt.Equal(at) || a.ErrorCode != "" {
		t.Errorf("a applied = %+v", a)
	}
	// ReportedAt is the command's time, not what the node claimed.
	if b := s.Nodes["b"].Applied; b.Version != 2 || b.ErrorCode != "rolled_back" || b.ErrorVersion != 1 || !b.Stale || !b.ReportedAt.Equal(at) {
		t.Errorf("b applied = %+v", b)
	}
	if c := s.Nodes["c"].Applied; c.HaveApplied {
		t.Errorf("a revoked node's report was recorded: %+v", c)
	}
	if _, ok := s.Nodes["ghost"]; ok {
		t.Error("a report created a node")
	}
}

func TestLabel(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker})
	r := m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "a", Labels: map[string]string{"env": "prod", "zone": "1"}}})
	if !maps.Equal(r.Node.Labels, map[string]string{"env": "prod", "zone": "1"}) {
		t.Fatalf("labels = %v", r.Node.Labels)
	}
	r.Node.Labels["env"] = "mutated"
	r = m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "a", Labels: map[string]string{"zone": "", "tier": "db"}}})
	want := map[string]string{"env": "prod", "tier": "db"}
	if !maps.Equal(r.Node.Labels, want) || !maps.Equal(m.state().Nodes["a"].Labels, want) {
		t.Fatalf("labels after remove = %v / %v, want %v", r.Node.Labels, m.state().Nodes["a"].Labels, want)
	}
	if got := m.state().Select(Selector{Labels: map[string]string{"zone": "1"}}); len(got) != 0 {
		t.Fatalf("a removed label still selects: %v", got)
	}
	if r := m.apply(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "ghost", Labels: map[string]string{"x": "y"}}}); !errors.Is(r.Err, ErrUnknownNode) {
		t.Fatalf("label unknown node: err = %v", r.Err)
	}
}

func TestTokenPurge(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("unused", "web-1", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("used", "web-2", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("later", "web-3", RoleWorker, t0.Add(time.Hour), time.Hour))
	m.must(enrolCmd("used", "web-2", RoleWorker, "K2", t0.Add(time.Minute)))
	expiry := t0.Add(time.Hour)
	probe := func(at time.Time) {
		m.must(Command{Op: OpProbe, At: at, Probe: &ProbeCmd{ID: at.String()}})
	}
	probe(expiry.Add(24 * time.Hour))
	if s := m.state(); len(s.Tokens) != 3 {
		t.Fatalf("tokens purged at exactly 24h after expiry: %d left", len(s.Tokens))
	}
	// Within the retention, a late repeat is told why, not "unknown".
	if r := m.apply(enrolCmd("unused", "web-1", RoleWorker, "K1", expiry.Add(24*time.Hour))); !errors.Is(r.Err, ErrTokenExpired) {
		t.Fatalf("late use within retention: %v", r.Err)
	}
	probe(expiry.Add(24*time.Hour + time.Second))
	s := m.state()
	if _, ok := s.Tokens["unused"]; ok {
		t.Error("an unused expired token survived the retention")
	}
	if _, ok := s.Tokens["used"]; ok {
		t.Error("a used token survived the retention")
	}
	if _, ok := s.Tokens["later"]; !ok {
		t.Error("a token still within its retention was purged")
	}
	if _, ok := s.Nodes["web-2"]; !ok {
		t.Error("purging a token removed its node")
	}
	if r := m.apply(enrolCmd("used", "web-2", RoleWorker, "K2", expiry.Add(25*time.Hour))); !errors.Is(r.Err, ErrTokenUnknown) {
		t.Fatalf("purged token: %v", r.Err)
	}
}

func TestBadCommands(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker})
	before := m.snapshot()
	for _, tt := range []struct {
		name string
		data string
	}{
		{"not json", `garbage`},
		{"truncated", `{"op":"declare","at":"2001-02-03T04:05:06Z","declare":{"selector":{"all":true},"body":`},
		{"wrong type", `{"op":1}`},
		{"bad time", `{"op":"probe","at":"yesterday"}`},
		{"op without its payload", `{"op":"enrol","at":"2001-02-03T04:05:06Z"}`},
		{"payload of another op", `{"op":"revoke","at":"2001-02-03T04:05:06Z","enrol":{"node":"a"}}`},
		{"unknown op", `{"op":"format_disk","at":"2001-02-03T04:05:06Z"}`},
		{"empty op", `{}`},
		{"null", `null`},
		{"array", `[1,2,3]`},
		{"empty", ``},
		{"body not json", `{"op":"declare","at":"2001-02-03T04:05:06Z","declare":{"selector":{"all":true},"body":nope}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			idx := m.f.AppliedIndex()
			r := m.applyRaw([]byte(tt.data))
			if !errors.Is(r.Err, ErrBadCommand) {
				t.Errorf("err = %v, want ErrBadCommand", r.Err)
			}
			if m.f.AppliedIndex() != idx+1 {
				t.Error("a skipped command did not advance the applied index")
			}
			if string(m.snapshot()) != string(before) {
				t.Error("a bad command changed the state")
			}
		})
	}
}

func TestNonCommandLogsAreIgnored(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker})
	before := m.snapshot()
	data, _ := json.Marshal(revokeCmd("a", t0))
	for _, typ := range []uint8{2, 3, 4} { // LogNoop, LogAddPeerDeprecated, LogRemovePeerDeprecated
		out := m.f.Apply(rawLog(typ, 99, data))
		if r, ok := out.(Result); !ok || r.Err != nil {
			t.Fatalf("log type %d: %#v", typ, out)
		}
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a non-command log entry was applied")
	}
}

func TestOnApply(t *testing.T) {
	m := newMachine(t)
	var seen []string
	m.f.OnApply(func(c *Command, r Result) {
		// The hook runs outside the lock: reading the state here must not deadlock.
		m.f.Read(func(*State) {})
		seen = append(seen, c.Op+"/"+errString(r.Err))
	})
	m.must(initCmd("demo", t0))
	m.apply(enrolCmd("x", "a", RoleWorker, "K", t0))
	m.applyRaw([]byte("garbage")) // not decoded: no command to report
	want := []string{"init/", "enrol/" + ErrTokenUnknown.Error()}
	if !slices.Equal(seen, want) {
		t.Fatalf("hook saw %q, want %q", seen, want)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestCloneIsDeep(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker})
	m.must(Command{Op: OpLabel, At: t0, Label: &LabelCmd{Node: "a", Labels: map[string]string{"env": "prod"}}})
	before := m.snapshot()
	var c *State
	m.f.Read(func(s *State) { c = s.Clone() })
	c.Nodes["a"].Labels["env"] = "dev"
	c.Nodes["a"].Revoked = true
	c.Tokens["tok-a"].UsedKey = "X"
	c.Keyring.Keys[0] = "ff"
	c.RevokedKeys["K-a"] = "a"
	c.Bodies["x"] = json.RawMessage(`{}`)
	c.Nodes["b"] = &Node{ID: "b"}
	if string(m.snapshot()) != string(before) {
		t.Fatal("changing a clone changed the state")
	}
}

// TestKeyringHistoryIsBounded: rotations and retirements archive the keyring they
// replace, and only the newest MaxKeyringHistory are kept, so repeated rotations
// cannot grow the state without bound.
func TestKeyringHistoryIsBounded(t *testing.T) {
	s := New()
	for e := uint64(1); e <= MaxKeyringHistory+10; e++ {
		s.Keyring = Keyring{Epoch: e, Envelope: []byte(fmt.Sprintf(`"epoch %d"`, e))}
		s.archiveKeyring()
	}
	if len(s.Keyrings) != MaxKeyringHistory {
		t.Fatalf("%d keyrings kept, want %d", len(s.Keyrings), MaxKeyringHistory)
	}
	if _, ok := s.Keyrings[10]; ok {
		t.Error("epoch 10 kept although it is among the oldest")
	}
	if _, ok := s.Keyrings[MaxKeyringHistory+10]; !ok {
		t.Error("the newest archived keyring was dropped")
	}
}

// TestMembershipVersion: the signed list of brokers hosts follow is versioned by the
// state: every admission and removal of a control node moves it, a repeated
// admission does not.
func TestMembershipVersion(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	if v, brokers := m.state().Membership(); v != 1 || len(brokers) != 0 {
		t.Fatalf("after init (no control node named): version %d, brokers %v", v, brokers)
	}
	mk := Command{Op: OpCreateToken, At: t0, CreateToken: &CreateTokenCmd{ID: "ctl", Node: "cp-2", Role: RoleControl, TTL: time.Hour,
		Control: &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}, Sealed: []byte("sealed")}}
	m.must(mk)
	m.must(enrolCmd("ctl", "cp-2", RoleControl, "K2", t0.Add(time.Minute)))
	if v, brokers := m.state().Membership(); v != 2 || len(brokers) != 1 || brokers[0] != "10.0.0.2:7300" {
		t.Fatalf("after an admission: version %d, brokers %v", v, brokers)
	}
	m.must(enrolCmd("ctl", "cp-2", RoleControl, "K2", t0.Add(2*time.Minute))) // its reply was lost
	if v, _ := m.state().Membership(); v != 2 {
		t.Fatalf("a repeated admission moved the version to %d", v)
	}
	m.must(Command{Op: OpCreateToken, At: t0, CreateToken: &CreateTokenCmd{ID: "ctl3", Node: "cp-3", Role: RoleControl, TTL: time.Hour,
		Control: &ControlAddrs{Broker: "10.0.0.3:7300", Raft: "10.0.0.3:7301", Cluster: "10.0.0.3:7302"}, Sealed: []byte("sealed")}})
	m.must(enrolCmd("ctl3", "cp-3", RoleControl, "K3", t0.Add(2*time.Minute)))
	m.must(Command{Op: OpRemoveControl, At: t0.Add(3 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	if v, brokers := m.state().Membership(); v != 4 || len(brokers) != 1 || brokers[0] != "10.0.0.3:7300" {
		t.Fatalf("after a removal: version %d, brokers %v", v, brokers)
	}
}

func TestCancelTokens(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok-a", "web-1", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("tok-b", "web-1", RoleWorker, t0.Add(time.Second), time.Hour))
	m.must(tokenCmd("tok-old", "web-1", RoleWorker, t0, time.Minute))
	m.must(tokenCmd("tok-used", "web-2", RoleWorker, t0, time.Hour))
	m.must(tokenCmd("tok-other", "web-3", RoleWorker, t0, time.Hour))
	m.must(enrolCmd("tok-used", "web-2", RoleWorker, "K2", t0.Add(time.Minute)))
	at := t0.Add(10 * time.Minute) // tok-old has expired by now

	r := m.must(Command{Op: OpCancelTokens, At: at, CancelTokens: &CancelTokensCmd{Node: "web-1"}})
	if len(r.Tokens) != 2 || r.Tokens[0].ID != "tok-a" || r.Tokens[1].ID != "tok-b" {
		t.Fatalf("cancelled %+v, want tok-a and tok-b (the pending ones, oldest first)", r.Tokens)
	}
	s := m.state()
	for id, want := range map[string]string{"tok-a": TokenCancelled, "tok-b": TokenCancelled, "tok-old": TokenExpired, "tok-used": TokenUsed, "tok-other": TokenPending} {
		if got := s.Tokens[id].StateAt(at); got != want {
			t.Errorf("%s is %s, want %s", id, got, want)
		}
	}
	// A cancelled token admits nothing, and says why.
	if r := m.apply(enrolCmd("tok-a", "web-1", RoleWorker, "K1", at.Add(time.Second))); !errors.Is(r.Err, ErrTokenCancelled) {
		t.Fatalf("enrol with a cancelled token: %v, want ErrTokenCancelled", r.Err)
	}
	if _, ok := m.state().Nodes["web-1"]; ok {
		t.Fatal("a cancelled token enrolled its node")
	}
	// Run twice: nothing left to cancel, and no error.
	if r := m.must(Command{Op: OpCancelTokens, At: at, CancelTokens: &CancelTokensCmd{Node: "web-1"}}); len(r.Tokens) != 0 {
		t.Fatalf("second cancel cancelled %+v", r.Tokens)
	}
	// A used token is not cancelled: the node it enrolled stays.
	if r := m.must(Command{Op: OpCancelTokens, At: at, CancelTokens: &CancelTokensCmd{Node: "web-2"}}); len(r.Tokens) != 0 {
		t.Fatalf("cancel of a used token: %+v", r.Tokens)
	}
	if r := m.apply(Command{Op: OpCancelTokens, At: at, CancelTokens: &CancelTokensCmd{Node: "nobody"}}); !errors.Is(r.Err, ErrNoToken) {
		t.Fatalf("cancel for a node without tokens: %v, want ErrNoToken", r.Err)
	}
	// The other node's token still works.
	m.must(enrolCmd("tok-other", "web-3", RoleWorker, "K3", at))
}

func TestCancelledControlTokenDropsItsSealedIdentity(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(Command{Op: OpCreateToken, At: t0, CreateToken: &CreateTokenCmd{ID: "tok", Node: "cp-2", Role: RoleControl, TTL: time.Hour,
		Control: &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}, Sealed: []byte("sealed")}})
	m.must(Command{Op: OpCancelTokens, At: t0.Add(time.Minute), CancelTokens: &CancelTokensCmd{Node: "cp-2"}})
	if tk := m.state().Tokens["tok"]; len(tk.Sealed) != 0 || tk.CancelledAt.IsZero() {
		t.Fatalf("cancelled control token = %+v", tk)
	}
}

// A control token's sealed identity (the new node's TLS key and operator credentials,
// which the token's secret opens) stays in the state only while the token may still be
// presented: a used token's until its expiry, for a repeated admission whose answer
// was lost; an unused one's until its expiry. After that no copy of the state (a
// backup, a snapshot) holds it, though the record stays a day to say "expired".
// TestPurgeDue: the leader learns when an empty command would drop something, and
// OpPurge drops it; after it, nothing is due until the next expiry.
func TestPurgeDue(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	if m.state().PurgeDue(t0.Add(48 * time.Hour)) {
		t.Fatal("purge due with no token")
	}
	m.must(tokenCmd("cp", "cp-2", RoleControl, t0, 30*time.Minute))
	m.must(tokenCmd("web", "web-1", RoleWorker, t0, time.Hour))
	if m.state().PurgeDue(t0.Add(30*time.Minute - 1)) {
		t.Fatal("purge due before the control token expired")
	}
	if !m.state().PurgeDue(t0.Add(30 * time.Minute)) {
		t.Fatal("purge not due once the control token expired with its sealed identity")
	}
	m.must(Command{Op: OpPurge, At: t0.Add(30 * time.Minute)})
	if len(m.state().Tokens["cp"].Sealed) != 0 {
		t.Fatal("OpPurge kept the expired token's sealed identity")
	}
	if m.state().PurgeDue(t0.Add(31 * time.Minute)) {
		t.Fatal("purge due again with nothing left to drop until a record's retention ends")
	}
	if !m.state().PurgeDue(t0.Add(30*time.Minute + expiredTokenRetention)) {
		t.Fatal("purge not due when the first record's retention ends")
	}
	m.must(Command{Op: OpPurge, At: t0.Add(time.Hour + expiredTokenRetention + time.Second)})
	if len(m.state().Tokens) != 0 {
		t.Fatalf("records kept past their retention: %v", m.state().Tokens)
	}
}

func TestExpiredControlTokenDropsItsSealedIdentity(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("used", "cp-2", RoleControl, t0, time.Hour))
	m.must(tokenCmd("unused", "cp-3", RoleControl, t0, 30*time.Minute))
	m.must(tokenCmd("worker", "web-1", RoleWorker, t0, 2*time.Hour))
	m.must(enrolCmd("used", "cp-2", RoleControl, "KC2", t0.Add(time.Minute)))
	probe := func(at time.Time) {
		t.Helper()
		m.must(Command{Op: OpProbe, At: at, Probe: &ProbeCmd{ID: at.String()}})
	}
	sealed := func(id string) bool {
		t.Helper()
		tk, ok := m.state().Tokens[id]
		if !ok {
			t.Fatalf("token %s purged", id)
		}
		return len(tk.Sealed) > 0
	}

	probe(t0.Add(30*time.Minute - 1))
	if !sealed("used") || !sealed("unused") {
		t.Fatal("a sealed identity was dropped before its token expired")
	}
	probe(t0.Add(30 * time.Minute))
	if sealed("unused") {
		t.Fatal("an unused control token kept its sealed identity once expired")
	}
	if !sealed("used") {
		t.Fatal("a used control token lost its sealed identity before its expiry")
	}
	// Until its expiry, a lost answer can still be asked for again.
	if r := m.must(enrolCmd("used", "cp-2", RoleControl, "KC2", t0.Add(time.Hour-1))); r.Control == nil || r.Control.ID != "cp-2" {
		t.Fatalf("repeated admission before expiry = %+v", r)
	}
	if !sealed("used") {
		t.Fatal("the repeated admission lost the sealed identity it needs")
	}
	probe(t0.Add(time.Hour))
	if sealed("used") {
		t.Fatal("a used control token kept its sealed identity once expired")
	}
	// The records stay to tell a late joiner why: the machine admitted, that its
	// token expired before its join completed (TestControlAdmissionResumedAfterExpiry).
	assertOnly(t, m.apply(enrolCmd("used", "cp-2", RoleControl, "KC2", t0.Add(2*time.Hour))).Err, ErrTokenExpiredAdmitted)
	assertOnly(t, m.apply(enrolCmd("unused", "cp-3", RoleControl, "KC3", t0.Add(2*time.Hour))).Err, ErrTokenExpired)
	snap := m.snapshot()
	if bytes.Contains(snap, []byte(`"sealed"`)) || bytes.Contains(snap, []byte(base64.StdEncoding.EncodeToString([]byte("sealed identity")))) {
		t.Fatalf("a snapshot after the tokens expired holds a sealed identity:\n%s", snap)
	}
	if _, ok := m.state().Tokens["worker"]; !ok {
		t.Fatal("a worker token within its validity was purged")
	}
}

// A control node restored from a snapshot that still holds a sealed identity (taken
// before the token expired, or written before identities were dropped at expiry) drops
// it at the first command after the expiry, as the control nodes that applied the log
// without a restore do: the two states stay alike.
func TestSealedIdentityDroppedAlikeAfterARestore(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("tok", "cp-2", RoleControl, t0, time.Hour))
	r := newMachine(t)
	if err := r.f.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	r.index = m.index
	later := Command{Op: OpProbe, At: t0.Add(2 * time.Hour), Probe: &ProbeCmd{ID: "later"}}
	m.must(later)
	r.must(later)
	if a, b := m.snapshot(), r.snapshot(); !bytes.Equal(a, b) || bytes.Contains(a, []byte(`"sealed"`)) {
		t.Fatalf("after the next command, as applied and as restored:\n%s\n%s", a, b)
	}
}

func TestRevokeSeveral(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker, "web-3": RoleWorker})
	at := t0.Add(time.Hour)
	before := m.snapshot()
	if r := m.apply(Command{Op: OpRevoke, At: at, Revoke: &RevokeCmd{Nodes: []string{"web-1", "nobody", "web-2"}}}); !errors.Is(r.Err, ErrUnknownNode) || !strings.Contains(r.Err.Error(), "nobody") {
		t.Fatalf("revoke with an unknown node: %v", r.Err)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a refused revocation changed the state")
	}
	r := m.must(Command{Op: OpRevoke, At: at, Revoke: &RevokeCmd{Node: "web-2", Nodes: []string{"web-1", "web-2"}}})
	if len(r.Revoked) != 2 || r.Revoked[0].ID != "web-2" || r.Revoked[1].ID != "web-1" || r.Node == nil || r.Node.ID != "web-2" {
		t.Fatalf("revoked %+v (node %+v), want web-2 then web-1, once each", r.Revoked, r.Node)
	}
	s := m.state()
	for _, id := range []string{"web-1", "web-2"} {
		if n := s.Nodes[id]; !n.Revoked || !n.RevokedAt.Equal(at) {
			t.Errorf("%s = %+v", id, n)
		}
		if _, ok := s.RevokedKeys[s.Nodes[id].PublicKey]; !ok {
			t.Errorf("%s's key is not refused", id)
		}
	}
	if s.Nodes["web-3"].Revoked {
		t.Error("web-3, not named, was revoked")
	}
	if r := m.apply(Command{Op: OpRevoke, At: at, Revoke: &RevokeCmd{}}); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("revocation of nothing: %v", r.Err)
	}
}

// TestARevocationKeepsWhenItsNodesWereLastSeen: a revocation records when the
// leader last heard from each node it revokes (RevokeCmd.Seen): a later time
// replaces an earlier one, a time after the entry is refused (the leader's clock
// read both), a node revoked before keeps its own, and the time survives a
// snapshot. A revocation of the form before it (no seen) applies as it did.
func TestARevocationKeepsWhenItsNodesWereLastSeen(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker, "c": RoleWorker, "d": RoleWorker})
	at := t0.Add(time.Hour)
	m.must(Command{Op: OpStatus, At: at, Status: &StatusCmd{Seen: []SeenReport{{Node: "a", At: at.Add(-time.Hour)}, {Node: "b", At: at.Add(-time.Minute)}}}})
	m.must(revokeCmd("d", at))
	later := at.Add(time.Hour)
	m.must(Command{Op: OpRevoke, At: later, Revoke: &RevokeCmd{Nodes: []string{"a", "b", "c", "d"}, Seen: []SeenReport{
		{Node: "a", At: later.Add(-time.Second)},      // heard just before: kept
		{Node: "b", At: at.Add(-2 * time.Minute)},     // earlier than recorded: not kept
		{Node: "c", At: later.Add(time.Second)},       // after the entry: refused
		{Node: "d", At: later.Add(-time.Second)},      // revoked before: left as it was
		{Node: "nobody", At: later.Add(-time.Second)}, // not named: nothing
	}}})
	want := map[string]time.Time{"a": later.Add(-time.Second), "b": at.Add(-time.Minute), "c": {}, "d": {}}
	check := func(s *State, when string) {
		t.Helper()
		for id, w := range want {
			if got := s.Nodes[id].LastSeen; !got.Equal(w) {
				t.Errorf("%s: %s last seen %v, want %v", when, id, got, w)
			}
		}
		if _, ok := s.Nodes["nobody"]; ok {
			t.Errorf("%s: a time for a node not named made a node", when)
		}
	}
	check(m.state(), "revoked")
	r := newMachine(t)
	if err := r.f.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	check(r.state(), "after a snapshot")
	// The form before the field.
	o := enrolled(t, map[string]string{"a": RoleWorker})
	o.must(revokeCmd("a", at))
	if n := o.state().Nodes["a"]; !n.Revoked || !n.LastSeen.IsZero() {
		t.Errorf("a revocation without seen: %+v", n)
	}
}

// A token.create sent again by the operator's client after a leader died with it gets
// the token the first one made, and changes nothing; anything else under the same id
// is refused.
func TestCreateTokenRepeated(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	at := t0.Add(2 * time.Minute)
	cmd := func(at time.Time, edit func(*CreateTokenCmd)) Command {
		c := &CreateTokenCmd{ID: "tok-2", Node: "web-2", Role: RoleControl, Labels: map[string]string{"env": "prod"}, TTL: 15 * time.Minute,
			Control: &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}, Sealed: []byte("x")}
		if edit != nil {
			edit(c)
		}
		return Command{Op: OpCreateToken, At: at, CreateToken: c}
	}
	first := m.must(cmd(at, nil))
	if first.Repeated {
		t.Fatal("the first creation is marked repeated")
	}
	before := m.snapshot()
	again := m.must(cmd(at.Add(3*time.Second), nil))
	if !again.Repeated || again.Token == nil || again.Token.ID != "tok-2" || !again.Token.CreatedAt.Equal(at) || !again.Token.Expiry.Equal(first.Token.Expiry) {
		t.Fatalf("repeated creation: %+v", again)
	}
	if got := m.snapshot(); string(got) != string(before) {
		t.Fatal("a repeated creation changed the state")
	}
	again.Token.Labels["env"] = "dev"
	if m.state().Tokens["tok-2"].Labels["env"] != "prod" {
		t.Fatal("the repeated result aliases the state")
	}
	for name, edit := range map[string]func(*CreateTokenCmd){
		"another node": func(c *CreateTokenCmd) { c.Node = "web-3" },
		"another role": func(c *CreateTokenCmd) { c.Role = RoleWorker; c.Control = nil; c.Sealed = nil },
		"other labels": func(c *CreateTokenCmd) { c.Labels = map[string]string{"env": "dev"} },
		"no labels":    func(c *CreateTokenCmd) { c.Labels = nil },
		"another ttl":  func(c *CreateTokenCmd) { c.TTL = time.Hour },
		"other addresses": func(c *CreateTokenCmd) {
			c.Control = &ControlAddrs{Broker: "10.0.0.9:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}
		},
		"another seal": func(c *CreateTokenCmd) { c.Sealed = []byte("y") },
	} {
		if r := m.apply(cmd(at.Add(time.Second), edit)); !errors.Is(r.Err, ErrBadCommand) || r.Repeated {
			t.Errorf("%s under the same id: %+v, want ErrBadCommand", name, r)
		}
	}
	if r := m.apply(cmd(at.Add(15*time.Minute), nil)); !errors.Is(r.Err, ErrBadCommand) {
		t.Errorf("repeated once expired: err = %v, want ErrBadCommand", r.Err)
	}
	m.must(enrolCmd("tok-2", "web-2", RoleControl, "K2", at.Add(time.Minute)))
	if r := m.apply(cmd(at.Add(2*time.Minute), nil)); !errors.Is(r.Err, ErrBadCommand) {
		t.Errorf("repeated once used: err = %v, want ErrBadCommand", r.Err)
	}
	if got := m.snapshot(); string(got) == string(before) {
		t.Fatal("the enrolment did not change the state (the test proves nothing)")
	}
}

// TestControlNodeIDTaken: a token for the id of an active control node is refused
// as node_exists, with the way to free the id a control node needs (a removal, not
// a revocation); once it is removed the id can be given to a new machine.
func TestControlNodeIDTaken(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	for i, id := range []string{"cp-2", "cp-3"} { // two, so that one can be removed
		tok := fmt.Sprintf("tc-%d", i)
		m.must(tokenCmd(tok, id, RoleControl, t0, time.Hour))
		m.must(Command{Op: OpEnrol, At: t0, Enrol: &EnrolCmd{TokenID: tok, Node: id, Role: RoleControl, PublicKey: "UKEY" + id, CurveKey: "XKEY" + id}})
	}
	r := m.apply(tokenCmd("tc-2", "cp-2", RoleControl, t0, time.Hour))
	if !errors.Is(r.Err, ErrNodeExists) || !strings.Contains(r.Err.Error(), "meshctl control remove") || strings.Contains(r.Err.Error(), "revoke") {
		t.Fatalf("token for an active control node's id: err = %v, want ErrNodeExists saying to remove it", r.Err)
	}
	if r := m.apply(tokenCmd("tw", "cp-2", RoleWorker, t0, time.Hour)); !errors.Is(r.Err, ErrNodeExists) {
		t.Fatalf("worker token for an active control node's id: err = %v, want ErrNodeExists", r.Err)
	}
	m.must(Command{Op: OpRemoveControl, At: t0, RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	m.must(tokenCmd("tc-9", "cp-2", RoleControl, t0, time.Hour))
}

// A control plane restored from a backup older than its last declarations knows
// fewer versions than its hosts applied. The next declaration must come under a
// version the host does not hold: the same version over another body is refused
// by the host as replayed, and the node would never take it.
func TestDeclareResumesPastTheVersionTheNodeApplied(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker})
	m.must(declareCmd(Selector{All: true}, `{"files":[{"path":"v1"}]}`, t0.Add(time.Hour)))
	// a reports version 3, from declarations the restored state never saw; b
	// reports what it was given.
	m.must(Command{Op: OpStatus, At: t0.Add(time.Hour), Status: &StatusCmd{Reports: []StatusReport{
		{Node: "a", Applied: Applied{HaveApplied: true, Version: 3}},
		{Node: "b", Applied: Applied{HaveApplied: true, Version: 1}},
	}}})
	r := m.must(declareCmd(Selector{All: true}, `{"files":[{"path":"v2"}]}`, t0.Add(2*time.Hour)))
	got := map[string]uint64{}
	for _, a := range r.Assignments {
		got[a.Node] = a.Version
	}
	if got["a"] != 4 || got["b"] != 2 {
		t.Fatalf("versions assigned = %v, want a 4 (past the 3 it applied), b 2", got)
	}
	if v := m.state().Nodes["a"].Declared.Version; v != 4 {
		t.Fatalf("a declared version = %d, want 4", v)
	}
	// A report at the largest version cannot wrap the count around to 0.
	m.must(Command{Op: OpStatus, At: t0.Add(2 * time.Hour), Status: &StatusCmd{Reports: []StatusReport{
		{Node: "b", Applied: Applied{HaveApplied: true, Version: math.MaxUint64}},
	}}})
	r = m.must(declareCmd(Selector{Nodes: []string{"b"}}, `{"files":[{"path":"v3"}]}`, t0.Add(3*time.Hour)))
	if v := r.Assignments[0].Version; v != 3 {
		t.Fatalf("b's version after an impossible report = %d, want 3", v)
	}
}

// TestATokenWhoseKeyWasRetiredIsShownStale: a token records the signing key it
// carries (the keyring's newest); it stays pending through a rotation, which keeps
// the old key, and is shown stale once a retirement drops it (the mesh refuses it,
// token_stale_key), where `token list` went on saying pending. A token minted after
// the rotation carries the new key and stays pending.
func TestATokenWhoseKeyWasRetiredIsShownStale(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(tokenCmd("old", "web-1", RoleWorker, t0, time.Hour))
	shown := func(id string) string {
		var st string
		m.f.Read(func(s *State) { st = s.ShownState(s.Tokens[id], t0.Add(time.Minute)) })
		return st
	}
	if got := m.state().Tokens["old"].SigningKey; got != "aa11" {
		t.Fatalf("the token records the key %q, want the keyring's newest aa11", got)
	}
	m.must(Command{Op: OpRotate, At: t0, Rotate: &RotateCmd{Keyring: Keyring{Epoch: 2, Keys: []string{"aa11", "bb22"}, Envelope: json.RawMessage(`{"payloadType":"k2"}`)}}})
	m.must(tokenCmd("new", "web-2", RoleWorker, t0, time.Hour))
	if a, b := shown("old"), shown("new"); a != TokenPending || b != TokenPending {
		t.Fatalf("after the rotation: %s and %s, want both pending (both keys are trusted)", a, b)
	}
	m.must(Command{Op: OpRetire, At: t0, Retire: &RetireCmd{Keyring: Keyring{Epoch: 3, Keys: []string{"bb22"}, Envelope: json.RawMessage(`{"payloadType":"k3"}`)}}})
	if a, b := shown("old"), shown("new"); a != TokenStale || b != TokenPending {
		t.Fatalf("after the retirement: %s and %s, want stale and pending", a, b)
	}
	// A stale token is still one `token cancel` cancels.
	m.must(Command{Op: OpCancelTokens, At: t0, CancelTokens: &CancelTokensCmd{Node: "web-1"}})
	if got := shown("old"); got != TokenCancelled {
		t.Fatalf("the stale token cancelled: %s", got)
	}
}

// TestWhenANodeWasLastSeenIsKept: a status entry records when the leader last heard
// from nodes that went offline; the latest time stays (an entry naming an earlier
// one, as a slower flush would, changes nothing), a time after the entry's own is
// refused (the leader's clock read both), revoked and unknown nodes are left out,
// and the times survive a snapshot. An entry of the form before it (no seen) applies
// as it did.
func TestWhenANodeWasLastSeenIsKept(t *testing.T) {
	m := enrolled(t, map[string]string{"a": RoleWorker, "b": RoleWorker, "c": RoleWorker})
	at := t0.Add(time.Hour)
	m.must(revokeCmd("c", at))
	seen := func(at time.Time, reports ...SeenReport) {
		t.Helper()
		m.must(Command{Op: OpStatus, At: at, Status: &StatusCmd{Seen: reports}})
	}
	seen(at, SeenReport{Node: "a", At: at.Add(-time.Minute)}, SeenReport{Node: "c", At: at}, SeenReport{Node: "nobody", At: at})
	seen(at.Add(time.Minute), SeenReport{Node: "a", At: at.Add(-2 * time.Minute)}, SeenReport{Node: "b", At: at.Add(2 * time.Minute)})
	s := m.state()
	if got := s.Nodes["a"].LastSeen; !got.Equal(at.Add(-time.Minute)) {
		t.Errorf("a last seen %v, want %v (an earlier time does not replace a later one)", got, at.Add(-time.Minute))
	}
	if got := s.Nodes["b"].LastSeen; !got.IsZero() {
		t.Errorf("b last seen %v, want none: the time named is after the entry", got)
	}
	if got := s.Nodes["c"].LastSeen; !got.IsZero() {
		t.Errorf("revoked c last seen %v, want none", got)
	}
	if _, ok := s.Nodes["nobody"]; ok {
		t.Error("a time for an unknown node made a node")
	}
	// The form before the field: reports only, applied as ever, times kept.
	m.must(Command{Op: OpStatus, At: at.Add(2 * time.Minute), Status: &StatusCmd{Reports: []StatusReport{{Node: "a", Applied: Applied{HaveApplied: true, Version: 1}}}}})
	r := newMachine(t)
	if err := r.f.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	if got := r.state().Nodes["a"]; !got.LastSeen.Equal(at.Add(-time.Minute)) || got.Applied.Version != 1 {
		t.Errorf("after a snapshot a is last seen %v at version %d, want %v at 1", got.LastSeen, got.Applied.Version, at.Add(-time.Minute))
	}
}

// TestARotationPastTheNextEpochNeedsItsRules: a rotation stamped with
// RulesRotatePastReported may install any epoch above the current one (the leader
// takes it past an epoch hosts report); unstamped, only the next, as older rules
// apply it; an epoch not above the current one is refused either way.
func TestARotationPastTheNextEpochNeedsItsRules(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	rotate := func(epoch uint64, rules int) Result {
		return m.apply(Command{Op: OpRotate, At: t0, Rules: rules, Rotate: &RotateCmd{Keyring: Keyring{Epoch: epoch, Keys: []string{"aa11", "bb22"}, Envelope: json.RawMessage(`{"payloadType":"k"}`)}}})
	}
	if res := rotate(4, RulesCancelByID); !errors.Is(res.Err, ErrBadCommand) {
		t.Fatalf("epoch 4 under older rules: %v, want refused", res.Err)
	}
	if res := rotate(1, RulesRotatePastReported); !errors.Is(res.Err, ErrBadCommand) {
		t.Fatalf("epoch 1, the current one, stamped: %v, want refused", res.Err)
	}
	if e := m.state().Keyring.Epoch; e != 1 {
		t.Fatalf("refused rotations moved the epoch to %d", e)
	}
	m.must(Command{Op: OpRotate, At: t0, Rules: RulesRotatePastReported, Rotate: &RotateCmd{Keyring: Keyring{Epoch: 4, Keys: []string{"aa11", "bb22"}, Envelope: json.RawMessage(`{"payloadType":"k4"}`)}}})
	if s := m.state(); s.Keyring.Epoch != 4 || s.Rules != RulesRotatePastReported || len(s.KeyringChain(1)) != 1 || len(s.KeyringChain(3)) != 1 {
		t.Fatalf("after the stamped rotation: epoch %d, rules %d, chain after 1: %d, after 3: %d", s.Keyring.Epoch, s.Rules, len(s.KeyringChain(1)), len(s.KeyringChain(3)))
	}
}

// TestOnUndecodable (a walkthrough): a command entry that does not decode is
// skipped, and was skipped in silence; the hook hears of it, with its index, so
// that the control node says its log may be garbled. Commands that decode, refused
// or not, are not reported to it.
func TestOnUndecodable(t *testing.T) {
	m := newMachine(t)
	var seen []uint64
	m.f.OnUndecodable(func(index uint64, err error) {
		m.f.Read(func(*State) {}) // outside the lock
		if err == nil {
			t.Error("no error for an entry that does not decode")
		}
		seen = append(seen, index)
	})
	m.must(initCmd("demo", t0))
	m.apply(enrolCmd("x", "a", RoleWorker, "K", t0))
	m.applyRaw([]byte("{garbage"))
	if want := []uint64{m.f.AppliedIndex()}; !slices.Equal(seen, want) {
		t.Fatalf("heard of %v, want %v (the garbled entry alone)", seen, want)
	}
}
