package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
)

// ErrRemoved is returned by Open and Run when this control node was removed from
// the control plane. It is datadir.ErrRemoved: the data directory records the
// removal, and a directory that does is refused before anything starts.
var ErrRemoved = datadir.ErrRemoved

// ErrNewerRules is returned by Open and Run when the Raft log holds an entry of a
// newer meshctl than this one (state.NewerRulesError says which): the node stops
// rather than apply it otherwise.
var ErrNewerRules = state.ErrNewerRules

// HeartbeatInterval is how often a control node reports itself.
const HeartbeatInterval = 2 * time.Second

// controlTracker is the leader's memory of control nodes: their heartbeats and the
// probe entries issued to joiners.
type controlTracker struct {
	mu    sync.Mutex
	beats map[string]api.ControlHeartbeat
	seen  map[string]time.Time
	// leaderAt is the leader's applied index when a node's last heartbeat arrived,
	// and reached whether that heartbeat showed the node had applied the index the
	// leader was at when the heartbeat before it arrived (see caughtUp).
	leaderAt map[string]uint64
	reached  map[string]bool
	probes   map[string]string    // node -> id of the probe entry it must prove it applied
	warned   map[string]time.Time // node -> when its silence was last reported
	// clocks is, per node whose clock was reported off this one's, by how much
	// (its clock less this one's) and when it was reported.
	clocks map[string]clockReport
	// handedOver is when this node, leading with a clock off the other voters',
	// last tried to hand leadership over (see clockHandover).
	handedOver time.Time
	// astray is, per node whose last heartbeat showed it not following the
	// leader, the heartbeats in a row that did (see heard).
	astray map[string]followRun
}

// followRun is a control node's heartbeats in a row that showed it not following the
// leader: how many, when the first of them arrived, and why, by the last of them.
type followRun struct {
	beats int
	since time.Time
	why   string
}

type clockReport struct {
	off time.Duration
	at  time.Time
}

func newControlTracker() *controlTracker {
	return &controlTracker{beats: map[string]api.ControlHeartbeat{}, seen: map[string]time.Time{}, probes: map[string]string{},
		warned: map[string]time.Time{}, leaderAt: map[string]uint64{}, reached: map[string]bool{}, clocks: map[string]clockReport{},
		astray: map[string]followRun{}}
}

// clockTolerance is how far another control node's clock may be from this one's
// before it is reported: clocks that disagree by minutes change nothing (decision
// 0006), and a heartbeat's own delay is far less.
const clockTolerance = state.StampAheadTolerance

// clockReportEvery is how often a clock still off is reported again.
const clockReportEvery = 10 * time.Minute

// checkClock compares node's clock, theirs as its heartbeat sent it, with this
// node's, ours as the heartbeat arrived, and logs when they disagree by more than
// clockTolerance (again every clockReportEvery while they do, at once if it changes
// by as much), and when they agree again. The leader's clock stamps declarations and
// tokens: hosts refuse what a leader ahead by more than an hour stamps
// (not_yet_valid), the tokens it mints live longer, and one behind mints tokens that
// expire early and refreshes late. Nothing else names the control node whose clock
// is wrong: every host sees only the leader's stamps.
func (c *controlTracker) checkClock(log *slog.Logger, node string, theirs, ours time.Time) {
	if theirs.IsZero() {
		return // an older node: it sends no clock
	}
	off := theirs.Sub(ours).Round(time.Second)
	c.mu.Lock()
	last, reported := c.clocks[node]
	var due bool
	switch {
	case off.Abs() <= clockTolerance:
		delete(c.clocks, node)
	case !reported || ours.Sub(last.at) >= clockReportEvery || (off-last.off).Abs() > clockTolerance:
		c.clocks[node] = clockReport{off: off, at: ours}
		due = true
	}
	c.mu.Unlock()
	switch {
	case off.Abs() <= clockTolerance && reported:
		log.Info("another control node's clock agrees with this node's again", "node", node, "off_by", off.String())
	case !due:
	case off > 0:
		log.Warn("another control node's clock is ahead of this node's: while it leads, hosts refuse what it stamps more than an hour ahead of their clocks (not_yet_valid) and the tokens it mints live longer; fix NTP on whichever clock is wrong (`date -u` on each control node)",
			"node", node, "ahead_by", off.String(), "its_clock", theirs.UTC().Format(time.RFC3339), "this_clock", ours.UTC().Format(time.RFC3339))
	default:
		log.Warn("another control node's clock is behind this node's: while it leads, the tokens it mints expire early by a right clock and declarations are re-signed late; fix NTP on whichever clock is wrong (`date -u` on each control node)",
			"node", node, "behind_by", (-off).String(), "its_clock", theirs.UTC().Format(time.RFC3339), "this_clock", ours.UTC().Format(time.RFC3339))
	}
}

// handoverEvery is how often, at most, a leader whose clock is off the other voters'
// hands leadership over (or tries to: a transfer that failed is tried again no
// sooner): should its clock be right after all, it is not bounced around the cluster.
const handoverEvery = 5 * time.Minute

// handover is a leader's decision that its own clock is the one off: the other voters
// whose heartbeats carry their clock, each clock less this node's as its heartbeat
// arrived (all beyond clockTolerance in the same direction, and within it of each
// other), and the one of them to hand leadership to.
type handover struct {
	target string
	off    map[string]time.Duration
	clocks map[string]time.Time
}

// clockHandover decides, on the leader at now, whether to hand leadership over
// because its own clock is the one wrong: at least two of voters (the other voters,
// by Raft's configuration) report, that is beat within three heartbeat intervals, not
// stopping, with a clock (an older node sends none and does not count); every one of
// those clocks is more than clockTolerance off this node's in the same direction; and
// they agree with each other within clockTolerance. With one other voter reporting,
// nobody can tell which of two clocks is wrong, and nothing is done. The target is
// the first, by name, of the reporting voters that has caught up with leaderApplied
// (caughtUp); with none, nothing is done yet. Nothing is done within handoverEvery of
// the last attempt. It reads the tracker only: the caller records an attempt
// (noteHandover).
func (c *controlTracker) clockHandover(voters []string, leaderApplied uint64, now time.Time) (handover, bool) {
	h := handover{off: map[string]time.Duration{}, clocks: map[string]time.Time{}}
	c.mu.Lock()
	last := c.handedOver
	for _, node := range voters {
		hb, heard := c.beats[node]
		at := c.seen[node]
		if !heard || hb.Stopping || hb.Clock.IsZero() || now.Sub(at) > 3*HeartbeatInterval {
			continue
		}
		h.off[node], h.clocks[node] = hb.Clock.Sub(at).Round(time.Second), hb.Clock
	}
	c.mu.Unlock()
	if !last.IsZero() && now.Sub(last) < handoverEvery {
		return h, false
	}
	if len(h.off) < 2 {
		return h, false
	}
	var lo, hi time.Duration
	first := true
	for _, off := range h.off {
		if first || off < lo {
			lo = off
		}
		if first || off > hi {
			hi = off
		}
		first = false
	}
	// All ahead of this clock, or all behind it, by more than the tolerance; and
	// within the tolerance of each other.
	if !(lo > clockTolerance || hi < -clockTolerance) || hi-lo > clockTolerance {
		return h, false
	}
	reporting := make([]string, 0, len(h.off))
	for node := range h.off {
		reporting = append(reporting, node)
	}
	slices.Sort(reporting)
	for _, node := range reporting {
		if c.caughtUp(node, leaderApplied) {
			h.target = node
			return h, true
		}
	}
	return h, false
}

// clockAgreed returns, at now, a control node other than self whose clock agrees
// with this node's within clockTolerance, by its last heartbeat (within three
// heartbeat intervals, not stopping, carrying a clock), the first by name; false
// with none. A stamp far ahead of two clocks that agree was made by a clock that
// ran ahead, not read by one behind. Self's own heartbeats reach the tracker too,
// and agree with its clock always.
func (c *controlTracker) clockAgreed(self string, now time.Time) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var agreed []string
	for node, hb := range c.beats {
		at := c.seen[node]
		if node == self || hb.Stopping || hb.Clock.IsZero() || now.Sub(at) > 3*HeartbeatInterval {
			continue
		}
		if hb.Clock.Sub(at).Abs() <= clockTolerance {
			agreed = append(agreed, node)
		}
	}
	if len(agreed) == 0 {
		return "", false
	}
	return slices.Min(agreed), true
}

