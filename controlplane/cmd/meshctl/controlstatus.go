package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/state"
)

// minGatherWait is the shortest --wait of control status: a control node's answer
// takes a round trip and its own reading of Raft, and a wait of nanoseconds heard
// none, naming every node silent.
const minGatherWait = 100 * time.Millisecond

// controlStatus runs `meshctl control status`.
func controlStatus(cp *controlPlaneFlags, cio *cliIO, wait time.Duration, asJSON bool) error {
	if wait < minGatherWait || wait > broker.MaxGatherWait {
		return usagef("--wait %s: must be between %s and %s (the default is %s)", wait, minGatherWait, broker.MaxGatherWait, operator.DefaultGatherWait)
	}
	c, err := cp.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	answers, err := c.ControlStatus(wait)
	if err != nil {
		return err
	}
	now := time.Now()
	r := reportControlStatus(answers, now)
	if asJSON {
		if err := writeJSON(cio.stdout, r); err != nil {
			return err
		}
	} else {
		printControlStatus(cio.stdout, r, now)
	}
	return r.verdict()
}

// verdict is the exit of a report: with no leader, 3; with one, 5 when a voter does
// not answer or does not follow it (not converged: the control plane answers, and is
// not whole, so restarting another voter may stop it), or when a control node alive
// serves with a certificate that has expired (it keeps the connections it holds,
// and every new one is refused); nil when every voter answers and follows the
// leader and no certificate has expired, which is what a rolling restart waits for
// before the next node. A certificate that expires within 180 days is printed, and
// fails nothing; so are control nodes that differ in --require-signed-changes, which
// a rolling restart turning it on goes through.
func (r controlStatusReport) verdict() error {
	var expired string
	if names := r.expiredCertificates(); len(names) > 0 {
		expired = "certificates expired: " + strings.Join(names, ", ") + "; every new connection to those nodes is refused, so a control node restarted no longer reaches them: " +
			"renew the certificates (`" + datadir.RenewCommand + "`, docs/operations.md, \"Certificate lifetimes\") and restart those nodes first, one at a time"
	}
	switch {
	case r.Leader != "":
		var parts []string
		if missing := r.missingVoters(); len(missing) > 0 {
			parts = append(parts, "voters not answering: "+strings.Join(missing, ", "))
		}
		if len(r.NotFollowing) > 0 {
			parts = append(parts, "voters not following the leader "+oneLine(r.Leader, 64)+": "+strings.Join(r.notFollowingIDs(), ", "))
		}
		if len(parts) > 0 {
			tail := "the voters left are the quorum: restart no other control node until `meshctl control status` exits 0"
			if answering := len(r.Voters) - len(r.missingVoters()); answering < r.Quorum {
				// The leader is named by nodes that answer, and does not answer
				// itself: said so, not "the voters left are the quorum" with none
				// left (a nonvoter named the only voter for 3 s after it stopped; a
				// review). A leader whose broker is not routed here is named so too.
				tail = fmt.Sprintf("%d of %d voters answer, fewer than a quorum of %d: the leader %s is named by the nodes that answer, not by itself (stopped a moment ago: they name it until their election timeout; or its broker not routed here); "+
					"restart no other control node until `meshctl control status` exits 0", answering, len(r.Voters), r.Quorum, oneLine(r.Leader, 64))
			}
			parts = []string{strings.Join(parts, "; ") + "; " + tail}
		}
		if expired != "" {
			parts = append(parts, expired)
		}
		if len(parts) == 0 {
			return nil
		}
		return exitError{code: exitNotConverged, err: errors.New(strings.Join(parts, "; "))}
	case len(r.Missing) == 0:
		// "0 of 1 voters missing" read as a contradiction.
		return exitError{code: exitUnreachable, err: fmt.Errorf("the control plane has no leader, though all %d voter(s) answer: an election is under way, or they cannot win one (a Raft log they cannot write: the table above and their logs say)%s", len(r.Voters), orExpired(expired))}
	}
	return exitError{code: exitUnreachable, err: fmt.Errorf("the control plane has no leader: %d of %d voters missing%s", len(r.Missing), len(r.Voters), orExpired(expired))}
}

