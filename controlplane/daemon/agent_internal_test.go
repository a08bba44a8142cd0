package daemon

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// statusMsg is node's status report naming agent (none when "").
func statusMsg(t testing.TB, node, agent string) *nats.Msg {
	t.Helper()
	data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1, Agent: agent})
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: api.StatusSubject(node), Data: data}
}

// pendingAgent is what the status batcher holds for node, if anything.
func pendingAgent(d *Daemon, node string) (string, bool) {
	d.status.mu.Lock()
	defer d.status.mu.Unlock()
	p, ok := d.status.pending[node]
	return p.applied.Agent, ok
}

// TestStatusKeepsTheAgentOnChangeOnly: the agent a node reports is kept in its
// record through the log when it changes (the first report, an upgrade), and a
// heartbeat naming the same agent proposes nothing; an agent that is not a name and
// a version (control characters, an escape sequence, too long) is kept as unknown,
// and the report still counts (the node stays alive and its version applied).
func TestStatusKeepsTheAgentOnChangeOnly(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	agentOf := func() string {
		var a string
		d.fsm.Read(func(s *state.State) { a = s.Nodes[node].Applied.Agent })
		return a
	}
	steps := []struct {
		report  string
		changes bool
		kept    string
	}{
		{"meshhost/0.1.0", true, "meshhost/0.1.0"},
		{"meshhost/0.1.0", false, "meshhost/0.1.0"},
		{"meshhost/0.1.0+git20261203145709.7132ef2931ef", true, "meshhost/0.1.0+git20261203145709.7132ef2931ef"},
		{"meshhost/0.1.0+git20261203145709.7132ef2931ef", false, "meshhost/0.1.0+git20261203145709.7132ef2931ef"},
		{"meshhost/0.1.0\x1b]0;pwned\x07", true, ""},
		{"meshhost/0.1.0\x1b]0;pwned\x07", false, ""},
		{"meshhost/" + strings.Repeat("1", api.MaxAgentLen), false, ""},
		{"", false, ""},
		{"meshhost/0.1.0", true, "meshhost/0.1.0"},
	}
	// Each step an upgrade of its own, past textEvery: reports that change only the
	// agent, sent faster, are held back (TestReportsChangingOnlyTextAreHeldBack).
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	d.status.setNow(func() time.Time { return time.Unix(0, clock.Load()) })
	for i, s := range steps {
		clock.Add(int64(textEvery))
		d.handleStatus(statusMsg(t, node, s.report))
		got, pending := pendingAgent(d, node)
		if pending != s.changes {
			t.Fatalf("step %d, report %q after %q: a change pending = %v, want %v", i, s.report, agentOf(), pending, s.changes)
		}
		if pending && got != s.kept {
			t.Fatalf("step %d, report %q: %q pending, want %q", i, s.report, got, s.kept)
		}
		d.status.flush()
		if a := agentOf(); a != s.kept {
			t.Fatalf("step %d, report %q: the record says %q, want %q", i, s.report, a, s.kept)
		}
		if v := d.view(d.fsmNode(t, node), d.now(), 0); v.Agent != s.kept {
			t.Fatalf("step %d: meshctl nodes would show %q, want %q", i, v.Agent, s.kept)
		}
	}
	if n := d.guard.snapshot().Dropped; len(n) != 0 {
		t.Errorf("reports dropped: %v; an agent the control plane does not keep is no reason to drop the report", n)
	}
}

// setNow sets the batcher's clock, under its lock: its flushes run meanwhile.
func (b *statusBatcher) setNow(now func() time.Time) {
	b.mu.Lock()
	b.now = now
	b.mu.Unlock()
}

// fsmNode is a copy of node's record.
func (d *Daemon) fsmNode(t testing.TB, node string) *state.Node {
	t.Helper()
	var n state.Node
	d.fsm.Read(func(s *state.State) { n = *s.Nodes[node] })
	return &n
}