// noteHandover records an attempt to hand leadership over, at now.
func (c *controlTracker) noteHandover(now time.Time) {
	c.mu.Lock()
	c.handedOver = now
	c.mu.Unlock()
}

// silenceReport is how often a silent control node is reported.
const silenceReport = time.Minute

// reportSilent logs, at most once per silenceReport, a Raft member that does not
// answer: a voter that does not serve weakens the quorum; a nonvoter that never served
// is a join whose `meshctl serve` has not been started.
func (c *controlTracker) reportSilent(log *slog.Logger, node string, voter bool, last time.Time, heard bool, now time.Time) {
	var msg string
	switch {
	case voter && heard:
		msg = "a voting control node stopped answering: the quorum depends on the others"
	case voter:
		msg = "a voting control node has not answered since this node leads: the quorum depends on the others"
	case heard:
		msg = "a nonvoting control node stopped answering"
	default:
		msg = "a joined control node is not serving yet: it is promoted once `meshctl serve` runs on it"
	}
	// A change of situation is reported at once; the same one once per silenceReport.
	due := c.due(node+"\x00"+msg, now, silenceReport)
	switch {
	case !due:
	case heard:
		log.Warn(msg, "node", node, "silent_for", now.Sub(last).Round(time.Second).String())
	case voter:
		log.Warn(msg, "node", node)
	default:
		log.Info(msg, "node", node)
	}
}

// reportNotFollowing logs, at most once per silenceReport, a Raft member alive by its
// heartbeats that does not follow the leader by them (stray): it answers on
// the brokers as any other, and `meshctl nodes` showed it "alive" while its Raft was
// cut off, so a rolling restart went on to the next voter and stopped the control
// plane.
func (c *controlTracker) reportNotFollowing(log *slog.Logger, node string, voter bool, now time.Time) {
	why, since := c.stray(node)
	if why == "" || !c.due(node+"\x00follow", now, silenceReport) {
		return
	}
	if voter {
		log.Warn("a voting control node answers on the brokers but does not follow the leader: it counts towards no commit, and the quorum depends on the others; "+
			"look at its log, and at whether the others reach its Raft address (--raft-listen: a firewall, a certificate they refuse)",
			"node", node, "why", why, "for", now.Sub(since).Round(time.Second).String())
		return
	}
	log.Info("a nonvoting control node answers on the brokers but does not follow the leader", "node", node, "why", why, "for", now.Sub(since).Round(time.Second).String())
}

// due reports whether what key names was last reported at least every ago, and if
// so records now as its report.
func (c *controlTracker) due(key string, now time.Time, every time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.warned[key]) < every {
		return false
	}
	c.warned[key] = now
	return true
}

// beat records a node's heartbeat, arrived at at while the leader had applied
// leaderApplied, the leader being unknown (heard).
func (c *controlTracker) beat(h api.ControlHeartbeat, at time.Time, leaderApplied uint64) {
	c.heard(h, at, leaderApplied, "")
}

// notFollowingBeats is how many heartbeats in a row must show a control node not
// following the leader before it is shown so (stray): six, 10 s at
// HeartbeatInterval. A voter restarted, or one that took part in an election, may
// for a few seconds follow no leader yet, or name the one before, and must not be
// shown not following then; and a leader that failed to reach a follower waits up
// to about 10 s (hashicorp/raft's back-off) before it tries again, so a voter down
// for a few seconds may follow no leader for that long once it is back.
const notFollowingBeats = 6

// heard records a node's heartbeat, arrived at at while this node had applied
// leaderApplied and followed, or was, leader ("": none known), and judges whether it
// shows the node following that leader (astray): its Raft state says so, and its
// applied index has caught up (caughtUp's rule, for this heartbeat). A heartbeat of a
// version that sends no Raft state is judged by its applied index alone, and with
// no leader known here, none is judged by its Raft state: there is nothing to
// follow. The last heartbeat of a node stopping ends the run: it is offline.
func (c *controlTracker) heard(h api.ControlHeartbeat, at time.Time, leaderApplied uint64, leader string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before, heard := c.leaderAt[h.Node]
	c.reached[h.Node] = heard && h.AppliedIndex >= before
	c.beats[h.Node], c.seen[h.Node], c.leaderAt[h.Node] = h, at, leaderApplied
	why := astray(h, leader)
	if why == "" && h.AppliedIndex+caughtUpEntries < leaderApplied && !c.reached[h.Node] {
		why = fmt.Sprintf("its applied index %d trails %d by more than %d entries", h.AppliedIndex, leaderApplied, caughtUpEntries)
	}
	if why == "" || h.Stopping {
		delete(c.astray, h.Node)
		return
	}
	run := c.astray[h.Node]
	if run.beats == 0 {
		run.since = at
	}
	run.beats++
	run.why = why
	c.astray[h.Node] = run
}

// astray says why h, by its Raft state, shows its node not following leader, the
// leader the node that heard it follows or is; "" when it follows it, when h is of a
// version that sends no Raft state, when no leader is known, or when h is the
// leader's own.
func astray(h api.ControlHeartbeat, leader string) string {
	if h.RaftState == "" || leader == "" || h.Node == leader {
		return ""
	}
	term := ""
	if h.Term > 0 {
		term = fmt.Sprintf(" at term %d", h.Term)
	}
	switch {
	case h.RaftState == api.RaftStateCandidate:
		return "a candidate" + term + ": it hears no leader"
	case h.RaftState == api.RaftStateLeader:
		return "it says it leads" + term + ", and " + leader + " does"
	case h.RaftState != api.RaftStateFollower:
		return "its Raft is " + h.RaftState
	case h.Leader == "":
		return "it follows no leader" + term
	case h.Leader != leader:
		return "it follows " + h.Leader + term + ", not " + leader
	}
	return ""
}

// stray says why node does not follow the leader, and since when, once its
// last notFollowingBeats heartbeats in a row showed it not following (heard); ""
// otherwise. Whether it is alive is the caller's to judge.
func (c *controlTracker) stray(node string) (string, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	run := c.astray[node]
	if run.beats < notFollowingBeats {
		return "", time.Time{}
	}
	return run.why, run.since
}

// forget drops what was heard of a control node: when a new machine is admitted
// under the id of one removed, it is not shown with the heartbeats of the one it
// replaces (as holding the CA key, say). A removed node is kept until then, so
// that it is shown with when it was last heard.
func (c *controlTracker) forget(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range []map[string]time.Time{c.seen, c.warned} {
		delete(m, node)
	}
	// What was said of it, and when (due): keyed by the node and what was said.
	for key := range c.warned {
		if strings.HasPrefix(key, node+"\x00") {
			delete(c.warned, key)
		}
	}
	delete(c.beats, node)
	delete(c.leaderAt, node)
	delete(c.reached, node)
	delete(c.probes, node)
	delete(c.clocks, node)
	delete(c.astray, node)
}

// alive reports whether node serves at now by its last heartbeat: one heard within
// three heartbeat intervals that is not the last heartbeat of a node stopping (heard,
// and gone: offline from then on, until it beats again; its last seen stays the
// time it was heard, not an hour before as it was shown once).
func (c *controlTracker) alive(node string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[node]
	return ok && !c.beats[node].Stopping && now.Sub(at) <= 3*HeartbeatInterval
}

// serving reports whether node counts as serving for a change of the voters: alive
// by its heartbeats and, once its heartbeats showed it astray long enough to be
// shown so (stray), following the leader. A voter alive but not following (its Raft
// port blocked, its certificate refused by its peers) votes for nothing the leader
// commits: counted as serving, it let a removal leave a configuration whose quorum
// needed it, and the control plane stopped.
func (c *controlTracker) serving(node string, now time.Time) bool {
	if !c.alive(node, now) {
		return false
	}
	why, _ := c.stray(node)
	return why == ""
}

// caughtUpEntries is how far behind the leader's applied index a node's last
// heartbeat may be for the node to count as caught up on a quiet log.
const caughtUpEntries = 10

