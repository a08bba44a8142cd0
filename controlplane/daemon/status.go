package daemon

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/host/redact"
)

// handleStatus records a node's report: liveness in memory, changes through the log.
// A status is a publish, not a request: the reply subject it names is answered only
// when another machine holds the node's key (tellKeyShared), and only into the
// node's own inbox.
func (d *Daemon) handleStatus(m *nats.Msg) {
	node := nodeOf(m.Subject)
	if !d.admitNodeMessage("status", node, m, d.guard.budgets.MaxStatus) {
		return
	}
	now := d.now()
	st, err := api.Decode[api.Status](m.Data)
	if err != nil {
		d.guard.drop("status", ReasonMalformed, node, err.Error())
		return
	}
	if st.Node != node {
		d.guard.drop("status", ReasonOtherNode, node, "the report names "+st.Node)
		return
	}
	if st.Error != nil && !api.ValidStatusCode(st.Error.Code) {
		// Operators read codes in a terminal, and each change is a log entry:
		// nothing but a short word is kept.
		d.guard.drop("status", ReasonMalformed, node, "the error code is not 1 to 64 characters of a-z, 0-9 and _")
		return
	}
	if st.Error != nil && slices.Contains(api.ControlPlaneVerdicts(), st.Error.Code) {
		// The control plane's own verdicts, no host's: reported, status told the
		// operator to revoke a node on its word (a review's reading).
		d.guard.drop("status", ReasonMalformed, node, "the error code "+st.Error.Code+" is the control plane's, not a host's")
		return
	}
	d.seen.mark(node, now)
	// The host's clock says when; one ahead of this node's is shown as now.
	putBackAt := st.LastPutBackAt
	if putBackAt.After(now) {
		putBackAt = now
	}
	d.seen.notePutBack(node, st.PutBack, putBackAt.UTC())
	a := state.Applied{
		HaveApplied:  st.HaveApplied,
		Version:      st.AppliedVersion,
		KeyringEpoch: st.KeyringEpoch,
		Stale:        st.Stale,
		HooksRunning: st.HooksRunning,
		BatchProofs:  st.BatchProofs,
		// Capped: a report saying more would keep the node's silent connection
		// counted alive for longer than any agent reports at.
		HeartbeatSeconds: min(st.HeartbeatSeconds, uint32(api.MaxHeartbeat/time.Second)),
	}
	// The agent is shown to operators and is a metric's label: kept only when it
	// is a name and a version, else unknown. Unchanged, as it is in all but the
	// report after an upgrade, it changes nothing below.
	if api.ValidAgent(st.Agent) {
		a.Agent = st.Agent
	}
	if st.Error != nil {
		// Hidden here too: an agent older than its own filter, or one that
		// misses a secret, would leave it in the replicated state.
		a.ErrorCode, a.ErrorMessage, a.ErrorVersion = st.Error.Code, api.CleanText(redactKept(st.Error.Message), api.MaxStatusMessageLen), st.Error.Version
		a.ErrorRetryAt = st.Error.RetryAt.UTC().Truncate(time.Second)
	}
	changed, ahead := false, false
	kind := reportChange
	var key string
	commits := d.status.commitsDone()
	d.fsm.Read(func(s *state.State) {
		n, ok := s.Nodes[node]
		if !ok || n.Revoked {
			return
		}
		key = n.PublicKey
		// A report far past what was declared is kept out of the state: the next
		// declaration's version follows it (state.MaxVersionLead).
		if ahead = a.HaveApplied && a.Version > n.Declared.Version && a.Version-n.Declared.Version > state.MaxVersionLead; ahead {
			return
		}
		old := n.Applied
		old.ReportedAt = time.Time{}
		changed = old != a
		switch {
		case !changed && convergedOn(a, n.Declared.Version):
			// Back to a converged record: if it follows an older report being
			// committed (backToRecord), it is the node's convergence again.
			kind = reportConverged
		case !changed:
		case sameButText(old, a):
			kind = reportText
		case converges(old, a, n.Declared.Version):
			kind = reportConverged
		}
	})
	if ahead {
		d.guard.drop("status", ReasonMalformed, node, "the report claims a version far past the one declared for the node")
		return
	}
	if changed {
		d.status.add(node, a, kind)
	} else if key != "" {
		// Back to what is recorded: a report queued before, or one being
		// committed, would replace it with what the host no longer says.
		for !d.status.backToRecord(node, a, commits, kind) {
			// A commit ended since the record was read: read it again.
			commits = d.status.commitsDone()
			same := false
			d.fsm.Read(func(s *state.State) {
				if n, ok := s.Nodes[node]; ok && !n.Revoked {
					old := n.Applied
					old.ReportedAt = time.Time{}
					same = old == a
				}
			})
			if !same {
				d.status.add(node, a, reportChange)
				break
			}
		}
	}
	if key != "" {
		d.tellKeyShared(m, node, key, now)
	}
}