// TestHeartbeatWithTheSameAgentCostsNothingMore measures what keeping the agent
// adds to a heartbeat that changes nothing, as every host sends after each
// declaration: beside a report naming no agent, in the same run, no allocation but
// the agent's text that the decoder makes (it did before the control plane kept
// it: the field was decoded and dropped), and nothing for the log.
func TestHeartbeatWithTheSameAgentCostsNothingMore(t *testing.T) {
	d := fleet(t, 2)
	const agent = "meshhost/0.1.0+git20261203145709.7132ef2931ef"
	with, without := statusMsg(t, "n-0", agent), statusMsg(t, "n-1", "")
	d.handleStatus(with)
	d.handleStatus(without)
	d.status.flush()
	withAllocs := testing.AllocsPerRun(100, func() { d.handleStatus(with) })
	withoutAllocs := testing.AllocsPerRun(100, func() { d.handleStatus(without) })
	t.Logf("allocations per heartbeat: %v naming an agent, %v naming none", withAllocs, withoutAllocs)
	if withAllocs > withoutAllocs+1 {
		t.Errorf("a heartbeat naming an unchanged agent allocates %v times, one naming none %v: more than the decoded text", withAllocs, withoutAllocs)
	}
	if _, pending := pendingAgent(d, "n-0"); pending {
		t.Error("heartbeats naming the same agent left a change for the log")
	}
}

// TestAgentSeriesAreBounded: mesh_nodes_agents keeps the most reported agents and
// counts the rest as other, so that hosts naming agents of their own cannot make a
// series each; every node is counted once.
func TestAgentSeriesAreBounded(t *testing.T) {
	counts := map[string]int{agentNone: 2, "meshhost/0.1.0": 50, "meshhost/0.2.0": 40}
	for i := range 30 {
		counts[fmt.Sprintf("evil/%d", i)] = 1
	}
	got := boundAgents(counts, 4)
	want := map[string]int{agentNone: 2, "meshhost/0.1.0": 50, "meshhost/0.2.0": 40, "evil/0": 1, "evil/1": 1, agentOther: 28}
	if !maps.Equal(got, want) {
		t.Errorf("bounded to 4: %v, want %v", got, want)
	}
	small := map[string]int{"meshhost/0.1.0": 3, agentNone: 1}
	if got := boundAgents(small, 4); !maps.Equal(got, small) {
		t.Errorf("under the bound: %v, want it unchanged", got)
	}
}

// TestAnUpgradeCostsOneEntryPerFlush counts the log entries heartbeats and an
// upgrade of the agents cost, for 300 nodes: their first reports are one entry (a
// flush's batch), the heartbeats after it none, and all of them reporting another
// agent (the fleet upgraded between two flushes) one again.
func TestAnUpgradeCostsOneEntryPerFlush(t *testing.T) {
	const n = 300
	d := fleet(t, n)
	// Counted in the log, not by the applied index: Raft records what it applied
	// after its state machine's goroutine may have applied it, so right after the
	// seeding that index can still trail the log by entries the round did not cost.
	round := func(agent string) uint64 {
		before := lastIndex(d)
		for i := range n {
			d.handleStatus(statusMsg(t, fmt.Sprintf("n-%d", i), agent))
		}
		d.status.flush()
		return lastIndex(d) - before
	}
	for _, r := range []struct {
		what, agent string
		entries     uint64
	}{
		{"first reports", "meshhost/0.1.0", 1},
		{"heartbeats", "meshhost/0.1.0", 0},
		{"heartbeats again", "meshhost/0.1.0", 0},
		{"the fleet upgraded", "meshhost/0.1.0+git20261203145709.7132ef2931ef", 1},
		{"heartbeats after the upgrade", "meshhost/0.1.0+git20261203145709.7132ef2931ef", 0},
	} {
		if got := round(r.agent); got != r.entries {
			t.Errorf("%s of %d nodes: %d log entries, want %d", r.what, n, got, r.entries)
		}
	}
}

