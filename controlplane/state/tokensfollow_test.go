package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// stamped is c under the rules in which tokens follow their node.
func stamped(c Command) Command {
	c.Rules = RulesTokensFollowNodes
	return c
}

// TestOneTokenANodeAtATime: two operators minting for one node at once each got a
// token, and whichever machine enrolled first took the id with its token's labels;
// the other learnt it when its enrolment was refused. Under RulesTokensFollowNodes
// the second mint is refused naming the first, --replace cancels the first in the
// same entry, and a token that no longer admits anything (expired, stale) does not
// count.
func TestOneTokenANodeAtATime(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	at := t0.Add(2 * time.Minute)
	m.must(stamped(tokenCmd("tok-a", "db-1", RoleWorker, at, 15*time.Minute)))

	before := m.snapshot()
	r := m.apply(stamped(tokenCmd("tok-b", "db-1", RoleWorker, at.Add(time.Second), 15*time.Minute)))
	var pe *PendingTokenError
	if !errors.Is(r.Err, ErrTokenPending) || !errors.As(r.Err, &pe) || len(pe.Pending) != 1 || pe.Pending[0].ID != "tok-a" ||
		!strings.Contains(r.Err.Error(), "--replace") || !strings.Contains(r.Err.Error(), "meshctl token cancel db-1") {
		t.Fatalf("a second token for db-1: %v, want token_pending naming tok-a and the ways out", r.Err)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a refused token changed the state")
	}

	replace := stamped(tokenCmd("tok-b", "db-1", RoleWorker, at.Add(time.Second), 15*time.Minute))
	replace.CreateToken.Replace = true
	r = m.must(replace)
	if len(r.Tokens) != 1 || r.Tokens[0].ID != "tok-a" || !r.Tokens[0].CancelledAt.Equal(at.Add(time.Second)) {
		t.Fatalf("replaced %+v, want tok-a cancelled at the command's time", r.Tokens)
	}
	s := m.state()
	if got := s.Tokens["tok-a"].StateAt(at.Add(time.Second)); got != TokenCancelled {
		t.Fatalf("tok-a is %s, want cancelled", got)
	}
	if got := s.Tokens["tok-b"].StateAt(at.Add(time.Second)); got != TokenPending {
		t.Fatalf("tok-b is %s, want pending", got)
	}
	if r := m.apply(enrolCmd("tok-a", "db-1", RoleWorker, "K-a", at.Add(2*time.Second))); !errors.Is(r.Err, ErrTokenCancelled) {
		t.Fatalf("enrolling with the replaced token: %v, want cancelled", r.Err)
	}
	// The same request sent again (a leader died with it, or its answer was
	// lost) is answered with the token it made, and names the token that made
	// replaced, as the first answer did; it cancels nothing more.
	again := replace
	again.At = at.Add(3 * time.Second)
	if r := m.must(again); !r.Repeated || len(r.Tokens) != 1 || r.Tokens[0].ID != "tok-a" || !r.Tokens[0].CancelledAt.Equal(at.Add(time.Second)) {
		t.Fatalf("the replacing request again: repeated %t, tokens %+v; want tok-a, cancelled by the first", r.Repeated, r.Tokens)
	}

	// Expired, tok-b no longer stands in the way.
	later := at.Add(20 * time.Minute)
	m.must(stamped(tokenCmd("tok-c", "db-1", RoleWorker, later, 15*time.Minute)))
	// Nor does a stale one, whose signing key was retired.
	m.f.mu.Lock()
	m.f.st.Tokens["tok-c"].SigningKey = "retired"
	m.f.mu.Unlock()
	m.must(stamped(tokenCmd("tok-d", "db-1", RoleWorker, later.Add(time.Second), 15*time.Minute)))

	// Under the earlier rules (an entry written before, or while a control node on
	// them serves) both are recorded, as every node of those rules records them.
	m.must(tokenCmd("tok-e", "db-1", RoleWorker, later.Add(2*time.Second), 15*time.Minute))
	if got := len(m.state().PendingTokens("db-1", later.Add(2*time.Second))); got != 2 {
		t.Fatalf("%d pending tokens under the earlier rules, want 2", got)
	}
}