// caughtUp reports whether node has caught up with the log the leader applied, by its
// last heartbeat: it is within caughtUpEntries of the leader's applied index now, or it
// had applied, by its last heartbeat, all the leader had applied when the heartbeat
// before arrived. The second holds however fast the log grows: a leader committing a
// fleet's enrolments applies hundreds of entries between two heartbeats, so a count of
// entries alone would hold back a node that keeps up (found by
// TestPromotionWhileTheLogIsBusy), while a node still restoring a snapshot, or falling
// further behind, does not reach it.
func (c *controlTracker) caughtUp(node string, leaderApplied uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	hb, ok := c.beats[node]
	return ok && (hb.AppliedIndex+caughtUpEntries >= leaderApplied || c.reached[node])
}

// olderRules returns, sorted, the control nodes other than self that serve at now (by
// alive's rule) and whose last heartbeat announces older rules for applying the log
// than need (a revision of state.ApplyRules), or none: a version from before the
// announcement.
func (c *controlTracker) olderRules(self string, now time.Time, need int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for node, hb := range c.beats {
		if node != self && !hb.Stopping && now.Sub(c.seen[node]) <= 3*HeartbeatInterval && hb.Rules < need {
			out = append(out, node)
		}
	}
	slices.Sort(out)
	return out
}

// lastRules returns the rules node announced in the last heartbeat heard from it,
// however long ago, and whether any was heard.
func (c *controlTracker) lastRules(node string) (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	hb, ok := c.beats[node]
	return hb.Rules, ok
}

// noWritableQuorum says, when a voter cannot write its Raft log, whether too few
// voters can for anything to commit, and which cannot; "" otherwise. Such a voter
// answers the leader, which stays leader, and a change proposed then waited out
// meshctl's --timeout and was carried out a minute later, once there was room: an
// operator told "look before running it again" found nothing done, ran it again,
// and both went through. Voters not heard within three heartbeats count as unable
// too; without a voter that says it cannot write, Raft's own lease decides.
func (d *Daemon) noWritableQuorum(now time.Time) string {
	members, err := d.raft.Members()
	if err != nil {
		return ""
	}
	var voters []string
	for _, m := range members {
		if m.Voter {
			voters = append(voters, m.ID)
		}
	}
	return unwritable(voters, d.cfg.Node, d.raft.LogWriteError() != nil, d.ctl.last, now)
}

// unwritable is noWritableQuorum's judgement: voters, this node (self, whose log
// fails or not), and the last heartbeat heard of each other voter.
func unwritable(voters []string, self string, selfFailing bool, last func(string) (api.ControlHeartbeat, time.Time, bool), now time.Time) string {
	can, failing := 0, false
	var cannot []string
	for _, id := range voters {
		if id == self {
			if selfFailing {
				failing = true
				cannot = append(cannot, id+" (cannot write its Raft log)")
			} else {
				can++
			}
			continue
		}
		hb, at, heard := last(id)
		switch recent := heard && now.Sub(at) <= 3*HeartbeatInterval && !hb.Stopping; {
		case recent && hb.LogWriteFailing:
			failing = true
			cannot = append(cannot, id+" (cannot write its Raft log)")
		case recent:
			can++
		default:
			cannot = append(cannot, id+" (not heard)")
		}
	}
	if quorum := len(voters)/2 + 1; failing && can < quorum {
		slices.Sort(cannot)
		return fmt.Sprintf("%d of %d voters can write their Raft log, and a commit needs %d: %s", can, len(voters), quorum, strings.Join(cannot, ", "))
	}
	return ""
}

func (c *controlTracker) last(node string) (api.ControlHeartbeat, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[node]
	return c.beats[node], at, ok
}

// heartbeatLoop reports this control node to the leader, every control node alike.
func (d *Daemon) heartbeatLoop(ctx context.Context) error {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	beat := func(stopping bool) {
		role := api.RaftVoter
		if d.raft.IsLeader() {
			role = api.RaftLeader
		}
		leaf, ca := d.certs.notAfter()
		data, _ := json.Marshal(api.ControlHeartbeat{V: api.ProtocolVersion, Node: d.cfg.Node, AppliedIndex: d.raft.AppliedIndex(), Raft: role,
			CAKey: d.holdsCAKey(), Hosts: d.hostCapacity(), Stopping: stopping, Rules: state.ApplyRules, Clock: d.now().UTC(),
			LogWriteFailing: d.raft.LogWriteError() != nil, RaftState: d.raft.State(), Leader: d.raft.Leader(), Term: d.raft.Status().Term,
			CertNotAfter: leaf, CANotAfter: ca, RaftConfig: d.raft.ConfigurationText()})
		_ = d.conns.control.Publish(api.ControlHeartbeatSubject(d.cfg.Node), data)
		if role == api.RaftLeader && !stopping {
			select {
			case d.autopilotDue <- struct{}{}:
			default: // a round is due already
			}
			d.handOverIfClockOff(d.now())
		}
	}
	for {
		beat(false)
		select {
		case <-ctx.Done():
			// The others show this node offline now, not a few seconds after it
			// stopped (a rolling restart waits for it to be alive again).
			beat(true)
			_ = d.conns.control.FlushTimeout(500 * time.Millisecond)
			return ctx.Err()
		case <-t.C:
		}
	}
}

// operatorSweepLoop asks the effects actor, every operatorSweepEvery, to close the
// connections this node's broker still holds with operator credentials revoked by
// name or of removed control nodes: the kick at the change's apply misses those of
// a node that caught up from a snapshot (no apply runs there), and a login checked
// just before the apply that joins its account just after the kick's listing.
func (d *Daemon) operatorSweepLoop(ctx context.Context) error {
	t := time.NewTicker(d.opts.operatorSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			d.effects.push(effect{kind: effectOperatorsRevoked})
			d.effects.push(effect{kind: effectOperatorsRemoved})
		}
	}
}

func (d *Daemon) handleHeartbeat(m *nats.Msg) {
	if len(m.Data) > api.MaxControlHeartbeat {
		d.guard.drop("heartbeat", ReasonTooLarge, m.Subject, fmt.Sprintf("%d bytes, over %d", len(m.Data), api.MaxControlHeartbeat))
		return
	}
	var h api.ControlHeartbeat
	if err := json.Unmarshal(m.Data, &h); err != nil || h.V != api.ProtocolVersion || api.ControlHeartbeatSubject(h.Node) != m.Subject {
		d.guard.drop("heartbeat", ReasonMalformed, m.Subject, "not a heartbeat of this protocol version from the node its subject names")
		return
	}
	now := d.now()
	d.ctl.heard(h, now, d.raft.AppliedIndex(), d.raft.Leader())
	if h.Node != d.cfg.Node {
		d.ctl.checkClock(d.log, h.Node, h.Clock, now)
		d.checkRules(h, now)
	}
}

// checkRules reports a control node that announces rules older than those the
// state was built by (State.Rules, the newest any entry applied was stamped
// with): it cannot have built that state, so it serves one it applied otherwise
// or loaded from a snapshot it cannot read whole; an older meshctl put back after
// an upgrade, which nothing else notices once a snapshot holds the newer entries.
// Its state parts from the others' for good: it is removed and joined again.
func (d *Daemon) checkRules(h api.ControlHeartbeat, now time.Time) {
	if h.Stopping {
		return
	}
	var built int
	d.fsm.Read(func(s *state.State) { built = s.Rules })
	announced := max(h.Rules, 1) // versions before the announcement apply rules 1
	if announced >= built {
		return
	}
	const msg = "a control node applies the log by rules older than those the mesh's state was built by: an older meshctl was put back on it after an upgrade, and its state parts from the others'. " +
		"Put the newer meshctl back on it at once; if it served with the older one after a snapshot held newer entries, remove it (meshctl control remove) and join it again into an empty data directory"
	if d.ctl.due(h.Node+"\x00rules", now, silenceReport) {
		d.log.Error(msg, "node", h.Node, "its_rules", announced, "state_rules", built)
	}
}

// hostCapacity is how many hosts this node's broker holds, and the most it holds.
func (d *Daemon) hostCapacity() *api.HostCapacity {
	return &api.HostCapacity{Connected: d.broker.Hosts(), Max: d.broker.Capacity().MaxHosts}
}

// holdsCAKey reports whether this node's data directory holds the keys a control
// token is minted with (join.Mint).
func (d *Daemon) holdsCAKey() bool {
	return d.opts.Dir.Exists(datadir.CAKeyFile) && d.opts.Dir.Exists(datadir.AccountKeyFile)
}