// TestStatusKeepsBatchProofsOnChangeOnly: whether a node's agent takes batch proofs
// (decision 0034) is kept in its record when its report says so, a heartbeat saying
// the same proposes nothing, and an agent downgraded to one that does not say it is
// recorded as not taking them: the next fan-out signs its declaration on its own.
func TestStatusKeepsBatchProofsOnChangeOnly(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	report := func(proofs bool) *nats.Msg {
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1,
			Agent: "meshhost/0.1.0", BatchProofs: proofs})
		if err != nil {
			t.Fatal(err)
		}
		return &nats.Msg{Subject: api.StatusSubject(node), Data: data}
	}
	for i, s := range []struct{ proofs, changes bool }{{true, true}, {true, false}, {false, true}, {false, false}, {true, true}} {
		d.handleStatus(report(s.proofs))
		if _, pending := pendingAgent(d, node); pending != s.changes {
			t.Fatalf("step %d: a change pending = %v, want %v", i, pending, s.changes)
		}
		d.status.flush()
		var in state.DeclarationInput
		d.fsm.Read(func(st *state.State) { in, _ = st.DeclarationInput(node) })
		if in.BatchProofs != s.proofs {
			t.Fatalf("step %d: a fan-out would take the node for one that takes batch proofs: %v, want %v", i, in.BatchProofs, s.proofs)
		}
	}
}

// TestAReportedSecretIsNotKept (audit of secrets, finding 2): a node's error message
// (a failing hook's output) enters the replicated state and is shown to every
// operator. A seed or a private key in it is hidden by the control plane too, for an
// agent older than its own filter: the state keeps the message without it.
func TestAReportedSecretIsNotKept(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	seed := "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4" // an nkey seed's form
	data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1,
		Error: &api.StatusError{Code: api.StatusHookFailed, Message: "hook check: exit status 1: cannot load " + seed + " (bad key)", Version: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
	d.status.flush()
	var kept string
	d.fsm.Read(func(s *state.State) { kept = s.Nodes[node].Applied.ErrorMessage })
	if strings.Contains(kept, seed) || !strings.Contains(kept, "(bad key)") {
		t.Fatalf("the state keeps %q", kept)
	}
}

// TestReportsChangingOnlyTextAreHeldBack: a host that names a new error text (or a
// new agent) in every report it may send has the leader commit it at most once each
// textEvery, the newest when that has passed; a report that changes more (another
// error code, a version) is committed at the next flush with it. A review measured a
// host within its budget having 5 log entries a second written for it.
func TestReportsChangingOnlyTextAreHeldBack(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	clock := steppedClock(d) // the node's budget refills by the same clock
	report := func(code, text string) {
		t.Helper()
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1,
			Agent: "meshhost/0.1.0", Error: &api.StatusError{Code: code, Message: text, Version: 1}})
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
		d.status.flush()
	}
	recorded := func() string {
		var a state.Applied
		d.fsm.Read(func(s *state.State) { a = s.Nodes[node].Applied })
		return a.ErrorCode + ": " + a.ErrorMessage
	}
	report(api.StatusHookFailed, "text 0")
	if got := recorded(); got != "hook_failed: text 0" {
		t.Fatalf("the first failure is recorded as %q", got)
	}
	// Twenty seconds of reports at 19 a second, a new text in each.
	const perSecond = 19
	changes, last := 0, recorded()
	for i := 1; i <= 20*perSecond; i++ {
		clock.Add(int64(time.Second / perSecond))
		report(api.StatusHookFailed, fmt.Sprintf("text %d", i))
		if got := recorded(); got != last {
			changes++
			last = got
		}
	}
	if max := int(20*time.Second/textEvery) + 1; changes > max || changes == 0 {
		t.Errorf("20 s of reports changing only their text were committed %d times, want 1 to %d", changes, max)
	}
	// Held, not lost: the newest is committed once textEvery has passed.
	clock.Add(int64(textEvery))
	d.status.flush()
	if got, want := recorded(), fmt.Sprintf("hook_failed: text %d", 20*perSecond); got != want {
		t.Errorf("after the reports stopped the record says %q, want the newest, %q", got, want)
	}
	// More than text: at once, however recent the last commit.
	report(api.StatusHookFailed, "text again")
	report(api.StatusApplyFailed, "another failure")
	if got := recorded(); got != "apply_failed: another failure" {
		t.Errorf("a report changing the error code right after a text-only one was recorded as %q", got)
	}
	// A text held back, then the host back to the text recorded: the held one is
	// never committed over it.
	report(api.StatusApplyFailed, "a passing text")
	report(api.StatusApplyFailed, "another failure")
	clock.Add(int64(textEvery))
	d.status.flush()
	if got := recorded(); got != "apply_failed: another failure" {
		t.Errorf("a text held back, the host back to the recorded one, then %s: recorded %q", textEvery, got)
	}
}