// orExpired appends what verdict says of expired certificates, if any, to the
// message of a control plane with no leader: voters whose certificates expired
// cannot reach each other once restarted.
func orExpired(expired string) string {
	if expired == "" {
		return ""
	}
	return "; " + expired
}

// controlStatusReport is what `meshctl control status` makes of the answers.
type controlStatusReport struct {
	// Leader is the leader the answering nodes follow ("" none).
	Leader string `json:"leader,omitempty"`
	// Voters are the voters of the most recent Raft configuration among the
	// answers; Quorum is how many of them must run for a leader.
	Voters []string `json:"voters"`
	Quorum int      `json:"quorum"`
	// Missing are the members of that configuration that did not answer.
	Missing []string `json:"missing,omitempty"`
	// NotFollowing are, with a leader, the voters that answered and do not follow
	// it, each with why: by its own answer (a candidate, following no leader or
	// another, a Raft log it cannot write), or by the leader's, which hears its
	// heartbeats (not following for several of them in a row: api.ControlView's
	// NotFollowing; none heard). Such a voter answers on the brokers, and counts
	// towards no commit.
	NotFollowing map[string]string `json:"not_following,omitempty"`
	// Certificates are when the certificates of each control node alive expire,
	// its own and the CA's it serves with, judged by this machine's clock; a node
	// offline, or of a version that does not say, is not among them.
	Certificates []certificateExpiry `json:"certificates,omitempty"`
	// SignedOnly and Unsigned, set only when the answering control nodes differ,
	// are those that serve with --require-signed-changes and those that do not
	// (older versions among them): any may lead, and one without it carries out
	// unsigned changes.
	SignedOnly []string            `json:"require_signed_changes,omitempty"`
	Unsigned   []string            `json:"unsigned_changes_allowed,omitempty"`
	Answered   []api.ControlStatus `json:"answered"`
}

// signedChangesApart says which answering nodes serve with --require-signed-changes
// and which do not, when they differ; "" when they agree.
func (r controlStatusReport) signedChangesApart() string {
	if len(r.SignedOnly) == 0 || len(r.Unsigned) == 0 {
		return ""
	}
	return "--require-signed-changes is on at " + strings.Join(r.SignedOnly, ", ") + " and off at " + strings.Join(r.Unsigned, ", ") +
		": any control node may lead, and one without it carries out unsigned changes (revoked credentials' through a lagging broker among them); serve every control node with it, or none (restart them one at a time)"
}

// missingVoters are the voters that did not answer, printable.
func (r controlStatusReport) missingVoters() []string {
	var out []string
	for _, id := range r.Missing {
		if slices.Contains(r.Voters, id) {
			out = append(out, oneLine(id, 64))
		}
	}
	return out
}

// notFollowingIDs are the voters that do not follow the leader, sorted, printable.
func (r controlStatusReport) notFollowingIDs() []string {
	ids := slices.Sorted(maps.Keys(r.NotFollowing))
	for i, id := range ids {
		ids[i] = oneLine(id, 64)
	}
	return ids
}