// TestRevocationCancelsItsNodesTokens: a revocation deleted every unused token of
// every node it named, so a second `revoke` of a node revoked before (a script
// retried) silently removed the token minted since for its replacement, and a
// machine presenting a deleted token was told the mesh never minted it. Under
// RulesTokensFollowNodes the tokens of the nodes it revokes are cancelled and
// listed, and those of a node revoked before are left alone.
func TestRevocationCancelsItsNodesTokens(t *testing.T) {
	for _, rules := range []int{0, RulesTokensFollowNodes, RulesPendingByRecord} {
		m := newMachine(t)
		m.must(initCmd("demo", t0))
		// Two tokens for web-1, as two operators minting at once under the earlier
		// rules got; the first enrols.
		m.must(tokenCmd("tok-1", "web-1", RoleWorker, t0, time.Hour))
		m.must(tokenCmd("tok-2", "web-1", RoleWorker, t0, time.Hour))
		m.must(enrolCmd("tok-1", "web-1", RoleWorker, "K-1", t0.Add(time.Minute)))

		at := t0.Add(2 * time.Minute)
		r := m.must(Command{Op: OpRevoke, At: at, Rules: rules, Revoke: &RevokeCmd{Node: "web-1"}})
		s := m.state()
		if rules == 0 {
			if _, kept := s.Tokens["tok-2"]; kept || len(r.Tokens) != 0 {
				t.Fatalf("earlier rules: tok-2 kept %t, listed %+v; they deleted it and listed nothing", kept, r.Tokens)
			}
		} else {
			if len(r.Tokens) != 1 || r.Tokens[0].ID != "tok-2" || s.Tokens["tok-2"].StateAt(at) != TokenCancelled {
				t.Fatalf("tok-2 listed %+v, now %+v: want it cancelled and listed", r.Tokens, s.Tokens["tok-2"])
			}
			if r := m.apply(enrolCmd("tok-2", "web-1", RoleWorker, "K-2", at)); !errors.Is(r.Err, ErrTokenCancelled) {
				t.Fatalf("enrolling with tok-2: %v, want cancelled", r.Err)
			}
		}
		if s.Tokens["tok-1"].StateAt(at) != TokenUsed {
			t.Fatalf("the used token is %s", s.Tokens["tok-1"].StateAt(at))
		}

		// A replacement's token, then the revocation again.
		m.must(Command{Op: OpCreateToken, At: at.Add(time.Minute), Rules: rules, CreateToken: &CreateTokenCmd{ID: "tok-3", Node: "web-1", Role: RoleWorker, TTL: time.Hour}})
		again := at.Add(2 * time.Minute)
		r = m.must(Command{Op: OpRevoke, At: again, Rules: rules, Revoke: &RevokeCmd{Node: "web-1"}})
		_, kept := m.state().Tokens["tok-3"]
		switch {
		case rules == 0 && kept:
			t.Fatal("earlier rules: the replacement's token was kept; they deleted it")
		case rules != 0 && (!kept || m.state().Tokens["tok-3"].StateAt(again) != TokenPending || len(r.Tokens) != 0):
			t.Fatalf("revoking web-1 again touched the replacement's token (kept %t, listed %+v)", kept, r.Tokens)
		}
		if rules != 0 {
			m.must(enrolCmd("tok-3", "web-1", RoleWorker, "K-3", again.Add(time.Second)))
		}
	}
}

// TestLabelsOfARevokedNode: labels set on a revoked node were accepted and then lost,
// as the machine enrolled next under its id takes its token's. Under
// RulesTokensFollowNodes they are refused, and the state does not change.
func TestLabelsOfARevokedNode(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	m.must(revokeCmd("web-1", t0.Add(time.Hour)))
	label := Command{Op: OpLabel, At: t0.Add(2 * time.Hour), Label: &LabelCmd{Node: "web-1", Labels: map[string]string{"tier": "web"}}}
	before := m.snapshot()
	if r := m.apply(stamped(label)); !errors.Is(r.Err, ErrNodeRevoked) || !strings.Contains(r.Err.Error(), "web-1") {
		t.Fatalf("labelling revoked web-1: %v, want node revoked", r.Err)
	}
	if string(m.snapshot()) != string(before) {
		t.Fatal("a refused label changed the state")
	}
	// The earlier rules applied it; every node on them does.
	if r := m.must(label); r.Node.Labels["tier"] != "web" {
		t.Fatalf("earlier rules: labels %v", r.Node.Labels)
	}
}