// sameButText reports whether a report changes no more of a node's record than what
// is only shown or read only for liveness: the agent it names, its error's message,
// the time it tries again and the agent's report interval. A host that changed any
// of them in every report would commit a log entry at every flush (textEvery).
func sameButText(old, a state.Applied) bool {
	old.Agent, old.ErrorMessage, old.ErrorRetryAt, old.HeartbeatSeconds = a.Agent, a.ErrorMessage, a.ErrorRetryAt, a.HeartbeatSeconds
	return old == a
}

// redactKept is msg with its secrets hidden (redact.Secrets), as far as the start
// CleanText keeps of it: a report may say 8 KiB, of which 512 bytes are kept, and
// hiding it all cost the leader 2.5 ms a report (a review: a host at its budget
// took 60 ms a second). The first redactLook bytes are hidden, to the blank that
// follows them (a URL whose password runs past the cut is found whole: a second
// review); only if what is hidden in them shrinks the text so far that the kept
// start comes near the cut, where a secret may be cut short, is the whole hidden.
// With no blank within redactSeek past the first bytes, the whole is hidden at
// once: hidden to a blank far off, or to none, a message was hidden twice whole (a
// security review: 2 ms for 8 KiB without a blank). Within 1 KiB, a message
// whose look ends in a long URL or element still gains.
// The first part is hidden as the start of a longer text (redact.SecretsOfStart):
// a value whose end lies past the cut (a connection string's ';') is hidden to
// it, not to its first blank (a second review found the kept start showing the
// rest of such a password).
func redactKept(msg string) string { return redactKeptWith(msg, redact.SecretsOfStart, redact.Secrets) }

// redactKeptWith is redactKept hiding the first part with hideStart, the whole
// with hide.
func redactKeptWith(msg string, hideStart, hide func(string) string) string {
	if len(msg) > redactLook+redactSeek {
		if k := strings.IndexAny(msg[redactLook:redactLook+redactSeek], " \t\r\n"); k >= 0 {
			if hidden := hideStart(msg[:redactLook+k]); len(hidden) >= api.MaxStatusMessageLen+redactMargin {
				return hidden
			}
		}
	}
	return hide(msg)
}

// redactLook is how much of a report's message is hidden first (redactKept), to
// the first blank within redactSeek after it; and redactMargin how far before its
// cut the kept start must end: longer than any secret redact recognises cut short
// (a seed is 58 characters).
const (
	redactLook   = 4 * api.MaxStatusMessageLen
	redactSeek   = 1024
	redactMargin = 128
)

// converges reports whether a report a, replacing the record old, is the node's
// convergence on the version declared for it (convergedOn): the report `declare
// --wait` and `status` wait on, never held (changesEach). Every other change is
// counted, however it moves: a host that reset its record in one report and
// walked it forward a field at a time had each step taken as progress and
// committed at its flush (a review: 100 commits in 20 s). A cycle through
// convergence costs the host a counted report, so it gets no more than
// changesEach convergences in a textEvery.
func converges(old, a state.Applied, declared uint64) bool {
	return convergedOn(a, declared) && !convergedOn(old, declared)
}