// TestReportsFlippingTheirRecordAreHeldBack (a walkthrough of protocol.md): a host
// alternating its error code, or its stale flag, in every report it may send had
// the leader commit each at the next flush, 36 log entries in 10 s where textEvery
// bounds text to one. At most changesEach such reports are committed in a
// textEvery, the newest held, not lost. The node's convergence (converges) is
// committed at once however many came before; a host alternating two fields, one
// forward as the other goes back (a review: version and keyring epoch, a first
// apply and a version, hooks and an error), or resetting its record at once and
// walking it forward a field at a time (a second review: 100 commits in 20 s),
// gets no more than one flipping a single field: changesEach counted reports in a
// textEvery, each followed by at most one convergence.
func TestReportsFlippingTheirRecordAreHeldBack(t *testing.T) {
	for flip, at := range map[string]func(i int, st *api.Status){
		"error code": func(i int, st *api.Status) {
			st.Error = &api.StatusError{Code: []string{api.StatusHookFailed, api.StatusApplyFailed}[i%2], Message: "m", Version: 2}
		},
		"stale": func(i int, st *api.Status) { st.Stale = i%2 == 1 },
		"version against epoch": func(i int, st *api.Status) {
			st.AppliedVersion, st.KeyringEpoch = uint64(1+i%2), uint64(2-i%2)
		},
		"first apply against version": func(i int, st *api.Status) {
			st.HaveApplied, st.AppliedVersion = i%2 == 1, uint64(2-i%2)
		},
		"hooks against error": func(i int, st *api.Status) {
			if st.HooksRunning = i%2 == 0; !st.HooksRunning {
				st.Error = &api.StatusError{Code: api.StatusHookFailed, Message: "m", Version: 1}
			}
		},
		"one step back, many forward": func(i int, st *api.Status) {
			step := i % 7
			st.HaveApplied, st.AppliedVersion, st.KeyringEpoch = step >= 1, uint64(min(step, 2)), uint64(min(max(step-2, 0), 1))
			st.HooksRunning, st.Stale = step < 4, step < 6
			if step < 5 {
				st.Error = &api.StatusError{Code: api.StatusApplyFailed, Message: "m", Version: 2}
			}
		},
	} {
		t.Run(flip, func(t *testing.T) {
			d := fleet(t, 1)
			const node = "n-0"
			clock := steppedClock(d)
			var commits atomic.Int64
			d.status.beforeCommit = func() { commits.Add(1) }
			send := func(st api.Status) {
				t.Helper()
				st.V, st.Node, st.Agent = api.ProtocolVersion, node, "meshhost/0.1.0"
				data, err := json.Marshal(st)
				if err != nil {
					t.Fatal(err)
				}
				d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
				d.status.flush()
			}
			report := func(i int) {
				st := api.Status{HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1}
				at(i, &st)
				send(st)
			}
			recorded := func() (a state.Applied) {
				d.fsm.Read(func(s *state.State) { a = s.Nodes[node].Applied })
				return a
			}
			declare := func(content string) {
				d.declare(api.DeclareRequest{Nodes: []string{node}, Body: json.RawMessage(`{"files":[{"path":"x","content":"` + content + `"}]}`)}, requestCall{})
			}
			declare("1")
			declare("2")
			report(0)
			// Twenty seconds of reports at 19 a second, each flipping the record.
			commits.Store(0)
			const perSecond = 19
			for i := 1; i <= 20*perSecond; i++ {
				clock.Add(int64(time.Second / perSecond))
				report(i)
			}
			// (20 s / textEvery + 1) × changesEach, as they are, for the steps away
			// from convergence, and as many back toward it (never held): a bound of
			// its own, which raising either constant must face here. 380 before.
			const most = 36
			if commits.Load() > most || commits.Load() == 0 {
				t.Errorf("20 s of reports flipping the %s were committed %d times, want 1 to %d", flip, commits.Load(), most)
			}
			// Progress at once, past every held report.
			declare("3")
			send(api.Status{HaveApplied: true, AppliedVersion: 3, KeyringEpoch: 2})
			if a := recorded(); a.Version != 3 {
				t.Errorf("a report of version 3 after the flips: recorded version %d, want 3 at once", a.Version)
			}
			// Held, not lost: a failure when the window is spent is committed once
			// it has passed.
			for i := range changesEach + 1 {
				send(api.Status{HaveApplied: true, AppliedVersion: 3, KeyringEpoch: 2, HooksRunning: i%2 == 0})
			}
			send(api.Status{HaveApplied: true, AppliedVersion: 3, KeyringEpoch: 2, Error: &api.StatusError{Code: api.StatusApplyFailed, Message: "m", Version: 3}})
			clock.Add(int64(textEvery))
			d.status.flush()
			if a := recorded(); a.ErrorCode != api.StatusApplyFailed || a.HooksRunning {
				t.Errorf("the last report, held: recorded %+v", a)
			}
		})
	}
}