// reportControlStatus sums up the answers: the leader, and the voters that did not
// answer, from the configuration of the node that applied the most; and the
// certificates of the control nodes, judged at now.
func reportControlStatus(answers []api.ControlStatus, now time.Time) controlStatusReport {
	r := controlStatusReport{Answered: answers}
	var newest api.ControlStatus
	for _, a := range answers {
		if a.CommitIndex >= newest.CommitIndex {
			newest = a
		}
		if a.Raft == api.RaftStateLeader {
			r.Leader = a.Node
		}
	}
	if r.Leader == "" {
		// A follower that hears its leader names it; with the leader's own answer
		// missing (its broker has no route here), theirs says who leads.
		for _, a := range answers {
			if a.Leader != "" && a.Raft == api.RaftStateFollower {
				r.Leader = a.Leader
			}
		}
	}
	answered := func(id string) bool {
		return slices.ContainsFunc(answers, func(a api.ControlStatus) bool { return a.Node == id })
	}
	if lead, ok := r.leaderAnswer(); ok {
		// The leader's configuration is the mesh's: a member that applied as
		// much may hold a stale one (an older snapshot installed over newer
		// entries), and its voters were taken for the mesh's (a walkthrough:
		// exit 0 with a voter stopped).
		newest = lead
	}
	for _, m := range newest.Members {
		if m.Voter {
			r.Voters = append(r.Voters, m.ID)
		}
		if !answered(m.ID) {
			r.Missing = append(r.Missing, m.ID)
		}
	}
	r.Quorum = len(r.Voters)/2 + 1
	if r.Leader != "" {
		lead, leaderAnswered := r.leaderAnswer()
		for _, a := range answers {
			if !slices.Contains(r.Voters, a.Node) {
				continue
			}
			why := notFollowing(a, r.Leader)
			if why == "" && leaderAnswered && a.Node != r.Leader {
				why = notFollowingByLeader(lead, a.Node)
			}
			// Judged only once the member has committed as far as the leader: a
			// configuration entry reaches each member a moment after a majority
			// has it, and a join or promotion that just returned would otherwise
			// read as stale (a review).
			if why == "" && leaderAnswered && a.Node != r.Leader && a.CommitIndex >= lead.CommitIndex && !sameMembers(a.Members, lead.Members) {
				why = "it holds another Raft configuration than the leader's (" + membersText(a.Members) + "), by which it votes: the leader appends its own again within a minute; if it stays, the leader's log says which of the two to restart"
			}
			if why != "" {
				if r.NotFollowing == nil {
					r.NotFollowing = map[string]string{}
				}
				r.NotFollowing[a.Node] = why
			}
		}
	}
	r.Certificates = certificateExpiries(answers, r.Leader, now)
	for _, a := range answers {
		if a.RequireSignedChanges != nil && *a.RequireSignedChanges {
			r.SignedOnly = append(r.SignedOnly, oneLine(a.Node, 64))
		} else {
			r.Unsigned = append(r.Unsigned, oneLine(a.Node, 64))
		}
	}
	if len(r.SignedOnly) == 0 || len(r.Unsigned) == 0 {
		r.SignedOnly, r.Unsigned = nil, nil
	}
	slices.Sort(r.SignedOnly)
	slices.Sort(r.Unsigned)
	return r
}

// notFollowing says why a, a voter's own answer, shows it not following leader;
// "" when it follows it or is it. What a node says of itself needs no waiting: a
// voter just restarted that has heard no leader yet, or one whose Raft port is cut
// off, follows none now, and another voter stopped then would leave no quorum. The
// followers of a leader just elected name it within a Raft heartbeat.
func notFollowing(a api.ControlStatus, leader string) string {
	if a.LogWriteError != "" {
		return "it cannot write its Raft log, so it appends nothing the leader sends"
	}
	if a.Node == leader {
		return ""
	}
	var why string
	switch {
	case a.Raft == api.RaftStateCandidate:
		why = fmt.Sprintf("a candidate at term %d: it hears no leader", a.Term)
	case a.Raft == api.RaftStateLeader:
		why = fmt.Sprintf("it says it leads, at term %d", a.Term)
	case a.Raft != api.RaftStateFollower:
		why = "its Raft is " + oneLine(a.Raft, 32)
	case a.Leader == "":
		why = "it follows no leader"
	case a.Leader != leader:
		return "it follows " + oneLine(a.Leader, 64)
	default:
		return ""
	}
	switch {
	case a.LastContact.IsZero():
		why += "; it has heard none since it started"
	case !a.At.IsZero():
		why += "; it last heard a leader " + ago(a.At.Sub(a.LastContact))
	}
	return why
}

// notFollowingByLeader says why the leader's answer shows voter not following it,
// by the heartbeats it hears: several in a row that said so (api.ControlView's
// NotFollowing), or none heard lately. "" when it follows, and when the leader is of
// a version that does not judge.
func notFollowingByLeader(lead api.ControlStatus, voter string) string {
	i := slices.IndexFunc(lead.Control, func(v api.ControlView) bool { return v.ID == voter })
	if i < 0 {
		return ""
	}
	switch v := lead.Control[i]; {
	case v.State != api.StateAlive:
		return "the leader hears no heartbeat from it (" + oneLine(v.State, 32) + " in its view)"
	case v.NotFollowing != "":
		why := oneLine(v.NotFollowing, 200)
		if !v.NotFollowingSince.IsZero() && !lead.At.IsZero() {
			why += ", by its heartbeats for " + lead.At.Sub(v.NotFollowingSince).Round(time.Second).String()
		}
		return why
	}
	return ""
}