// textEvery is the least time between two commits of a node's reports that change
// only what is shown (sameButText). An honest agent changes its agent at an upgrade
// and its error's text when a hook fails again, each committed at once; a host
// naming a new agent or a new error text in every report it may send (19 a second
// within its budget) had the leader commit a log entry at every flush, 5 a second,
// each carrying its 0.9 KB (a review measured raft.db growing 15 KB/s). Held back,
// the newest such report is committed when textEvery has passed, or with the next
// report that changes more.
const textEvery = 10 * time.Second

// changesEach is how many of a node's reports that change its record other than
// by its convergence (hooks running; an error, then another; stale) are committed
// at once in a textEvery; past it, the newest is held as a text is. An honest agent
// makes two or three a declaration; a host that flipped its error code or its
// stale flag in every report had a log entry committed at every flush, 3.6 a
// second, past textEvery's bound on text (a walkthrough: raft.db growing 15 KB/s).
// A node's convergence (converges) is never held: `declare --wait` waits on it.
const changesEach = 6

// reportKind is what a report changes in its node's record, for what a flush holds
// back.
type reportKind uint8

const (
	reportChange    reportKind = iota // more than text, not the node's convergence: changesEach
	reportText                        // only what sameButText leaves out: textEvery
	reportConverged                   // the node's convergence (converges)
)

// pendingReport is a node's report waiting for the next flush.
type pendingReport struct {
	applied state.Applied
	kind    reportKind
}

// changeWindow counts a node's reports of reportChange committed since start.
type changeWindow struct {
	start time.Time
	n     int
}

// statusBatcher collects status changes and commits them as one command per flush.
type statusBatcher struct {
	d       *Daemon
	now     func() time.Time
	mu      sync.Mutex
	pending map[string]pendingReport
	// spare is the map of the flush before, emptied: after a fan-out every node
	// reports at once, and a map grown afresh for each flush was a fifth of what
	// serve allocated for the reports.
	spare map[string]pendingReport
	// textAt is when a report of each node that changed only what is shown was
	// last committed, for textEvery; forgotten once that has passed.
	textAt map[string]time.Time
	// changes counts each node's reports of reportChange committed in the
	// textEvery since the first, for changesEach; forgotten once it has passed.
	changes map[string]changeWindow
	// seen is when the leader last heard from each node that went offline since
	// the last flush (state.StatusCmd.Seen), with its key.
	seen map[string]seenAt
	// inflight is the batch a flush is committing, nil between commits, and
	// commits counts the flushes that ended: a report back to a node's record,
	// judged against the record before a commit of that node's older report
	// ended, must follow it (backToRecord). A commit left pending (a log write
	// that does not return) or appended by a leader that lost leadership may
	// still apply after its flush ended: a report back to the record in that
	// window is dropped, and the node shows the older report until its next
	// heartbeat.
	inflight map[string]pendingReport
	commits  atomic.Uint64
	// beforeCommit, when set (tests), runs as a flush's command is about to be
	// committed.
	beforeCommit func()
}

// seenAt is when the leader last heard from a node whose last connection closed.
type seenAt struct {
	key string
	at  time.Time
}

func newStatusBatcher(d *Daemon) *statusBatcher {
	return &statusBatcher{d: d, now: d.now, pending: map[string]pendingReport{}, spare: map[string]pendingReport{},
		textAt: map[string]time.Time{}, changes: map[string]changeWindow{}, seen: map[string]seenAt{}}
}

// addSeen records that node, of key, went offline, last heard from at at.
func (b *statusBatcher) addSeen(node, key string, at time.Time) {
	b.mu.Lock()
	b.seen[node] = seenAt{key: key, at: at}
	b.mu.Unlock()
}

// add queues node's report a for the next flush, in place of any it queued before;
// kind is what it changes in the node's record.
func (b *statusBatcher) add(node string, a state.Applied, kind reportKind) {
	b.mu.Lock()
	b.pending[node] = pendingReport{applied: a, kind: kind}
	b.mu.Unlock()
}

// commitsDone is how many flushes ended, for backToRecord.
func (b *statusBatcher) commitsDone() uint64 { return b.commits.Load() }