// admitControl answers a joining control node: the identity sealed when its token was
// minted (controlIdentity), and the signing key sealed now to the curve key it
// presented.
func (d *Daemon) admitControl(req api.EnrolRequest, identity []byte, cn *state.ControlNode) (*api.ControlAdmission, error) {
	if req.CurveKey == "" {
		return nil, errors.New("a joining control node must present a curve key")
	}
	keys, err := d.keysToHandOver()
	if err != nil {
		return nil, err
	}
	keyPEM, err := datadir.EncodeSigningKeys(keys)
	if err != nil {
		return nil, err
	}
	sealedKey, sealer, err := seal.ToCurveKey(keyPEM, req.CurveKey)
	if err != nil {
		return nil, fmt.Errorf("seal the signing key: %w", err)
	}
	adm := &api.ControlAdmission{SigningKey: sealedKey, Sealer: sealer, Sealed: identity,
		Self: api.ControlMember{ID: cn.ID, Broker: cn.Broker, Raft: cn.Raft, Cluster: cn.Cluster}}
	d.fsm.Read(func(s *state.State) {
		adm.AdminAccount, adm.CAHolder = s.AdminAccount, s.BootstrapCAHolder()
		for _, m := range s.ActiveControlNodes() {
			if m.ID != cn.ID {
				adm.Members = append(adm.Members, api.ControlMember{ID: m.ID, Broker: m.Broker, Raft: m.Raft, Cluster: m.Cluster})
			}
		}
	})
	if len(adm.Sealed) == 0 {
		return nil, errors.New("the control token's sealed identity is missing from the state")
	}
	return adm, nil
}

// errKeysNotHeld: this node, leading, does not hold every signing key of the
// committed keyring, so a control node admitted now would be handed fewer keys
// than the keyring lists, and none of a rotation it was not sealed to.
var errKeysNotHeld = errors.New("this control node does not hold every signing key of the mesh's keyring yet")

// keysToHandOver returns the signing keys an admission hands its joiner: every key
// of the committed keyring, which this node holds once it synced them (syncKeys).
// It waits for a rotation in progress (keyringMu), which did not seal the new key
// to the joiner; and it syncs first, since a leader that took over after a rotation
// committed syncs asynchronously (the effects actor), and an admission before it
// handed the old key alone: after the retire, the joiner held none (a review).
func (d *Daemon) keysToHandOver() ([]ed25519.PrivateKey, error) {
	d.keyringMu.Lock()
	defer d.keyringMu.Unlock()
	if err := d.syncKeys(); err != nil {
		return nil, err
	}
	keys := d.signer.currentKeys()
	var want []string
	d.fsm.Read(func(s *state.State) { want = slices.Clone(s.Keyring.Keys) })
	for _, k := range want {
		if !slices.ContainsFunc(keys, func(p ed25519.PrivateKey) bool { return hex.EncodeToString(p.Public().(ed25519.PublicKey)) == k }) {
			return nil, fmt.Errorf("%w (it lacks %s…): run the join again in a minute; if it goes on, another control node may hold it (meshctl control status)", errKeysNotHeld, k[:min(12, len(k))])
		}
	}
	return keys, nil
}

// enrolRules is what an enrolment of node in role is stamped with: admissionRules,
// and RulesForgetRevoked under a forgotten id, whose versions go on from the
// forgotten record's: a control node put back to an older meshctl since, which
// ignored the forgotten records of the snapshot it started from, would start them
// over; it stops at the entry instead.
func (d *Daemon) enrolRules(role, node string) int {
	rules := d.admissionRules(role)
	var forgotten bool
	d.fsm.Read(func(s *state.State) { _, forgotten = s.Forgotten[node] })
	if forgotten {
		rules = max(rules, state.RulesForgetRevoked)
	}
	return rules
}

// admissionRules is the rules an enrolment of role is stamped with: for a control
// node, RulesBrokersWhenServing once every other member of Raft is known to apply
// the log by them (rulesFor), so that the node is listed to hosts only once it
// serves; 0 otherwise (a worker, or a control node while one on older rules may
// run), and the node is listed from its admission on, as those rules list it: a
// control node of the older version would otherwise sign another list of brokers
// under the same membership version (decision 0035).
func (d *Daemon) admissionRules(role string) int {
	if role != state.RoleControl {
		return 0
	}
	return d.rulesFor(state.RulesBrokersWhenServing)
}

// listServing lists to hosts the broker of cn, a control node admitted and never
// heard serving until now (state.ControlServingCmd), and reports whether it did.
func (d *Daemon) listServing(cn state.ControlNode) bool {
	res, err := d.commit(state.Command{Op: state.OpControlServing, Rules: state.RulesBrokersWhenServing,
		ControlServing: &state.ControlServingCmd{Node: cn.ID, JoinedAt: cn.JoinedAt}})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		d.log.Warn("a control node serves and its broker is not listed to hosts yet; will try again", "node", cn.ID, "err", err)
		return false
	}
	if !res.Repeated {
		d.log.Info("control node heard serving: its broker is listed to hosts", "node", cn.ID, "broker", cn.Broker)
	}
	return true
}

func activeControl(d *Daemon, node string) (state.ControlNode, error) {
	var (
		cn state.ControlNode
		ok bool
	)
	removed := false
	d.fsm.Read(func(s *state.State) {
		if c, found := s.ControlNodes[node]; found {
			cn, ok, removed = *c, !c.Removed, c.Removed
		}
	})
	if removed {
		return state.ControlNode{}, &api.Error{Code: api.CodeNotFound, Message: "control node " + node + " was removed (meshctl control remove): to have it back, mint a new control token for it and run meshctl join with that"}
	}
	if !ok {
		return cn, &api.Error{Code: api.CodeNotFound, Message: "no admitted control node " + node + " (mint a control token and run meshctl join first)"}
	}
	return cn, nil
}

// controlAdd makes an admitted control node a Raft nonvoter and appends a probe entry
// whose id it can only learn by replicating the log.
func (d *Daemon) controlAdd(req api.ControlRequest) (api.ControlAddResult, error) {
	var out api.ControlAddResult
	cn, err := activeControl(d, req.Node)
	if err != nil {
		return out, err
	}
	members, err := d.raft.Members()
	if err != nil {
		return out, err
	}
	idx := slices.IndexFunc(members, func(m replication.Member) bool { return m.ID == cn.ID })
	if idx < 0 {
		// Another member at its Raft address (two control tokens minted for the
		// same addresses before the mint refused that): Raft refuses it as a
		// "duplicate address", and the join said to run it again, for ever (a
		// docs walkthrough). Said as what it is, with the way out.
		if m := slices.IndexFunc(members, func(m replication.Member) bool { return m.Address == cn.Raft }); m >= 0 {
			// A node removed from the roster whose Raft change did not finish
			// (raftRemoveError) still holds the address: finishing its removal is the
			// way out, not removing the node admitted there since (a review).
			var gone bool
			d.fsm.Read(func(s *state.State) {
				if c, ok := s.ControlNodes[members[m].ID]; ok {
					gone = c.Removed
				}
			})
			if gone {
				return out, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("%s was admitted at Raft address %s, which %s still holds in Raft: %s was removed (meshctl control remove), but its removal from Raft did not finish. "+
					"Finish it (meshctl control remove %s), then run the same meshctl join again to resume",
					cn.ID, cn.Raft, members[m].ID, members[m].ID, members[m].ID)}
			}
			return out, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("%s was admitted at Raft address %s, where %s, a member, is: it cannot join there, and running the join again will not change that. "+
				"Remove it (meshctl control remove %s), then mint its control token again at addresses of its own (meshctl token --role control --node %s --addr IP:PORT) and join with that on a fresh data directory",
				cn.ID, cn.Raft, members[m].ID, cn.ID, cn.ID)}
		}
		if err := d.raft.AddNonvoter(cn.ID, cn.Raft, commitTimeout); err != nil {
			return out, &api.Error{Code: api.CodeUnavailable, Message: "add " + cn.ID + " as a nonvoter: " + err.Error()}
		}
		d.log.Info("control node added as a Raft nonvoter; waiting for it to prove it replicates", "node", cn.ID, "raft", cn.Raft)
	}
	probe := make([]byte, 16)
	rand.Read(probe)
	id := hex.EncodeToString(probe)
	d.ctl.mu.Lock()
	d.ctl.probes[cn.ID] = id
	d.ctl.mu.Unlock()
	index, err := d.raft.ApplyIndex(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: id, Node: cn.ID}}, commitTimeout)
	if err != nil {
		return out, &api.Error{Code: api.CodeUnavailable, Message: "append the probe entry: " + err.Error()}
	}
	out.ProbeIndex = index
	return out, nil
}