// TestAHeldReportIsNotInFlight (a review): a report held by the window (changesEach)
// stayed in the batch the flush was committing, so a report back to the node's
// converged record, come while the flush committed other nodes' reports, was queued
// to follow it as the node's convergence, never held: a host alternating hooks
// running (held) and converged (sent during the commit) had an entry committed at
// every other flush, 62 holding its report in 20 s. It is bounded as any host is:
// (20 s / textEvery) × changesEach away from convergence and as many back.
func TestAHeldReportIsNotInFlight(t *testing.T) {
	d := fleet(t, 2)
	const node = "n-0"
	clock := steppedClock(d)
	send := func(running bool) {
		st := api.Status{V: api.ProtocolVersion, Node: node, Agent: "meshhost/0.1.0", HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1, HooksRunning: running}
		data, _ := json.Marshal(st)
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
	}
	reportedAt := func() (at time.Time) {
		d.fsm.Read(func(s *state.State) { at = s.Nodes[node].Applied.ReportedAt })
		return at
	}
	d.declare(api.DeclareRequest{Nodes: []string{node}, Body: json.RawMessage(`{"files":[{"path":"x","content":"1"}]}`)}, requestCall{})
	send(false)
	d.status.flush()
	entries, other, last := 0, 0, reportedAt()
	flush := func() {
		clock.Add(int64(200 * time.Millisecond))
		// Another node's report, as a fleet has at every flush, keeps each
		// flush committing.
		other++
		d.status.add("n-1", state.Applied{HaveApplied: true, Version: uint64(other % 2)}, reportConverged)
		d.status.flush()
		if at := reportedAt(); !at.Equal(last) {
			entries, last = entries+1, at
		}
	}
	for range 50 { // 20 s, a flush each 200 ms
		send(true)
		d.status.beforeCommit = func() { send(false) }
		flush()
		d.status.beforeCommit = nil
		flush()
	}
	// 2 windows × 6 (changesEach) each way, and the first convergence: a bound of
	// its own, which raising changesEach must face here.
	const most = 25
	if entries > most {
		t.Errorf("%d entries hold %s's report in 20 s, want at most %d", entries, node, most)
	}
}

// TestAnHonestAgentsReportsAreNotHeld: an agent applying a declaration every two
// seconds, each with hooks (running, then not), and one failing then mended, has
// every report committed at the flush it reaches; in a burst of declarations, five
// a second, its convergence on each is still committed at once, whatever is held
// of its hooks running (a review: after six changes, `declare --wait` saw the
// seventh declaration's hooks done ten seconds late).
func TestAnHonestAgentsReportsAreNotHeld(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	clock := steppedClock(d)
	send := func(st api.Status) state.Applied {
		t.Helper()
		st.V, st.Node, st.Agent, st.HaveApplied, st.KeyringEpoch = api.ProtocolVersion, node, "meshhost/0.1.0", true, 1
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
		d.status.flush()
		var a state.Applied
		d.fsm.Read(func(s *state.State) { a = s.Nodes[node].Applied })
		return a
	}
	for v := uint64(1); v <= 24; v++ {
		d.declare(api.DeclareRequest{Nodes: []string{node}, Body: json.RawMessage(fmt.Sprintf(`{"files":[{"path":"x","content":"%d"}]}`, v))}, requestCall{})
		burst := v > 12
		if burst {
			clock.Add(int64(200 * time.Millisecond))
		} else {
			clock.Add(int64(2 * time.Second))
		}
		if a := send(api.Status{AppliedVersion: v, HooksRunning: true}); !burst && (a.Version != v || !a.HooksRunning) {
			t.Fatalf("declaration %d, hooks running: recorded %+v", v, a)
		}
		if v == 6 {
			// A hook fails, and is mended by hand.
			if a := send(api.Status{AppliedVersion: v, Error: &api.StatusError{Code: api.StatusHookFailed, Message: "m", Version: v}}); a.ErrorCode != api.StatusHookFailed {
				t.Fatalf("declaration %d, hook failed: recorded %+v", v, a)
			}
		}
		if a := send(api.Status{AppliedVersion: v}); a.Version != v || a.HooksRunning || a.ErrorCode != "" {
			t.Fatalf("declaration %d, converged: recorded %+v, want it at once", v, a)
		}
	}
}