// backToRecord takes node's report a, which matches its record as read when
// commitsDone was commits: the report queued before it, older (a node's reports
// arrive in order), is forgotten; and if a flush is committing an older report of
// the node, a is queued to follow it. Not only a report that changes what is
// shown: an agent that put a file back reports its hooks running, then not,
// milliseconds apart; the first was committed, and the node shown "hooks running",
// not converged, until its next heartbeat, up to 15 s (a walkthrough: `meshctl
// status` exit 5 at every hand edit), whether it was queued or being committed when
// the second came. False, deciding nothing, when a flush ended since the record
// was read: the record may hold the older report now; read it again.
func (b *statusBatcher) backToRecord(node string, a state.Applied, commits uint64, kind reportKind) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := b.inflight[node]; ok && p.applied != a {
		b.pending[node] = pendingReport{applied: a, kind: kind}
		return true
	}
	if b.commits.Load() != commits {
		return false
	}
	delete(b.pending, node)
	return true
}

func (b *statusBatcher) run(ctx context.Context) error {
	return every(ctx, b.d.opts.StatusFlushInterval, b.flush)
}

func (b *statusBatcher) flush() {
	b.mu.Lock()
	if len(b.pending) == 0 && len(b.seen) == 0 {
		b.mu.Unlock()
		return
	}
	batch, seen := b.pending, b.seen
	b.pending, b.spare = b.spare, nil
	if b.pending == nil { // a flush still holds it
		b.pending = map[string]pendingReport{}
	}
	if len(seen) > 0 {
		b.seen = map[string]seenAt{}
	}
	b.inflight = batch
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.inflight = nil
		b.commits.Add(1)
		b.mu.Unlock()
		clear(batch)
		b.mu.Lock()
		b.spare = batch
		b.mu.Unlock()
	}()
	if !b.d.raft.IsLeader() {
		return // the new leader hears the next heartbeat
	}
	cmd := &state.StatusCmd{Reports: make([]state.StatusReport, 0, len(batch))}
	var held []string
	b.mu.Lock()
	now := b.now()
	for node, at := range b.textAt {
		if now.Sub(at) >= textEvery || now.Before(at) {
			delete(b.textAt, node)
		}
	}
	for node, w := range b.changes {
		if now.Sub(w.start) >= textEvery || now.Before(w.start) {
			delete(b.changes, node)
		}
	}
	for node, p := range batch {
		switch p.kind {
		case reportText:
			if _, recent := b.textAt[node]; recent {
				held = append(held, node)
				continue
			}
			b.textAt[node] = now
		case reportChange:
			w, ok := b.changes[node]
			if !ok {
				w.start = now
			}
			if w.n >= changesEach {
				held = append(held, node)
				continue
			}
			w.n++
			b.changes[node] = w
		}
		cmd.Reports = append(cmd.Reports, state.StatusReport{Node: node, Applied: p.applied})
	}
	// Held for a later flush, unless the node reported again meanwhile; and no
	// longer in flight: a report back to the record, come while the others
	// commit, was queued to follow the held one as if it were being committed,
	// as the node's convergence, never held (a review: a host alternating the
	// two had a log entry every other flush once its window was spent).
	for _, node := range held {
		if _, newer := b.pending[node]; !newer {
			b.pending[node] = batch[node]
		}
		delete(batch, node)
	}
	b.mu.Unlock()
	for node, s := range seen {
		// One connected again (a reconnection, a broker restarted) is not
		// offline: its LAST SEEN is the leader's hearing, and a host whose
		// connection flaps costs no log entry for it.
		if b.d.presence.Open(s.key) == 0 {
			cmd.Seen = append(cmd.Seen, state.SeenReport{Node: node, At: s.at})
		}
	}
	if len(cmd.Reports) == 0 && len(cmd.Seen) == 0 {
		return
	}
	if b.beforeCommit != nil {
		b.beforeCommit()
	}
	if _, err := b.d.raft.Apply(state.Command{Op: state.OpStatus, Status: cmd}, commitTimeout); err != nil {
		// The times nodes were last heard from are not sent again: LAST SEEN
		// falls back on each one's last report that changed something.
		b.d.log.Warn("status reports and last-seen times not committed; the reports will be sent again, the last-seen times are dropped", "reports", len(cmd.Reports), "last_seen", len(cmd.Seen), "err", err)
	}
}