// controlConfirm checks the joiner's proof of replication. It does not promote: a
// joined node stays a confirmed nonvoter until its `meshctl serve` runs and has
// caught up, and the leader's autopilot promotes it then (see promoteServing).
func (d *Daemon) controlConfirm(req api.ControlConfirmRequest) (api.ControlConfirmResult, error) {
	var out api.ControlConfirmResult
	cn, err := activeControl(d, req.Node)
	if err != nil {
		return out, err
	}
	// The probe this leader appended, if it did (control.add), or the one the log
	// committed last for the node, which its record holds on every control node: a
	// leader that took over since control.add, or whose serve restarted, holds no
	// probe in memory (or one of an earlier join of the node), and refused a joiner
	// that had applied the committed probe as not replicating. Either id reached the
	// joiner only by the log (decision 0005).
	d.ctl.mu.Lock()
	appended := d.ctl.probes[cn.ID]
	d.ctl.mu.Unlock()
	named := func(id string) bool { return id != "" && slices.Contains(req.Probes, id) }
	if !named(appended) && !named(cn.Probe) {
		return out, &api.Error{Code: api.CodeBadRequest, Message: cn.ID + " has not applied its probe entry: it is not replicating the log"}
	}
	members, err := d.raft.Members()
	if err != nil {
		return out, err
	}
	for _, m := range members {
		if m.Voter {
			out.Voters = append(out.Voters, m.ID)
		}
		if m.ID == cn.ID && m.Voter {
			out.Voter = true
		}
	}
	if !out.Voter {
		out.Note = fmt.Sprintf("%s replicates; it becomes a voter once `meshctl serve` runs on it and has caught up, as long as the voters stay an odd number (two voters stop when either stops)", cn.ID)
	}
	d.log.Info("control node confirmed", "node", cn.ID, "voter", out.Voter, "voters", out.Voters)
	return out, nil
}

// autopilotLoop runs promoteServing each time the leader's heartbeat asks for it
// (autopilotDue), as an operator's change does: one at a time with them (adminMu).
// It reads the members, then promotes or demotes by what it read, and run beside
// them a `control remove` committed in between had the node it removed added back
// as a voter, one that never answers (a review). In a goroutine of its own, the
// heartbeat never waits on an operator; and it waits its turn rather than skip it,
// which under a stream of changes (a fleet's tokens minted) promoted nobody.
func (d *Daemon) autopilotLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-d.autopilotDue:
			d.autopilot(ctx)
		}
	}
}

// autopilot is one round of autopilotLoop, while this node leads and serves: not
// once it stops (its turn may come after), nor while it cannot write its Raft log,
// since a membership change has no time limit and would hold every operator's
// change behind it.
func (d *Daemon) autopilot(ctx context.Context) {
	d.adminMu.Lock()
	defer d.adminMu.Unlock()
	if ctx.Err() == nil && d.raft.IsLeader() && d.raft.LogWriteError() == nil {
		now := d.now()
		d.promoteServing(now)
		d.spreadConfiguration(now)
	}
}

// Configurations held apart: a member whose heartbeats show another Raft
// configuration than the leader's for configStaleAfter, caught up with the log,
// holds a stale one (a change in flight reaches every member within a commit); the
// leader appends its own again, at most once every configSpreadEvery.
const (
	configStaleAfter  = 10 * time.Second
	configSpreadEvery = 30 * time.Second
)