// TestPendingTokensIndex: the index PendingTokens reads (tokens by node) follows the
// tokens through a restore from a snapshot, a clone, and the purge of old records, so
// that every control node, restored or not, refuses or records a mint alike.
func TestPendingTokensIndex(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(stamped(tokenCmd("tok-a", "db-1", RoleWorker, t0, time.Hour)))
	m.must(stamped(tokenCmd("tok-b", "db-2", RoleWorker, t0, time.Hour)))

	restored := NewFSM()
	if err := restored.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*State{"applied": m.state(), "restored": func() (c *State) { restored.Read(func(s *State) { c = s.Clone() }); return c }()} {
		if p := s.PendingTokens("db-1", t0); len(p) != 1 || p[0].ID != "tok-a" {
			t.Errorf("%s: db-1's pending tokens %v, want tok-a", name, p)
		}
		if p := s.PendingTokens("db-3", t0); len(p) != 0 {
			t.Errorf("%s: db-3's pending tokens %v, want none", name, p)
		}
	}
	// A day after they expired the records go, and the index with them: a mint for
	// db-1 then is no replacement, and db-2's token is forgotten alike.
	later := t0.Add(time.Hour + expiredTokenRetention + time.Minute)
	r := m.must(stamped(tokenCmd("tok-c", "db-1", RoleWorker, later, time.Hour)))
	if len(r.Tokens) != 0 || len(m.state().Tokens) != 1 {
		t.Fatalf("after the purge: replaced %v, %d tokens kept; want none replaced and tok-c alone", r.Tokens, len(m.state().Tokens))
	}
	if got := m.state().tokensOf; len(got) != 1 || len(got["db-1"]) != 1 || got["db-1"][0] != "tok-c" {
		t.Fatalf("the index after the purge: %v, want db-1: [tok-c]", got)
	}
}

// TestPendingTokensByTheirRecord: a token's SigningKey may differ between control
// nodes (empty where the node applied the mint before it recorded the field, or
// loaded such a node's snapshot), and rules 3 counted a stale token out by it: after
// a retirement one node refused a mint, or left a token in a revocation, that another
// carried out, and their states parted for good (an upgrade audit saw a node enrolled
// on two control nodes and unknown on the third). Under RulesPendingByRecord both
// count the token as pending, and apply every command alike.
func TestPendingTokensByTheirRecord(t *testing.T) {
	at := t0.Add(2 * time.Minute)
	twoNodes := func() (*machine, *machine) {
		var ms [2]*machine
		for i := range ms {
			ms[i] = enrolled(t, map[string]string{"web-1": RoleWorker})
			ms[i].must(stamped(tokenCmd("tok-a", "db-1", RoleWorker, at, 15*time.Minute)))
		}
		// One recorded the key tok-a carries, since retired; the other nothing.
		ms[0].f.mu.Lock()
		ms[0].f.st.Tokens["tok-a"].SigningKey = "retired"
		ms[0].f.mu.Unlock()
		ms[1].f.mu.Lock()
		ms[1].f.st.Tokens["tok-a"].SigningKey = ""
		ms[1].f.mu.Unlock()
		return ms[0], ms[1]
	}
	byRecord := func(c Command) Command {
		c.Rules = RulesPendingByRecord
		return c
	}
	same := func(what string, a, b *machine) {
		t.Helper()
		sa, sb := a.state(), b.state()
		for _, s := range []*State{sa, sb} {
			for _, tok := range s.Tokens {
				tok.SigningKey = "" // what may differ, and no rule reads
			}
		}
		if !bytes.Equal(encodeState(t, sa), encodeState(t, sb)) {
			t.Fatalf("%s: the two control nodes' states differ", what)
		}
	}

	a, b := twoNodes()
	mint := byRecord(tokenCmd("tok-b", "db-1", RoleWorker, at.Add(time.Second), 15*time.Minute))
	ra, rb := a.apply(mint), b.apply(mint)
	var pe *PendingTokenError
	if !errors.Is(ra.Err, ErrTokenPending) || !errors.Is(rb.Err, ErrTokenPending) {
		t.Fatalf("a second token for db-1: %v and %v, want token_pending on both", ra.Err, rb.Err)
	}
	if !errors.As(ra.Err, &pe) || !pe.Stale || !strings.Contains(ra.Err.Error(), "stale") || !strings.Contains(ra.Err.Error(), "--replace") {
		t.Fatalf("where tok-a is known stale: %v, want it said stale, with --replace", ra.Err)
	}
	same("a refused mint", a, b)
	mint.CreateToken.Replace = true
	a.must(mint)
	b.must(mint)
	same("a replacing mint", a, b)

	a, b = twoNodes()
	a.must(byRecord(Command{Op: OpRevoke, At: at.Add(time.Second), Revoke: &RevokeCmd{Node: "web-1"}}))
	b.must(byRecord(Command{Op: OpRevoke, At: at.Add(time.Second), Revoke: &RevokeCmd{Node: "web-1"}}))
	enrol := enrolCmd("tok-a", "db-1", RoleWorker, "K-db", at.Add(2*time.Second))
	a.apply(enrol)
	b.apply(enrol)
	same("a revocation and an enrolment", a, b)
}