// TestAReportBackToTheRecordSupersedesOneQueued (a walkthrough): an agent that put
// a file back reports its hooks running, then not, milliseconds apart, before the
// next flush. The first was queued, the second matched the record and dropped only
// a text held back: the first was committed, and the node shown "hooks running",
// not converged, until its next heartbeat (`meshctl status` exit 5 at every hand
// edit). The newest report wins.
func TestAReportBackToTheRecordSupersedesOneQueued(t *testing.T) {
	d := fleet(t, 1)
	const node = "n-0"
	report := func(hooksRunning bool) {
		t.Helper()
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1,
			Agent: "meshhost/0.1.0", HooksRunning: hooksRunning})
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
	}
	running := func() (r bool) {
		d.fsm.Read(func(s *state.State) { r = s.Nodes[node].Applied.HooksRunning })
		return r
	}
	report(false)
	d.status.flush()
	if running() {
		t.Fatal("the first report is recorded with its hooks running")
	}
	report(true)  // a file put back: its hooks queued
	report(false) // and run, before the next flush
	d.status.flush()
	if running() {
		t.Fatal("a report of hooks running, superseded before the flush by one matching the record, was committed")
	}
	// The second report comes while the first is being committed: judged against
	// the record, which does not hold the first yet, it was dropped, and the
	// first committed after it (the last session's note left it open).
	report(true)
	d.status.beforeCommit = func() { report(false) }
	d.status.flush()
	d.status.beforeCommit = nil
	if !running() {
		t.Fatal("the report being committed is not recorded")
	}
	d.status.flush()
	if running() {
		t.Fatal("a report matching the record, which came while an older one was being committed, did not follow it")
	}
	// A commit of the older report that ends between the reading of the record
	// and the judging: the record is read again.
	report(true)
	commits := d.status.commitsDone()
	d.status.flush()
	if d.status.backToRecord(node, state.Applied{}, commits, reportChange) {
		t.Fatal("a report judged against a record read before a commit ended was decided on it")
	}
	// The report being committed spends the node's window of changes
	// (changesEach): the report back to its converged record that follows it is
	// its convergence, never held (a file put back six times in ten seconds showed
	// "hooks running" for the rest of them).
	d.status.flush()
	report(false)
	d.status.flush()
	d.status.mu.Lock()
	clear(d.status.changes)
	d.status.mu.Unlock()
	for range changesEach - 1 {
		report(true)
		d.status.flush()
		report(false)
		d.status.flush()
	}
	report(true)
	d.status.beforeCommit = func() { report(false) }
	d.status.flush()
	d.status.beforeCommit = nil
	d.status.flush()
	if running() {
		t.Fatal("with the window spent, a converged report following an older one being committed was held")
	}
}

// steppedClock sets d's status batcher and guard on a clock the test moves
// (clock.Add), at now.
func steppedClock(d *Daemon) *atomic.Int64 {
	clock := new(atomic.Int64)
	clock.Store(time.Now().UnixNano())
	d.status.setNow(func() time.Time { return time.Unix(0, clock.Load()) })
	d.guard.now = func() time.Time { return time.Unix(0, clock.Load()) }
	return clock
}