// spreadConfiguration is the leader's autopilot for members that hold another
// Raft configuration than its own, long after any change (replication.Node.
// SpreadConfiguration says how one comes to): it appends its configuration again,
// which they take as they append it. Before, such a member kept it until the next
// membership change: a rejoined voter that held one in which it did not vote
// refused every vote once the leader was lost, and the control plane had no
// leader with two of three voters up (a walkthrough). Called under adminMu.
func (d *Daemon) spreadConfiguration(now time.Time) {
	own := d.raft.ConfigurationText()
	members, err := d.raft.Members()
	if own == "" || err != nil {
		return
	}
	// Who was seen apart is forgotten when this node's configuration or term
	// changes: a member apart from an earlier one, or from another leader, is not
	// apart from this one (a review).
	if key := fmt.Sprintf("%s#%d", own, d.raft.Status().Term); key != d.configApartKey {
		clear(d.configApart)
		d.configApartKey = key
	}
	applied := d.raft.AppliedIndex()
	ids := make([]string, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	kept, removed := map[string]bool{}, map[string]bool{}
	d.fsm.Read(func(s *state.State) {
		for _, n := range s.ControlNodes {
			removed[n.ID] = n.Removed
			kept[n.ID] = !n.Removed && !n.NeverServed
		}
	})
	stale, newer, ghosts := configsApart(configView{self: d.cfg.Node, own: own, now: now, members: ids, apart: d.configApart,
		last:     d.ctl.last,
		caughtUp: func(id string) bool { return d.ctl.caughtUp(id, applied) },
		alive:    func(id string) bool { return d.ctl.alive(id, now) },
		kept:     func(id string) bool { return kept[id] },
		removed:  func(id string) bool { return removed[id] }})
	if len(stale) == 0 || now.Sub(d.configSpread) < configSpreadEvery {
		return
	}
	d.configSpread = now
	if len(newer) > 0 || len(ghosts) > 0 {
		d.log.Warn("control nodes hold another Raft configuration than the leader's, and the leader's leaves out control nodes of the mesh that theirs list, or lists removed ones: the leader's may be the stale one, and is not appended again; "+
			"if a removal of a listed node did not finish (meshctl control remove said not from Raft yet), run it again; otherwise restart this control node's serve (it reads its configuration again from its log), and another leads meanwhile",
			"nodes", clipText(strings.Join(stale, "; "), 2048), "not_in_leader_configuration", strings.Join(newer, ","), "removed_in_leader_configuration", strings.Join(ghosts, ","),
			"leader_configuration", clipText(own, 2048))
		return
	}
	d.log.Warn("control nodes hold another Raft configuration than the leader's, though they follow its log (a snapshot installed over newer entries, or a recovery's peers file not given to them): the leader appends its configuration again for them to take",
		"nodes", clipText(strings.Join(stale, "; "), 2048), "leader_configuration", clipText(own, 2048))
	if err := d.raft.SpreadConfiguration(commitTimeout); err != nil {
		d.log.Warn("the Raft configuration was not appended again; the leader tries again", "err", err)
	}
}

// configView is what configsApart judges: this leader (self), the configuration it
// holds (own, replication.Node.ConfigurationText), the members of it, their last
// heartbeats, and when each was first seen apart (updated in place); alive, kept
// and removed say of a control node whether it serves now, whether the replicated
// state keeps it (admitted, not removed, and it served once), and whether the state
// marks it removed.
type configView struct {
	self, own string
	now       time.Time
	members   []string
	apart     map[string]time.Time
	last      func(id string) (api.ControlHeartbeat, time.Time, bool)
	caughtUp  func(id string) bool
	alive     func(id string) bool
	kept      func(id string) bool
	removed   func(id string) bool
}

// heardSinceStart reports whether this node heard id since its serve started: a
// leader holds a stale configuration only while it runs (a restart reads its log
// again), so a control node it heard, stopped since for however long (a rolling
// restart, a long maintenance), is a member, and one it never heard may be one a
// lost quorum took (the recovered leader restarted with the peers file). A window
// of 10 minutes dropped a voter stopped for longer from Raft for good (a review).
func (v configView) heardSinceStart(id string) bool {
	_, _, ok := v.last(id)
	return ok
}

// configsApart returns the members that have held another configuration than the
// leader's for configStaleAfter while they follow it, caught up (stale: each with
// its configuration); then, when there are such, what says the stale configuration
// may be the leader's: the control nodes which their configurations list and the
// leader's leaves out that serve, or that the state keeps and this leader heard
// since it started (newer: one stopped for a while, in a rolling restart or a
// maintenance), and the control nodes the leader's lists that the state marks removed
// (ghosts). Appending the leader's then would drop a voter from Raft for good, or
// make a removed node, whose connections are refused, every member's voter (a
// review). Nodes this leader never heard do not count: those a lost quorum took,
// which a survivor not given the peers file still lists, and which are removed later.
func configsApart(v configView) (stale, newer, ghosts []string) {
	ownIDs := replication.ConfigurationIDs(v.own)
	for _, id := range v.members {
		if id == v.self {
			continue
		}
		hb, at, heard := v.last(id)
		// Judged only when it follows this leader, caught up, in this version's
		// words: one cut from Raft is told nothing by an entry it does not get.
		if !heard || v.now.Sub(at) > 3*HeartbeatInterval || hb.RaftConfig == v.own || hb.Leader != v.self ||
			replication.ConfigurationIDs(hb.RaftConfig) == nil || !v.caughtUp(id) {
			delete(v.apart, id)
			continue
		}
		since, ok := v.apart[id]
		if !ok {
			v.apart[id] = v.now
			continue
		}
		if v.now.Sub(since) < configStaleAfter {
			continue
		}
		stale = append(stale, id+" ("+hb.RaftConfig+")")
		// A control node the member's configuration lists, and this leader's
		// does not, that serves: the stale configuration may be this leader's
		// (hashicorp/raft keeps an installed snapshot's until the next entry or
		// a restart), and appending it would drop that node from Raft (a review).
		for _, other := range replication.ConfigurationIDs(hb.RaftConfig) {
			if !slices.Contains(ownIDs, other) && other != v.self && !slices.Contains(newer, other) && (v.alive(other) || v.kept(other) && v.heardSinceStart(other)) {
				newer = append(newer, other)
			}
		}
	}
	if len(stale) > 0 {
		for _, id := range ownIDs {
			if v.removed(id) && !slices.Contains(ghosts, id) {
				ghosts = append(ghosts, id)
			}
		}
	}
	slices.Sort(newer)
	slices.Sort(ghosts)
	return stale, newer, ghosts
}

// promoteServing is the leader's autopilot: it promotes the nonvoters that serve (a
// control node's heartbeat comes from its `meshctl serve`) and have caught up with the
// log, keeping the number of voters odd, and reports the members that stopped
// answering. A node that joined but does not run yet stays a nonvoter, so it never
// counts towards a quorum it cannot take part in.
//
// First, a member of Raft heard serving for the first time since its admission
// (state.ControlNode.NeverServed) is listed to hosts (listServing), before it can be
// promoted: until then hosts, tokens and mesh.json do not name a broker nobody
// answers at (an interrupted or rolled-back join, or one whose serve has not
// started). A node admitted and not in Raft (its join rolled back) is never listed.
//
// An even number of voters with no nonvoter to promote (one of three removed, or a
// recovery that listed two or four) is made odd by demoting one: two voters stop
// the control plane when either stops, one voter only when it does. The demoted
// node keeps the log as a serving nonvoter and is promoted again with the next node
// that serves. It returns the node it demoted, if any.
func (d *Daemon) promoteServing(now time.Time) (demoted string) {
	members, err := d.raft.Members()
	if err != nil {
		return ""
	}
	applied := d.raft.AppliedIndex()
	voters := 0
	var candidates, others []state.ControlNode
	for _, m := range members {
		if m.ID == d.cfg.Node {
			if m.Voter {
				voters++
			}
			// Leading, this node serves (a recovery may have made a node that
			// never served the leader).
			if cn, err := activeControl(d, m.ID); err == nil && cn.NeverServed && !d.listServing(cn) {
				return ""
			}
			continue
		}
		_, at, heard := d.ctl.last(m.ID)
		serving := d.ctl.alive(m.ID, now)
		if !serving {
			d.ctl.reportSilent(d.log, m.ID, m.Voter, at, heard, now)
		} else {
			d.ctl.reportNotFollowing(d.log, m.ID, m.Voter, now)
		}
		cn, err := activeControl(d, m.ID)
		if err == nil && serving && cn.NeverServed {
			if !d.listServing(cn) {
				return "" // nothing promoted before it is listed
			}
			cn.NeverServed = false
		}
		if m.Voter {
			voters++
			if err == nil {
				others = append(others, cn)
			}
			continue
		}
		// Not promoted while its heartbeats show it astray: its vote would count
		// towards a quorum it does not take part in.
		if err != nil || !d.ctl.serving(m.ID, now) || !d.ctl.caughtUp(m.ID, applied) {
			continue
		}
		candidates = append(candidates, cn)
	}
	if voters%2 == 0 && voters >= 2 && len(candidates) == 0 {
		return d.demoteOne(others, now)
	}
	slices.SortFunc(candidates, func(a, b state.ControlNode) int { return a.JoinedAt.Compare(b.JoinedAt) })
	if (voters+len(candidates))%2 == 0 && len(candidates) > 0 {
		candidates = candidates[:len(candidates)-1] // keep the voter count odd
	}
	for _, c := range candidates {
		if err := d.raft.Promote(c.ID, c.Raft, commitTimeout); err != nil {
			d.log.Warn("control node not promoted; will try again", "node", c.ID, "err", err)
			return ""
		}
		d.log.Info("control node promoted to voter: it serves and has caught up", "node", c.ID)
	}
	return ""
}

// handOverIfClockOff has the leader hand leadership to another voter when its own
// clock is the one off the others' (clockHandover decides): while it leads, hosts
// refuse what it stamps more than an hour ahead of their clocks (not_yet_valid) and
// the tokens it mints when behind expire early, until someone fixes its clock. The
// other voters agreeing with each other, a leader with a right clock takes over and
// the mesh's stamps are right again at once; this node stays a voter.
func (d *Daemon) handOverIfClockOff(now time.Time) {
	members, err := d.raft.Members()
	if err != nil {
		return
	}
	var voters []string
	addrs := map[string]string{}
	for _, m := range members {
		if m.Voter && m.ID != d.cfg.Node {
			voters = append(voters, m.ID)
			addrs[m.ID] = m.Address
		}
	}
	h, ok := d.ctl.clockHandover(voters, d.raft.AppliedIndex(), now)
	if !ok {
		return
	}
	d.ctl.noteHandover(now)
	nodes := make([]string, 0, len(h.clocks))
	for node := range h.clocks {
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	var theirs []string
	var off time.Duration
	for _, node := range nodes {
		theirs = append(theirs, node+" "+h.clocks[node].UTC().Format(time.RFC3339))
		off = h.off[node] // any: they agree within the tolerance
	}
	dir, by := "ahead_by", -off
	if off > 0 {
		dir, by = "behind_by", off
	}
	d.log.Warn("this control node leads with a clock off every other voter's, and theirs agree: it hands leadership to one of them (hosts refuse what a leader stamps more than an hour ahead of their clocks, and the tokens a leader behind mints expire early); fix NTP on this machine (`date -u` here and on the others)",
		"this_clock", now.UTC().Format(time.RFC3339), dir, by.String(), "other_clocks", strings.Join(theirs, ", "), "to", h.target)
	if err := d.raft.TransferLeadership(h.target, addrs[h.target]); err != nil {
		d.log.Warn("leadership not handed over; this node tries again in 5 minutes while its clock stays off", "to", h.target, "err", err)
		return
	}
	d.log.Info("leadership handed over", "to", h.target)
}

// demoteOne demotes one of the voters other than this (the leader): one that does
// not serve if there is one, else the one that joined last.
func (d *Daemon) demoteOne(voters []state.ControlNode, now time.Time) string {
	if len(voters) == 0 {
		return ""
	}
	slices.SortFunc(voters, func(a, b state.ControlNode) int {
		if sa, sb := d.ctl.serving(a.ID, now), d.ctl.serving(b.ID, now); sa != sb {
			if !sa {
				return -1
			}
			return 1
		}
		return b.JoinedAt.Compare(a.JoinedAt)
	})
	v := voters[0]
	if err := d.raft.Demote(v.ID, commitTimeout); err != nil {
		d.log.Warn("control node not demoted to keep the voters odd; will try again", "node", v.ID, "err", err)
		return ""
	}
	d.log.Warn("control node demoted to nonvoter: the voters were an even number, and two voters stop when either stops", "node", v.ID)
	return v.ID
}

// controlAbort rolls back a join that could not be confirmed: the node leaves the Raft
// configuration; its admission stays, so the same token can run the join again.
func (d *Daemon) controlAbort(req api.ControlRequest) (struct{}, error) {
	members, err := d.raft.Members()
	if err != nil {
		return struct{}{}, err
	}
	for _, m := range members {
		if m.ID == req.Node {
			if m.Voter {
				return struct{}{}, &api.Error{Code: api.CodeBadRequest, Message: req.Node + " is a voter; use meshctl control remove"}
			}
			if err := d.raft.Remove(req.Node, commitTimeout); err != nil {
				return struct{}{}, &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
			}
		}
	}
	d.log.Warn("join rolled back", "node", req.Node)
	return struct{}{}, nil
}

// controlRemove takes a control node out of Raft and of the control plane for good.
// Run again it finishes a removal that stopped half way (out of the roster, still in
// Raft, the leader having changed meanwhile), and says when nothing is left to do.
func (d *Daemon) controlRemove(req api.ControlRequest) (api.ControlRemoveResult, error) {
	var out api.ControlRemoveResult
	var known, removed bool
	var joined, removedAt time.Time
	read := func() {
		d.fsm.Read(func(s *state.State) {
			if c, ok := s.ControlNodes[req.Node]; ok {
				known, removed, joined, removedAt = true, c.Removed, c.JoinedAt, c.RemovedAt
			}
		})
	}
	if read(); !known {
		res, err := d.cancelNeverAdmitted(req.Node)
		if err != nil || len(res.CancelledTokens) > 0 {
			return res, err
		}
		// Nothing was cancelled: the token admitted its node as the
		// cancellation was proposed (it is used, not pending). The node is a
		// member now, and is removed as one.
		if read(); !known {
			return out, &api.Error{Code: api.CodeNotFound, Message: "no control node " + req.Node + " was ever admitted, and its control token was pending no more when the cancellation applied (used, cancelled or expired meanwhile): look (meshctl token list --node " + req.Node + ", meshctl nodes)"}
		}
	}
	members, err := d.raft.Members()
	if err != nil {
		return out, err
	}
	if req.Node == d.cfg.Node {
		// Stopping the leader hands over only to another voter: with none (a mesh
		// of one control node being moved, its new node a nonvoter while the
		// voters stay odd), stopping it leaves no leader to remove it.
		if !slices.ContainsFunc(members, func(m replication.Member) bool { return m.Voter && m.ID != req.Node }) {
			return out, &api.Error{Code: api.CodeBadRequest, Message: req.Node + " is the leader answering this request and the only voter: " +
				"stopped, no other control node can take over (a second one stays a nonvoter while the voters would be even). " +
				"Make three voters first: join and serve control nodes until meshctl nodes shows three voters; then stop " + req.Node +
				" (meshctl serve ends on SIGTERM) and remove it from another control node"}
		}
		return out, &api.Error{Code: api.CodeBadRequest, Message: req.Node + " is the leader answering this request; stop it (meshctl serve ends on SIGTERM; another control node takes over), then remove it from another control node"}
	}
	inRaft := slices.ContainsFunc(members, func(m replication.Member) bool { return m.ID == req.Node })
	if removed && !inRaft {
		// The advice holds as it did at the removal: the caller may be a second
		// operator, or a rerun of a command whose answer was lost.
		out.AlreadyRemoved = true
		out.PendingTokens = d.pendingTokenNodes(joined, removedAt)
		return out, nil
	}
	voters := 0
	for _, m := range members {
		if m.Voter && m.ID != req.Node {
			voters++
		}
	}
	if voters == 0 {
		return out, &api.Error{Code: api.CodeBadRequest, Message: "removing " + req.Node + " would leave no voter"}
	}
	// The configuration left must have a quorum that serves, or the leader steps
	// down as it takes the node out and none can be elected until the silent
	// voters return: one of three voters removed while another was down stopped
	// the control plane, the removed node shut out for good. A voter that does not
	// serve is demoted first, which commits with the quorum as it is.
	now := d.now()
	plan := planRemoval(members, req.Node, d.cfg.Node, func(id string) bool { return id == d.cfg.Node || d.ctl.serving(id, now) })
	if plan.blind {
		return out, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
			"%s, which leads, counts %d of the %d voters serving (%s send no heartbeat, or do not follow it): it cannot tell whether the voters left after removing %s would be a quorum that serves, "+
				"and nothing was removed. Start the voters that do not serve, or mend those that do not follow (meshctl control status names them), or, if they serve, run this again in a few seconds",
			d.cfg.Node, plan.servingVoters, plan.voters, strings.Join(plan.silent, ", "), req.Node)}
	}
	for _, id := range plan.demote {
		if err := d.raft.Demote(id, commitTimeout); err != nil {
			msg := fmt.Sprintf("%s does not serve and must be made a nonvoter before %s is removed (the voters left would otherwise not be a quorum that serves, and the control plane would stop), but that failed: %v; nothing was removed. ",
				id, req.Node, err)
			if errors.Is(err, replication.ErrLeadershipLost) {
				msg += "Run meshctl control status: if it names a leader, run this again; if it has none, start the voters it says do not answer"
			} else {
				msg += "Start " + id + ", or run this again"
			}
			return out, &api.Error{Code: api.CodeUnavailable, Message: msg}
		}
		d.log.Warn("control node demoted to nonvoter before another's removal: it does not serve, and the voters left would not have been a quorum that serves",
			"node", id, "removing", req.Node)
		out.Demoted, out.DemotedNotServing = id, true
	}
	if !removed {
		res, err := d.commit(state.Command{Op: state.OpRemoveControl, RemoveControl: &state.RemoveControlCmd{Node: req.Node}})
		if err != nil {
			return out, err
		}
		if res.Err != nil {
			return out, refusal(res.Err)
		}
	}
	if inRaft {
		if err := d.raft.Remove(req.Node, commitTimeout); err != nil {
			return out, raftRemoveError(req.Node, d.cfg.Node, err)
		}
	}
	d.log.Warn("control node removed", "node", req.Node)
	if demoted := d.promoteServing(d.now()); out.Demoted == "" {
		out.Demoted = demoted
	}
	// A removal finished on a rerun (the roster committed, the Raft change not):
	// tokens minted since the first run list the mesh as it was then (a review).
	until := time.Time{}
	if removed {
		until = removedAt
	}
	out.PendingTokens = d.pendingTokenNodes(joined, until)
	return out, nil
}