func printControlStatus(w io.Writer, r controlStatusReport, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTROL\tRAFT\tLEADER\tTERM\tLAST CONTACT\tCOMMIT INDEX\tAPPLIED INDEX\tVOTERS\tVERSION\tCLOCK")
	lead, leaderAnswered := r.leaderAnswer()
	for _, a := range r.Answered {
		leader, contact := "-", "-"
		if a.Leader != "" {
			leader = a.Leader
		}
		if !a.LastContact.IsZero() {
			// By the node's own clock, which stamped it, when it says it: by
			// this machine's, a node three hours behind heard the leader
			// "3h0m2s ago".
			at := now
			if !a.At.IsZero() {
				at = a.At
			}
			contact = ago(at.Sub(a.LastContact))
		}
		var voters []string
		for _, m := range a.Members {
			if m.Voter {
				voters = append(voters, m.ID)
			}
		}
		// A version before the column says none.
		version := "-"
		if a.Version != "" {
			version = oneLine(a.Version, 64)
		}
		// Against the leader's clock, which stamps declarations and tokens.
		clock := "-"
		switch off, ok := clockOff(a, lead); {
		case leaderAnswered && a.Node == lead.Node:
			clock = "leader"
		case leaderAnswered && ok:
			clock = signed(off)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", oneLine(a.Node, 64), raftText(a, r.Voters), oneLine(leader, 64), a.Term, contact,
			a.CommitIndex, a.AppliedIndex, oneLine(strings.Join(voters, ","), 200), version, clock)
	}
	for _, id := range r.Missing {
		fmt.Fprintf(tw, "%s\t(no answer)\n", oneLine(id, 64))
	}
	tw.Flush()
	up := len(r.Voters)
	for _, id := range r.Missing {
		if slices.Contains(r.Voters, id) {
			up--
		}
	}
	// Ids come from the control nodes' answers: printed as text, never as escapes.
	leader := oneLine(r.Leader, 64)
	missing := make([]string, len(r.Missing))
	for i, id := range r.Missing {
		missing[i] = oneLine(id, 64)
	}
	if leaderAnswered {
		printClocks(w, r, lead, now)
	}
	printCertificates(w, r, now)
	if apart := r.signedChangesApart(); apart != "" {
		fmt.Fprintln(w, apart)
	}
	// A node whose disk is full cannot append the entry an election starts with:
	// starting voters does not help, room does.
	for _, a := range r.Answered {
		if a.LogWriteError != "" {
			fmt.Fprintf(w, "%s cannot write its Raft log (%s): free space under its data directory; it needs no restart\n",
				oneLine(a.Node, 64), oneLine(a.LogWriteError, 300))
		}
	}
	switch {
	case r.Leader != "" && len(r.Missing) == 0 && len(r.NotFollowing) == 0:
		fmt.Fprintf(w, "leader %s; every member answered, and every voter follows it\n", leader)
	case r.Leader != "":
		if len(r.Missing) > 0 {
			fmt.Fprintf(w, "leader %s; not answering: %s (stopped, or its broker has no route to the one reached)\n", leader, strings.Join(missing, ", "))
		}
		if len(r.NotFollowing) > 0 {
			var named []string
			for _, id := range slices.Sorted(maps.Keys(r.NotFollowing)) {
				named = append(named, oneLine(id, 64)+" ("+oneLine(r.NotFollowing[id], 300)+")")
			}
			fmt.Fprintf(w, "leader %s; not following it: %s. A voter that does not follow counts towards no commit: the others are the quorum, and restarting one of them now stops the control plane. "+
				"Look at its log, and at whether the other control nodes reach its Raft address (a firewall, a certificate they refuse)\n", leader, strings.Join(named, "; "))
		}
	case len(r.Missing) == 0:
		fmt.Fprintf(w, "no leader, though every voter answers: an election is under way, or the voters cannot write their Raft logs (above); their logs say why\n")
	default:
		// "Do not answer" is all this side can tell: stopped, or running beyond a
		// partition with a leader of their own. Recovering the quorum by hand is
		// then the one wrong thing to do.
		fmt.Fprintf(w, "no leader: %d of %d voters answer, and a leader needs %d. Start the voters that do not answer (%s); "+
			"if they run, the network between them and this node is cut (a partition): mend it, and do not recover the quorum, as they may have a leader of their own (docs/operations.md, \"Partitions\"). "+
			"An election takes a few seconds once a quorum runs. If they are lost for good, recover the quorum from the survivors "+
			"(docs/operations.md, \"Recovering from lost quorum\")\n", up, len(r.Voters), r.Quorum, strings.Join(missing, ", "))
	}
}

