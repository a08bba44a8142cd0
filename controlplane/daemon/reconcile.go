package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// reconcileLoop re-sends, while this node leads, the declarations that live nodes
// have not applied (a push lost to a partition, a leader change).
func (d *Daemon) reconcileLoop(ctx context.Context) error {
	return every(ctx, d.opts.ReconcileInterval, func() {
		// Every node: a broker list its mesh.json failed to record is written at
		// the next tick, not at the next change of the control nodes.
		d.effects.push(effect{kind: effectBrokers})
		if d.raft.IsLeader() {
			d.reconcile(d.now())
		}
	})
}

// reconcile re-sends what live nodes lack: the keyrings after the epoch a node last
// acknowledged, then its declaration if it has not applied it. A push can be lost (a
// partition, a leader change, a subscription not yet known to the broker published
// on), and a declaration signed by a key the node does not trust yet would only be
// refused without the keyrings before it.
func (d *Daemon) reconcile(now time.Time) {
	d.purge(now)
	d.forget(now)
	d.refresh(now)
	var (
		lagging []string
		chains  = map[string][]json.RawMessage{}
		keys    = map[string]string{}
	)
	d.fsm.Read(func(s *state.State) {
		oldest := s.OldestKeptKeyring()
		for id, n := range s.Nodes {
			// A node past the keyring history refuses all that is sent to it
			// (api.KeyringGone): it was re-sent the chain and its declaration
			// every round, for good.
			if n.Revoked || !d.alive(n, now) || state.PastKeyringHistory(n.Applied, oldest) {
				continue
			}
			keys[id] = n.PublicKey
			a := n.Applied
			if a.KeyringEpoch < s.Keyring.Epoch {
				chains[id] = s.KeyringChain(a.KeyringEpoch)
			}
			// A declaration issued within the last interval is likely still on its
			// way, or being applied: at fleet scale a round takes seconds, and
			// sending it again would double the work of both sides.
			behind := (!a.HaveApplied || a.Version < n.Declared.Version) && now.Sub(n.Declared.IssuedAt) >= d.opts.ReconcileInterval
			// A node that verified this very version and could not apply it retries
			// by itself.
			failedThis := a.ErrorCode == api.StatusApplyFailed && a.ErrorVersion == n.Declared.Version
			if behind && !failedThis || chains[id] != nil {
				lagging = append(lagging, id)
			}
		}
	})
	if len(lagging) == 0 {
		return
	}
	if due, rounds := d.resends.due(now); due {
		d.log.Info("re-sending what live nodes have not acknowledged", "nodes", len(lagging), "behind_on_keyrings", len(chains),
			"first", strings.Join(firstIDs(lagging, resendShown), ","), "count", rounds)
	}
	// Each node pays for what is re-sent to it, as for a sync's answer: a node that
	// never acknowledges (a hostile one, its subscriptions duplicated) was re-sent
	// its declaration on every one of them each round, for nothing. One whose budget
	// cannot pay now is skipped this round, keyrings and declaration together.
	var (
		skipped []string
		mu      sync.Mutex
	)
	d.sendDeclarations(lagging, func(node string, env []byte) bool {
		chain := chains[node]
		size := len(env)
		for _, kr := range chain {
			size += len(kr)
		}
		if !d.payAnswer(node, keys[node], size) {
			mu.Lock()
			skipped = append(skipped, node)
			mu.Unlock()
			return false
		}
		for _, kr := range chain {
			_ = d.conns.publisher.Publish(api.DeclarationSubject(node), kr)
		}
		return true
	})
	if len(skipped) > 0 {
		if due, rounds := d.resendsSkipped.due(now); due {
			d.log.Warn("re-sending skipped for nodes whose message budget cannot pay for it now: each is re-sent once its budget refills (a node asking for its declaration faster than its budget allows, or holding many connections and subscriptions)",
				"nodes", len(skipped), "first", strings.Join(firstIDs(skipped, resendShown), ","), "count", rounds)
		}
	}
}

// resendShown is how many of the nodes re-sent to the line about it names.
const resendShown = 5

// resendLogEvery is how often that line is written while re-sending goes on.
const resendLogEvery = 5 * time.Minute

// resendNotice bounds the line about re-sending. A live node that stays behind for
// a reason re-sending does not cure (its clock an hour off, an identity cloned onto
// another machine) is sent its declaration again every reconcile for as long as it
// lasts, and a line each time was 8,640 identical lines a day naming no node. The
// first line is written at once; then one every resendLogEvery, with the count of
// rounds since the last.
type resendNotice struct {
	mu     sync.Mutex
	last   time.Time // when the last line was written; zero: none yet
	rounds int       // rounds since the last line
}

// due counts a round of re-sending at now and reports whether a line is due, and
// then how many rounds it covers, this one included.
func (r *resendNotice) due(now time.Time) (bool, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rounds++
	if !r.last.IsZero() && now.Sub(r.last) < resendLogEvery {
		return false, 0
	}
	n := r.rounds
	r.last, r.rounds = now, 0
	return true, n
}

// firstIDs returns the first n of ids in order, for a line that names a few.
func firstIDs(ids []string, n int) []string {
	sorted := slices.Sorted(slices.Values(ids))
	return sorted[:min(n, len(sorted))]
}

// purge commits an empty command when a token record or a sealed identity has fallen
// due and nothing else was committed since: every command drops them by its time, and
// a quiet mesh would otherwise keep a control token's sealed identity in its state,
// its snapshots and their backups past the token's expiry.
func (d *Daemon) purge(now time.Time) {
	var due bool
	d.fsm.Read(func(s *state.State) { due = s.PurgeDue(now) })
	if !due {
		return
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpPurge, At: now.UTC()}, commitTimeout); err != nil || res.Err != nil {
		d.log.Warn("expired token records not purged; will try again", "err", errors.Join(err, res.Err))
	}
}