// raftRemoveError is the answer to a removal committed to the roster whose change of
// the Raft configuration failed (err, from replication.Node.Remove), on self. Running
// the command again finishes it once a leader serves; a leadership lost with the
// change appended may have left none, and the command run again then only waits.
func raftRemoveError(node, self string, err error) *api.Error {
	msg := node + " is removed from the roster (it stops if it runs), but not from Raft yet: "
	switch {
	case errors.Is(err, replication.ErrLeadershipLost):
		msg += self + " lost its leadership while taking it out (" + err.Error() + "): a new leader may finish that change or drop it, and until one is elected the control plane has none. " +
			"Run meshctl control status: if it names a leader, run this command again to finish the removal; if it has none, start the voters it says do not answer"
	case errors.Is(err, replication.ErrNotAppended):
		msg += "the leadership changed before the change reached Raft (" + err.Error() + "); run the same command again to finish"
	default:
		msg += err.Error() + "; run the same command again to finish"
	}
	return &api.Error{Code: api.CodeUnavailable, Message: msg}
}

// removalPlan is what removing a control node needs first (planRemoval).
type removalPlan struct {
	// demote are the voters, none serving, to make nonvoters before the removal.
	demote []string
	// silent are the voters that do not serve, sorted.
	silent []string
	// blind: the voters that serve are not a quorum of the configuration as it is,
	// by the heartbeats heard (a leader that just took over, or heartbeats that do
	// not reach it); voters and servingVoters count them.
	blind                 bool
	voters, servingVoters int
}

// planRemoval decides, on the leader self, what must happen before target leaves the
// Raft configuration members: the voters left must be a quorum that serves (serving
// reports whether a voter does: the leader, and the nodes whose heartbeats say so),
// or the leader steps down as it commits the change and none can be elected until
// the voters that do not serve come back. Voters that do not serve are demoted until
// the serving ones are more than half of those left; each demotion commits with the
// serving voters as they are, and, the configuration having a quorum that serves,
// one always suffices. The leader is never demoted.
func planRemoval(members []replication.Member, target, self string, serving func(string) bool) removalPlan {
	var p removalPlan
	left, servingLeft := 0, 0
	var candidates []string
	for _, m := range members {
		if !m.Voter {
			continue
		}
		up := serving(m.ID)
		p.voters++
		if up {
			p.servingVoters++
		} else {
			p.silent = append(p.silent, m.ID)
		}
		if m.ID == target {
			continue
		}
		left++
		if up {
			servingLeft++
		} else if m.ID != self {
			candidates = append(candidates, m.ID)
		}
	}
	slices.Sort(p.silent)
	slices.Sort(candidates)
	if 2*p.servingVoters <= p.voters {
		p.blind = true
		return p
	}
	for _, id := range candidates {
		if 2*servingLeft > left {
			break
		}
		p.demote = append(p.demote, id)
		left--
	}
	return p
}