// raftText is a's Raft state for the table, in the words of `meshctl nodes`: a
// follower that votes is a voter, one that does not a nonvoter. Raft calls both a
// follower, and the two commands named the same node follower and voter, or
// follower and nonvoter (a newcomer's walkthrough). A candidate or a leader is
// said as Raft says it; a follower in no configuration (removed, or not yet added)
// says so.
func raftText(a api.ControlStatus, voters []string) string {
	if a.Raft != api.RaftStateFollower {
		return a.Raft
	}
	if slices.Contains(voters, a.Node) {
		return api.RaftVoter
	}
	for _, m := range a.Members {
		if m.ID == a.Node {
			return "nonvoter"
		}
	}
	return "not a member"
}

// sameMembers reports whether two Raft configurations hold the same servers,
// addresses and votes, in any order.
func sameMembers(a, b []api.RaftMember) bool {
	return membersText(a) == membersText(b)
}

// membersText is a configuration in a line: each server's id, a "*" for a voter,
// sorted.
func membersText(ms []api.RaftMember) string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		s := oneLine(m.ID, 64) + "@" + oneLine(m.Address, 64)
		if m.Voter {
			s += "*"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// leaderAnswer is the leader's own answer, if it gave one.
func (r controlStatusReport) leaderAnswer() (api.ControlStatus, bool) {
	for _, a := range r.Answered {
		if a.Node == r.Leader && a.Raft == api.RaftStateLeader {
			return a, true
		}
	}
	return api.ControlStatus{}, false
}

// clockOff is how far a's clock is ahead of the leader's (behind if negative), each
// as it answered the same request, to the second: the answers left within moments of
// each other. False when either is from a version that sends no clock.
func clockOff(a, leader api.ControlStatus) (time.Duration, bool) {
	if a.At.IsZero() || leader.At.IsZero() {
		return 0, false
	}
	return a.At.Sub(leader.At).Round(time.Second), true
}

// signed writes an offset with its sign: "+0s", "+2h0m0s", "-7m30s".
func signed(d time.Duration) string {
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

// printClocks says which clock is off, as the control nodes' logs do: the leader's
// clock stamps declarations and tokens, so a control node whose clock is off by
// more than state.StampAheadTolerance does harm once it leads, and the leader's own
// clock does now. The leader's is also compared with this machine's (the answer's
// delay, at most --wait, is far below the tolerance).
func printClocks(w io.Writer, r controlStatusReport, lead api.ControlStatus, now time.Time) {
	for _, a := range r.Answered {
		off, ok := clockOff(a, lead)
		if !ok || a.Node == lead.Node || off.Abs() <= state.StampAheadTolerance {
			continue
		}
		way, harm := "ahead of", "hosts would refuse what it stamps more than an hour ahead of their clocks"
		if off < 0 {
			way, harm = "behind", "the tokens it mints would expire early"
		}
		fmt.Fprintf(w, "%s's clock is %s %s the leader's (%s): should it lead, %s; fix NTP on whichever is wrong (`date -u` on each control node)\n",
			oneLine(a.Node, 64), off.Abs(), way, oneLine(lead.Node, 64), harm)
	}
	if lead.At.IsZero() {
		return
	}
	if off := lead.At.Sub(now).Round(time.Second); off.Abs() > state.StampAheadTolerance {
		way := "ahead of"
		if off < 0 {
			way = "behind"
		}
		fmt.Fprintf(w, "the leader's clock (%s) is %s %s this machine's: it stamps declarations and tokens; fix NTP on whichever is wrong (`date -u` there and here)\n",
			oneLine(lead.Node, 64), off.Abs(), way)
	}
}