func encodeState(t *testing.T, s *State) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStaleRefusalCountsItsTokens: a refusal for several stale tokens speaks of them
// all, not of one (an upgrade check found "it" for two).
func TestStaleRefusalCountsItsTokens(t *testing.T) {
	tok := func(id string) *Token { return &Token{ID: id, Node: "db-1", CreatedAt: t0, Expiry: t0.Add(time.Hour)} }
	one := (&PendingTokenError{Node: "db-1", Pending: []*Token{tok("aaaa")}, Stale: true}).Error()
	two := (&PendingTokenError{Node: "db-1", Pending: []*Token{tok("aaaa"), tok("bbbb")}, Stale: true}).Error()
	if !strings.Contains(one, "has token aaaa, stale") || !strings.Contains(one, "cancels it") {
		t.Errorf("one: %q", one)
	}
	if !strings.Contains(two, "has token bbbb and 1 older one(s), all stale") || !strings.Contains(two, "none can enrol") || !strings.Contains(two, "cancels them") {
		t.Errorf("two: %q", two)
	}
}

// TestAControlTokenPendingIsNotSaidToCarryLabels (audit of commands run twice,
// finding 1): a second control token for a node was refused token_pending saying
// "whichever token is used first enrols the node, with its labels", but control
// tokens take none; the operator looked for labels that do not exist. The refusal
// of a control token says what the first one used does: it admits the control node
// at the addresses it was minted for. A worker token's still names its labels.
func TestAControlTokenPendingIsNotSaidToCarryLabels(t *testing.T) {
	at := t0.Add(time.Minute)
	control := (&PendingTokenError{Node: "cp-2", Pending: []*Token{{ID: "c0ffee000000aa", Node: "cp-2", Role: RoleControl, CreatedAt: at, Expiry: at.Add(time.Hour)}}}).Error()
	if strings.Contains(control, "label") || !strings.Contains(control, "cp-2 has control token c0ffee000000") ||
		!strings.Contains(control, "admits the control node, at the addresses it was minted for") || !strings.Contains(control, "--replace") {
		t.Fatalf("a pending control token: %q", control)
	}
	worker := (&PendingTokenError{Node: "web-1", Pending: []*Token{{ID: "feed00000000bb", Node: "web-1", Role: RoleWorker, CreatedAt: at, Expiry: at.Add(time.Hour)}}}).Error()
	if !strings.Contains(worker, "enrols the node, with its labels") {
		t.Fatalf("a pending worker token: %q", worker)
	}
}