// forget commits the forgetting of nodes revoked more than state.RevokedRetention
// ago, state.ForgetBatch at a time: an ephemeral fleet (a machine enrolled once,
// revoked when it goes away) would otherwise grow the state, its snapshots and every
// backup by a whole record a machine for ever. Only once every control node applies
// the rules of it: an older one would keep the records and part from the others.
func (d *Daemon) forget(now time.Time) {
	before := now.Add(-state.RevokedRetention).UTC()
	if older := d.notOnRules(state.RulesForgetRevoked); len(older) > 0 {
		// Said, at most every resendLogEvery, while records are due: a member
		// down for good and never removed holds them back for as long.
		var due bool
		d.fsm.Read(func(s *state.State) { due = s.AnyRevokedBefore(before) })
		if !due {
			return
		}
		if ok, _ := d.forgetHeld.due(now); ok {
			d.log.Warn("revoked nodes' records due to be forgotten are kept while a control node that may apply older rules is a member: upgrade it, or remove it if it is gone for good",
				"revoked_before", before.Format(time.RFC3339), "older", older)
		}
		return
	}
	var due []string
	d.fsm.Read(func(s *state.State) { due = s.RevokedDue(before, state.ForgetBatch) })
	if len(due) == 0 {
		return
	}
	cmd := state.Command{Op: state.OpForget, At: now.UTC(), Rules: state.RulesForgetRevoked,
		Forget: &state.ForgetCmd{Nodes: due, RevokedBefore: before}}
	res, err := d.raft.Apply(cmd, commitTimeout)
	if err != nil || res.Err != nil {
		d.log.Warn("revoked nodes' records not forgotten; will try again", "nodes", len(due), "err", errors.Join(err, res.Err))
		return
	}
	if len(res.Forgotten) > 0 {
		d.log.Info("revoked nodes' records forgotten: their keys stay refused, their ids' versions go on",
			"nodes", len(res.Forgotten), "revoked_before", before.Format(time.RFC3339), "first", firstIDs(res.Forgotten, 5))
	}
}

// refresh re-signs, in one log entry, every declaration past half its validity, and
// sends them: hosts that keep receiving them never go stale. So it does those issued
// in this node's future (state.DueForRefresh), which hosts refuse, except those
// issued further in its future than the validity: stamped again they would expire
// before they were issued, and it reports them instead (an ERROR, at most every
// resendLogEvery), unless another control node's clock agrees with its own: then a
// clock that far ahead stamped them, and it stamps them again.
func (d *Daemon) refresh(now time.Time) {
	var due state.DueRefresh
	d.fsm.Read(func(s *state.State) { due = s.DueForRefresh(now) })
	if len(due.Behind) > 0 {
		if peer, agreed := d.ctl.clockAgreed(d.cfg.Node, now); agreed {
			// Another control node's clock agrees with this one: a clock that far
			// ahead stamped them, and stamped again they hold for hosts whose
			// clocks agree with the two.
			d.log.Warn("declarations stamped more than their validity ahead of this control node's clock, which another control node's agrees with: a control node whose clock was that far ahead stamped them, and hosts with a right clock refuse them; stamping them again by this clock",
				"nodes", len(due.Behind), "agreeing", peer, "ahead_at_least", due.Newest.Sub(now).Round(time.Second).String(),
				"newest_stamp", due.Newest.UTC().Format(time.RFC3339), "now", now.UTC().Format(time.RFC3339))
			due.Nodes = append(due.Nodes, due.Behind...)
			due.Behind = nil
		}
	}
	if len(due.Behind) > 0 {
		if ok, rounds := d.stampsAhead.due(now); ok {
			d.log.Error("this control node's clock is behind the declarations' stamps in its state by more than their validity: "+
				"what it stamps now expires before a clock that agrees with theirs reads it, and hosts refuse it as expired, so these are not stamped again, and every declare it commits is refused too. "+
				"Set this node's clock right (NTP; meshctl control status shows the control nodes' clocks). "+
				"If it is right, a control node whose clock was that far ahead stamped them: fix that clock, then declare to these nodes again",
				"nodes", len(due.Behind), "first", strings.Join(firstIDs(due.Behind, resendShown), ","),
				"behind_at_least", due.Newest.Sub(now).Round(time.Second).String(),
				"newest_stamp", due.Newest.UTC().Format(time.RFC3339), "now", now.UTC().Format(time.RFC3339), "count", rounds)
		}
	}
	if len(due.Nodes) == 0 {
		return
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpRefresh, At: now.UTC(), Refresh: &state.RefreshCmd{Nodes: due.Nodes}}, commitTimeout)
	if err != nil || res.Err != nil {
		d.log.Warn("declarations not refreshed; will try again", "nodes", len(due.Nodes), "err", errors.Join(err, res.Err))
		return
	}
	if due.Ahead > 0 {
		d.log.Warn("declarations issued in this node's future were stamped again by its clock: either a clock ahead stamped them (this node's before it was stepped back, or another control node's that led), or this node's clock is behind now, and then what it stamps expires early by as much for hosts with a right clock; meshctl control status shows the control nodes' clocks",
			"nodes", due.Ahead, "now", now.UTC().Format(time.RFC3339))
	}
	nodes := make([]string, 0, len(res.Assignments))
	for _, a := range res.Assignments {
		nodes = append(nodes, a.Node)
	}
	// Stamped again in the log; signed as they are sent, where one that cannot be
	// (a body this version's rules refuse: unsignable_body) is its own line. This
	// said "re-signed" of those too.
	d.log.Info("declarations stamped again before they expire; signing and sending them", "nodes", len(nodes))
	d.publishDeclarations(nodes)
}