// cancelNeverAdmitted answers `control remove` of a node no control node was ever
// admitted as: its pending control tokens are cancelled, by name, in one command
// (CancelTokensCmd, as `token cancel NODE ID...` sends it), so that none admits a
// machine, which would receive the signing key, after the operator gave it up. Before,
// the command said "never admitted" (not_found) and left the token able to admit one
// for up to an hour: an operator giving up on a join that had not reached its
// admission, or a join being retried, believed it stopped. A token that admits its
// node while the cancellation is proposed is used, not pending, so the two cannot
// both happen: the result then cancels nothing, and the caller removes the node
// admitted. With no control token pending, the answer stays not_found, and says
// where the node's tokens are seen.
func (d *Daemon) cancelNeverAdmitted(node string) (api.ControlRemoveResult, error) {
	out := api.ControlRemoveResult{}
	now := d.now()
	var pending []string
	var worker, last string // a pending worker token's id; the newest control token's, and what became of it
	var lastAt time.Time
	host, hostRevoked := false, false // an enrolled host under the id
	d.fsm.Read(func(s *state.State) {
		if n, ok := s.Nodes[node]; ok {
			host, hostRevoked = true, n.Revoked
		}
		for _, t := range s.Tokens {
			if t.Node != node {
				continue
			}
			switch {
			case t.Role == state.RoleControl && t.StateAt(now) == state.TokenPending:
				pending = append(pending, t.ShortID())
			case t.StateAt(now) == state.TokenPending:
				worker = t.ShortID()
			case t.Role == state.RoleControl && (last == "" || t.CreatedAt.After(lastAt)):
				last, lastAt = t.ShortID()+", is "+tokenStateSince(t, now), t.CreatedAt
			}
		}
	})
	if len(pending) == 0 {
		msg := "no control node " + node + " was ever admitted (meshctl nodes lists them), and no control token for it is pending"
		switch {
		case host && hostRevoked:
			msg = node + " is a host (a worker), revoked already: control remove is for control nodes, and " + node + " is out of the mesh. " + msg
		case host:
			// A worker named by mistake (a docs walkthrough): the command that
			// takes a host out is another.
			msg = node + " is a host (a worker): meshctl revoke " + node + " takes it out of the mesh; control remove is for control nodes. " + msg
		}
		if last != "" {
			msg += " (its last, " + last + ")"
		}
		if worker != "" {
			msg += fmt.Sprintf("; %s has pending worker token %s, which enrols a host, not a control node: meshctl token cancel %s %s cancels it", node, worker, node, worker)
		}
		msg += "; meshctl token list --node " + node + " shows its tokens"
		return out, &api.Error{Code: api.CodeNotFound, Message: msg}
	}
	slices.Sort(pending)
	rules, _, err := d.cancelByID(node, pending)
	if err != nil {
		return out, err
	}
	cmd := &state.CancelTokensCmd{Node: node}
	if rules != 0 {
		cmd.IDs = pending
	}
	res, err := d.commit(state.Command{Op: state.OpCancelTokens, Rules: rules, CancelTokens: cmd})
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		return out, refusal(res.Err)
	}
	for i := range res.Tokens {
		t := &res.Tokens[i]
		out.CancelledTokens = append(out.CancelledTokens, tokenView(t, state.TokenCancelled))
		d.log.Warn("control token cancelled: its node was removed before it was admitted", "node", node, "token", t.ShortID())
	}
	out.NeverAdmitted = len(out.CancelledTokens) > 0
	return out, nil
}

// tokenStateSince says what became of a token that is not pending, and when:
// "used at T", "cancelled at T", "expired at T".
func tokenStateSince(t *state.Token, now time.Time) string {
	switch st := t.StateAt(now); st {
	case state.TokenUsed:
		return "used at " + t.UsedAt.UTC().Format(time.RFC3339)
	case state.TokenCancelled:
		return "cancelled at " + t.CancelledAt.UTC().Format(time.RFC3339)
	case state.TokenExpired:
		return "expired at " + t.Expiry.UTC().Format(time.RFC3339)
	default:
		return st
	}
}

// pendingTokenNodes lists, sorted, the nodes that have a token still able to admit a
// machine and minted since, and until when that is not zero (the brokers a token
// lists are the mesh's when it was minted: those of a removed node are the tokens
// minted since it joined and until its removal; api.ControlRemoveResult.PendingTokens).
func (d *Daemon) pendingTokenNodes(since, until time.Time) []string {
	now := d.now()
	var out []string
	d.fsm.Read(func(s *state.State) {
		for _, t := range s.Tokens {
			// Minted after the removal (until), a token names the brokers of
			// the mesh as it was then, not the removed node's: a rerun named
			// those too, and the advice would have cancelled a new machine's
			// valid token (a docs walkthrough).
			if t.StateAt(now) == state.TokenPending && !t.CreatedAt.Before(since) && (until.IsZero() || !t.CreatedAt.After(until)) {
				out = append(out, t.Node)
			}
		}
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// controlViews describes every control node, with its Raft role.
func (d *Daemon) controlViews(s *state.State, now time.Time) []api.ControlView {
	members, _ := d.raft.Members()
	leader := d.raft.Leader()
	var out []api.ControlView
	ids := make([]string, 0, len(s.ControlNodes))
	for id := range s.ControlNodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := s.ControlNodes[id]
		v := api.ControlView{ID: c.ID, Broker: c.Broker, Raft: api.RaftNotMember, CurveKey: c.CurveKey}
		for _, m := range members {
			if m.ID == c.ID {
				switch {
				case m.ID == leader:
					v.Raft = api.RaftLeader
				case m.Voter:
					v.Raft = api.RaftVoter
				default:
					v.Raft = api.RaftNonvoter
				}
			}
		}
		hb, at, ok := d.ctl.last(c.ID)
		// Where control tokens can be minted is where the keys are now, as each
		// node says of itself; the state's record (the bootstrap machine) stands in
		// for a node not heard from yet.
		switch {
		case c.Removed:
		case c.ID == d.cfg.Node:
			v.CAHolder = d.holdsCAKey()
		case ok:
			v.CAHolder = hb.CAKey
		default:
			v.CAHolder = c.ID == s.BootstrapCAHolder()
		}
		switch {
		case c.Removed:
			v.Raft, v.State = api.RaftRemoved, api.StateRemoved
		case c.ID == d.cfg.Node || d.ctl.alive(c.ID, now):
			v.State = api.StateAlive
		default:
			v.State = api.StateOffline
		}
		if v.State == api.StateAlive && c.ID != d.cfg.Node && (v.Raft == api.RaftVoter || v.Raft == api.RaftNonvoter) {
			// Alive by its heartbeats, which go through the brokers: its Raft may
			// still be cut off (its Raft port blocked, a certificate its peers
			// refuse), and it then counts towards no commit.
			var since time.Time
			if v.NotFollowing, since = d.ctl.stray(c.ID); !since.IsZero() {
				v.NotFollowingSince = since.UTC()
			}
		}
		if c.ID == d.cfg.Node {
			v.LastSeen, v.AppliedIndex, v.Hosts = now.UTC(), d.raft.AppliedIndex(), d.hostCapacity()
			v.CertNotAfter, v.CANotAfter = d.certs.notAfter()
		} else if ok {
			// A removed node's last heartbeat still says when it was last heard.
			v.LastSeen, v.AppliedIndex = at.UTC(), hb.AppliedIndex
			if v.State == api.StateAlive {
				// An offline node's broker runs in its stopped process: the hosts it
				// last held have gone to the others, and would be counted twice.
				// Its certificates may have been renewed while it is stopped, and
				// are read again when it starts.
				v.Hosts = hb.Hosts
				v.CertNotAfter, v.CANotAfter = hb.CertNotAfter.UTC(), hb.CANotAfter.UTC()
			}
		}
		out = append(out, v)
	}
	return out
}
