package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/declarations"
	"mesh/host/busyaddr"
)

// instruments are what the daemon counts as it works; the rest of its metrics are
// read from its state when scraped (collector), so nothing is counted twice.
type instruments struct {
	enrolments    *prometheus.CounterVec
	declarations  prometheus.Counter
	fanout        prometheus.Histogram
	raftApply     prometheus.Histogram
	revocations   prometheus.Counter
	keyringEpochs prometheus.Counter
	unbound       *prometheus.CounterVec
}

func newInstruments() *instruments {
	m := &instruments{
		enrolments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mesh_control_enrolments_total",
			Help: "Nodes admitted, by kind: host or control (refusals are mesh_control_requests_refused_total{subject=\"enrol\"})."}, []string{"kind"}),
		declarations: prometheus.NewCounter(prometheus.CounterOpts{Name: "mesh_control_declarations_issued_total",
			Help: "Declarations assigned to nodes (one per node per declare)."}),
		fanout: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mesh_control_fanout_duration_seconds",
			Help:    "From a declare request to the last node's envelope handed to the broker: commit, sign, publish.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		raftApply: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mesh_raft_apply_duration_seconds",
			Help:    "From proposing a command on this node to it being committed and applied.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{Name: "mesh_control_revocations_total",
			Help: "Nodes revoked through this node's operator API."}),
		keyringEpochs: prometheus.NewCounter(prometheus.CounterOpts{Name: "mesh_control_keyring_changes_total",
			Help: "Signing-key rotations and retirements done through this node's operator API."}),
		unbound: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mesh_broker_unbound_logins_total",
			Help: "Logins to this node's broker not bound to their TLS session (decision 0018), by client: node and operator for a bare nonce signature, enrolling for a sent token secret or a bare signature. Admitted unless serve runs with --require-bound-logins, refused then; a configuration reload checks every client again."},
			[]string{"client"}),
	}
	m.zeroLabels()
	return m
}

// zeroLabels makes the series of the instruments' labels that the code fixes, at 0
// (see knowncounts.go).
func (m *instruments) zeroLabels() {
	m.enrolments.WithLabelValues(enrolledHost)
	m.enrolments.WithLabelValues(enrolledControl)
	for _, c := range unboundClients() {
		m.unbound.WithLabelValues(c)
	}
}

func (m *instruments) all() []prometheus.Collector {
	return []prometheus.Collector{m.enrolments, m.declarations, m.fanout, m.raftApply, m.revocations, m.keyringEpochs, m.unbound}
}

// Metric descriptions read at scrape time.
var (
	descDropped = prometheus.NewDesc("mesh_control_messages_dropped_total",
		"Messages the control plane dropped without acting on or answering them, by subject and reason.",
		[]string{"subject", "reason"}, nil)
	descRefused = prometheus.NewDesc("mesh_control_requests_refused_total",
		"Requests the control plane answered with a refusal, by subject and reason (the protocol's code).",
		[]string{"subject", "reason"}, nil)
	descKicked = prometheus.NewDesc("mesh_control_budget_disconnects_total",
		"Connections closed for exceeding a budget (a node's, an enrolling client's, a revoked key's, a removed control node's operator credentials'), by reason.",
		[]string{"reason"}, nil)
	descHostConns = prometheus.NewDesc("mesh_control_host_connections",
		"Connections open in the hosts account on every broker of the mesh, as nats-server's events report them.",
		nil, nil)
	descNodes = prometheus.NewDesc("mesh_nodes",
		"Enrolled nodes by state. alive, offline and revoked partition the nodes; converged and behind partition the ones not revoked, failing counts those behind that report an error or whose key two machines hold (key_shared), stale those whose declaration expired (as meshctl status counts them); alive_not_converged those alive and not converged, or stale (the nodes meshctl status names, exit 5). The leader's figures are the ones meshctl shows.",
		[]string{"state"}, nil)
	descForgotten = prometheus.NewDesc("mesh_nodes_forgotten",
		"Revoked nodes whose record the state forgot, 30 days or more after their revocation (decision 0039): not counted in mesh_nodes; their keys stay refused.",
		nil, nil)
	descNodeErrors = prometheus.NewDesc("mesh_nodes_errors",
		"Nodes not revoked by the error code they last reported, converged or not (a converged node that refused junk sent to it keeps its code until its next apply): the protocol's codes, and other for any other a host reported.",
		[]string{"code"}, nil)
	descAgents = prometheus.NewDesc("mesh_nodes_agents",
		"Nodes not revoked by the agent they last reported (meshhost/VERSION): how far an upgrade of the agents has gone. none: nodes that reported no agent the control plane keeps; beyond the 16 agents most reported, the rest are counted as other.",
		[]string{"agent"}, nil)
	descControl = prometheus.NewDesc("mesh_control_nodes",
		"Control nodes by Raft role, as this node sees them.", []string{"raft_role"}, nil)
	descRaftLeader  = prometheus.NewDesc("mesh_raft_leader", "1 when this control node is the Raft leader.", nil, nil)
	descRaftRefused = prometheus.NewDesc("mesh_raft_connections_refused_total",
		"Raft connections closed by this node, in and out: reason=not_a_member for a leaf of the mesh CA whose pin is no current control node's (nor one learnt ahead of a lagging state), reason=handshake for a TLS handshake that failed.",
		[]string{"reason"}, nil)
	descRaftTerm          = prometheus.NewDesc("mesh_raft_term", "The current Raft term.", nil, nil)
	descRaftLeaderChanges = prometheus.NewDesc("mesh_raft_leader_changes_total",
		"Leaders this control node learnt of since it started: the first, then one for each election it saw end, the same node again included (the term also grows on elections nobody won).", nil, nil)
	descRaftCommit  = prometheus.NewDesc("mesh_raft_commit_index", "The index of the last committed log entry.", nil, nil)
	descRaftApplied = prometheus.NewDesc("mesh_raft_applied_index", "The index of the last log entry applied to the state.", nil, nil)
	descRaftLast    = prometheus.NewDesc("mesh_raft_last_index", "The index of the last log entry stored.", nil, nil)
	descRaftContact = prometheus.NewDesc("mesh_raft_last_contact_seconds",
		"Seconds since a follower last heard from the leader, or since it started if it has heard none (0 on the leader).", nil, nil)
	descRaftWriteFailing = prometheus.NewDesc("mesh_raft_log_write_failing",
		"1 when this node's last write to its Raft log failed and none succeeded since (a full disk), or one has been under way for 10s or more (a disk that does not answer): it cannot lead.", nil, nil)
	descBrokerConns  = prometheus.NewDesc("mesh_broker_connections", "Client connections open on this node's broker.", nil, nil)
	descBrokerRoutes = prometheus.NewDesc("mesh_broker_routes", "Route connections of this node's broker to the other control nodes' brokers.", nil, nil)
	descBrokerMsgs   = prometheus.NewDesc("mesh_broker_messages_total", "Messages through this node's broker, by direction.", []string{"direction"}, nil)
	descBrokerBytes  = prometheus.NewDesc("mesh_broker_bytes_total", "Payload bytes through this node's broker, by direction.", []string{"direction"}, nil)
	descBrokerSlow   = prometheus.NewDesc("mesh_broker_slow_consumers_total", "Clients this node's broker cut off for not reading fast enough.", nil, nil)
	descBrokerHeld   = prometheus.NewDesc("mesh_broker_handshakes_held_total",
		"Host TLS handshakes this node's broker held while the node was starting, by outcome: admitted when it opened, or refused after waiting too long.",
		[]string{"outcome"}, nil)
	descBrokerShedding = prometheus.NewDesc("mesh_broker_shedding_hosts",
		"1 while this node, cut off from the other control nodes, sends its hosts to them and refuses host handshakes (decision 0023).", nil, nil)
	descBrokerIsolated = prometheus.NewDesc("mesh_broker_handshakes_isolated_total",
		"Host TLS handshakes this node's broker refused while it shed its hosts.", nil, nil)
	descBrokerHosts = prometheus.NewDesc("mesh_broker_host_connections",
		"Hosts (enrolling, enrolled, revoked) connected to this node's broker now; mesh_control_host_connections counts them on every broker.", nil, nil)
	descBrokerMaxHosts = prometheus.NewDesc("mesh_broker_max_host_connections",
		"The most host connections this node's broker holds (from its open-file limit, or meshctl serve --max-hosts); beyond it hosts are refused and go to another control node. 0: not capped.", nil, nil)
	descBrokerRefused = prometheus.NewDesc("mesh_broker_connections_refused_total",
		"Client connections this node's broker refused, by the authentication's reason (the log shows a few of each kind every 10 s).",
		[]string{"reason"}, nil)
	descBrokerAnswers = prometheus.NewDesc("mesh_broker_operator_answers_pending",
		"Operator requests that came in through this node's broker and whose answers have not come back through it yet (they come back only that way): a node stopped on purpose waits for them, at most 1.5 s (decision 0032).", nil, nil)
	descBrokerViolations = prometheus.NewDesc("mesh_broker_client_violations_total",
		"What clients of this node's broker tried beyond their grants (publish, reply and subscription violations) and other client errors nats-server reports, by what happened and the client's account.",
		[]string{"kind", "account"}, nil)
)

// collector exports what is read from the daemon's state and its components.
type collector struct{ d *Daemon }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDropped, descRefused, descKicked, descHostConns, descNodes, descForgotten, descNodeErrors, descAgents, descControl,
		descBrokerConns, descBrokerRoutes, descBrokerMsgs, descBrokerBytes, descBrokerSlow, descBrokerHeld, descBrokerShedding, descBrokerIsolated,
		descBrokerRefused, descBrokerViolations, descBrokerHosts, descBrokerMaxHosts, descBrokerAnswers} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	n := d.guard.snapshot()
	for k, v := range withZeros(n.Dropped, knownDrops()) {
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(v), k.Subject, string(k.Reason))
	}
	for k, v := range withZeros(n.Refused, knownRefusals()) {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(v), k.Subject, string(k.Reason))
	}
	for r, v := range withZeros(n.Kicked, knownKicks()) {
		ch <- prometheus.MustNewConstMetric(descKicked, prometheus.CounterValue, float64(v), string(r))
	}
	ch <- prometheus.MustNewConstMetric(descHostConns, prometheus.GaugeValue, float64(d.presence.Count()))

	counts := d.nodeCounts(d.now())
	for _, st := range nodeStates() {
		ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(counts[st]), st)
	}
	var forgotten int
	d.fsm.Read(func(s *state.State) { forgotten = len(s.Forgotten) })
	ch <- prometheus.MustNewConstMetric(descForgotten, prometheus.GaugeValue, float64(forgotten))
	for code, n := range d.errorCounts() {
		ch <- prometheus.MustNewConstMetric(descNodeErrors, prometheus.GaugeValue, float64(n), code)
	}
	for agent, n := range d.agentCounts() {
		ch <- prometheus.MustNewConstMetric(descAgents, prometheus.GaugeValue, float64(n), agent)
	}
	roles := map[string]int{}
	d.fsm.Read(func(s *state.State) {
		for _, v := range d.controlViews(s, d.now()) {
			roles[v.Raft]++
		}
	})
	for _, r := range []string{api.RaftLeader, api.RaftVoter, api.RaftNonvoter, api.RaftNotMember, api.RaftRemoved} {
		ch <- prometheus.MustNewConstMetric(descControl, prometheus.GaugeValue, float64(roles[r]), r)
	}

	if bs, err := d.broker.Stats(); err == nil {
		ch <- prometheus.MustNewConstMetric(descBrokerConns, prometheus.GaugeValue, float64(bs.Connections))
		ch <- prometheus.MustNewConstMetric(descBrokerRoutes, prometheus.GaugeValue, float64(bs.Routes))
		ch <- prometheus.MustNewConstMetric(descBrokerMsgs, prometheus.CounterValue, float64(bs.InMsgs), "in")
		ch <- prometheus.MustNewConstMetric(descBrokerMsgs, prometheus.CounterValue, float64(bs.OutMsgs), "out")
		ch <- prometheus.MustNewConstMetric(descBrokerBytes, prometheus.CounterValue, float64(bs.InBytes), "in")
		ch <- prometheus.MustNewConstMetric(descBrokerBytes, prometheus.CounterValue, float64(bs.OutBytes), "out")
		ch <- prometheus.MustNewConstMetric(descBrokerSlow, prometheus.CounterValue, float64(bs.SlowConsumers))
	}
	ch <- prometheus.MustNewConstMetric(descBrokerHosts, prometheus.GaugeValue, float64(d.broker.Hosts()))
	ch <- prometheus.MustNewConstMetric(descBrokerMaxHosts, prometheus.GaugeValue, float64(d.broker.Capacity().MaxHosts))
	ch <- prometheus.MustNewConstMetric(descBrokerAnswers, prometheus.GaugeValue, float64(d.broker.PendingOperatorAnswers()))
	as := d.broker.AdmissionStats()
	ch <- prometheus.MustNewConstMetric(descBrokerHeld, prometheus.CounterValue, float64(as.Released), "admitted")
	ch <- prometheus.MustNewConstMetric(descBrokerHeld, prometheus.CounterValue, float64(as.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(descBrokerIsolated, prometheus.CounterValue, float64(as.Isolated))
	shedding := 0.0
	if d.broker.Shedding() {
		shedding = 1
	}
	ch <- prometheus.MustNewConstMetric(descBrokerShedding, prometheus.GaugeValue, shedding)
	ec := d.broker.EventCounts()
	for reason, n := range withZeros(ec.Refused, knownBrokerRefusals()) {
		ch <- prometheus.MustNewConstMetric(descBrokerRefused, prometheus.CounterValue, float64(n), reason)
	}
	for k, n := range withZeros(ec.Violations, broker.Violations()) {
		ch <- prometheus.MustNewConstMetric(descBrokerViolations, prometheus.CounterValue, float64(n), k.What, k.Account)
	}
}

// raftCollector exports this node's Raft figures. It is apart from collector
// because it is all a node can say while it waits for a quorum (startingHandler),
// and that is when an operator most wants mesh_raft_leader and the indexes.
type raftCollector struct{ d *Daemon }

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftLeader, descRaftTerm, descRaftCommit, descRaftApplied, descRaftLast,
		descRaftContact, descRaftRefused, descRaftWriteFailing, descRaftLeaderChanges} {
		ch <- d
	}
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	rs := c.d.raft.Status()
	leader := 0.0
	if rs.Leader {
		leader = 1
	}
	contact := 0.0
	switch {
	case rs.Leader:
	case !rs.LastContact.IsZero():
		contact = time.Since(rs.LastContact).Seconds()
	default:
		// No leader heard since this node opened Raft (restarted while the quorum
		// is lost): that is silence too, not a contact just now.
		contact = time.Since(c.d.raftOpened).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, leader)
	ch <- prometheus.MustNewConstMetric(descRaftTerm, prometheus.GaugeValue, float64(rs.Term))
	ch <- prometheus.MustNewConstMetric(descRaftLeaderChanges, prometheus.CounterValue, float64(rs.LeaderChanges))
	ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(rs.CommitIndex))
	ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(rs.Applied))
	ch <- prometheus.MustNewConstMetric(descRaftLast, prometheus.GaugeValue, float64(rs.LastIndex))
	ch <- prometheus.MustNewConstMetric(descRaftContact, prometheus.GaugeValue, contact)
	failing := 0.0
	if c.d.raft.LogWriteError() != nil {
		failing = 1
	}
	ch <- prometheus.MustNewConstMetric(descRaftWriteFailing, prometheus.GaugeValue, failing)
	ch <- prometheus.MustNewConstMetric(descRaftRefused, prometheus.CounterValue, float64(rs.PeersNotMembers), "not_a_member")
	ch <- prometheus.MustNewConstMetric(descRaftRefused, prometheus.CounterValue, float64(rs.FailedHandshakes), "handshake")
}

// States of mesh_nodes beside api.StateAlive, api.StateOffline and api.StateRevoked.
const (
	stateConverged = "converged"
	stateBehind    = "behind"
	stateFailing   = "failing"
	stateStale     = "stale"
	// stateAliveNotConverged is meshctl status's verdict: the live nodes it names
	// as not converged (exit 5). behind cannot say it: it counts offline nodes too,
	// which a fleet always has, so an alert on it never clears.
	stateAliveNotConverged = "alive_not_converged"
)

// nodeStates are the states of mesh_nodes, each exported whether or not a node is in it.
func nodeStates() []string {
	return []string{api.StateAlive, api.StateOffline, api.StateRevoked, stateConverged, stateBehind, stateFailing, stateStale, stateAliveNotConverged}
}

// nodeCounts counts the enrolled nodes by state at now (see descNodes).
func (d *Daemon) nodeCounts(now time.Time) map[string]int {
	out := map[string]int{}
	d.judgeBodies()
	d.fsm.Read(func(s *state.State) {
		oldest := s.OldestKeptKeyring()
		for _, n := range s.Nodes {
			if n.Revoked {
				out[api.StateRevoked]++
				continue
			}
			alive := d.alive(n, now)
			if alive {
				out[api.StateAlive]++
			} else {
				out[api.StateOffline]++
			}
			// As meshctl status counts them: a node that converged is not failing
			// for an error it reported since (junk it refused, which anyone able
			// to publish to it can send); one that has not is failing while it
			// reports an error, behind either way.
			a := n.Applied
			converged := a.HaveApplied && a.Version == n.Declared.Version && convergedOn(a, a.Version)
			// A body this version cannot sign again is failing, as status shows
			// it (unsignable_body); one not judged yet was declared since
			// judgeBodies, by this version, which signs it. So is a key two
			// machines hold (api.KeyShared), and a keyring the mesh's chain no
			// longer reaches (api.KeyringGone).
			refused, _ := d.signer.verdict(n.Declared.BodyDigest)
			_, shared := d.keyShared(n.PublicKey, now)
			switch {
			case refused != nil, shared, state.PastKeyringHistory(a, oldest):
				converged = false
				out[stateBehind]++
				out[stateFailing]++
			case converged:
				out[stateConverged]++
			case a.ErrorCode != "":
				out[stateBehind]++
				out[stateFailing]++
			default:
				out[stateBehind]++
			}
			if a.Stale {
				out[stateStale]++
			}
			// As status judges them: a stale node has not converged on what is
			// declared now, whatever it applied.
			if alive && (!converged || a.Stale) {
				out[stateAliveNotConverged]++
			}
		}
	})
	return out
}

// judgeBodies has the signer judge, outside the state's lock, every declared body
// of a node not revoked it has not judged yet (signer.signable), so that
// signer.verdict knows them: once each, a parse of 32 µs to 1.8 ms, where the
// roster judged them under the lock on every page.
func (d *Daemon) judgeBodies() {
	var unjudged map[string][]byte
	d.fsm.Read(func(s *state.State) {
		for _, n := range s.Nodes {
			digest := n.Declared.BodyDigest
			if n.Revoked || s.Bodies[digest] == nil || unjudged[digest] != nil {
				continue
			}
			if _, known := d.signer.verdict(digest); !known {
				if unjudged == nil {
					unjudged = map[string][]byte{}
				}
				unjudged[digest] = s.Bodies[digest]
			}
		}
	})
	d.signer.signable(unjudged)
}

// errorOther is the label of mesh_nodes_errors for the codes that are none of the
// protocol's: hosts choose what they report, and a code each must not make a series.
const errorOther = "other"

// nodeErrorCodes are the codes a host reports of its last error that
// mesh_nodes_errors exports as themselves: the verifier's refusals and the host's
// own failures.
func nodeErrorCodes() []string {
	return append(declarations.Codes(), api.StatusApplyFailed, api.StatusHookFailed, api.StatusStateNotSaved)
}

// errorCounts counts the nodes not revoked by the error code they last reported,
// for mesh_nodes_errors: every code of nodeErrorCodes and other, 0 when no node
// reports it, so an alert on one sees it appear.
func (d *Daemon) errorCounts() map[string]int {
	counts := map[string]int{errorOther: 0}
	for _, c := range nodeErrorCodes() {
		counts[c] = 0
	}
	d.fsm.Read(func(s *state.State) {
		for _, n := range s.Nodes {
			code := n.Applied.ErrorCode
			switch {
			case n.Revoked || code == "":
				continue
			case !hasKey(counts, code):
				code = errorOther
			}
			counts[code]++
		}
	})
	return counts
}

func hasKey[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// Labels of mesh_nodes_agents that are no agent: none is reported by a node that
// named none (api.ValidAgent has a '/' in every agent, so no host can claim these).
const (
	agentNone  = "none"
	agentOther = "other"
)

// maxAgentLabels bounds the series of mesh_nodes_agents. Hosts choose what they
// report: a fleet of hosts each naming an agent of its own must not make a series
// each. An upgrade has two versions in flight, rarely more.
const maxAgentLabels = 16

// agentCounts counts the nodes not revoked by the agent they last reported, for
// mesh_nodes_agents.
func (d *Daemon) agentCounts() map[string]int {
	counts := map[string]int{}
	d.fsm.Read(func(s *state.State) {
		for _, n := range s.Nodes {
			if n.Revoked {
				continue
			}
			agent := n.Applied.Agent
			if agent == "" {
				agent = agentNone
			}
			counts[agent]++
		}
	})
	return boundAgents(counts, maxAgentLabels)
}

// boundAgents keeps the max agents of counts most counted (the first by name among
// equals), and counts the rest's nodes as agentOther; none is always kept.
func boundAgents(counts map[string]int, max int) map[string]int {
	agents := make([]string, 0, len(counts))
	for a := range counts {
		if a != agentNone {
			agents = append(agents, a)
		}
	}
	if len(agents) <= max {
		return counts
	}
	slices.SortFunc(agents, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	out := map[string]int{}
	if n := counts[agentNone]; n > 0 {
		out[agentNone] = n
	}
	for i, a := range agents {
		if i < max {
			out[a] = counts[a]
		} else {
			out[agentOther] += counts[a]
		}
	}
	return out
}

// Registry returns the Prometheus registry of the daemon's metrics and the process's.
func (d *Daemon) Registry() *prometheus.Registry { return d.registry }

func (d *Daemon) newRegistry() *prometheus.Registry {
	reg := d.startingRegistry()
	reg.MustRegister(collector{d})
	reg.MustRegister(d.metrics.all()...)
	if d.backups != nil {
		reg.MustRegister(backupCollector{d.backups})
	}
	return reg
}

// startingRegistry is what a node exports before it is open: its build, its Raft
// figures, its certificates' expiry and the process's.
func (d *Daemon) startingRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo(d.opts.Version, d.opts.Revision, d.cfg.Mesh, d.cfg.Node), raftCollector{d}, certCollector{d},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// buildInfo is mesh_build_info: 1, labelled with the build serving, so that a
// dashboard can tell which control nodes an upgrade has reached (meshctl control
// status says it of the nodes that answer), and with the mesh and the node, so that
// a scrape says whose it is (another mesh's control node on the port, a review).
func buildInfo(version, revision, mesh, node string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "mesh_build_info",
		Help:        "1, labelled with the version of meshctl serving (meshctl version), the commit it was built from (unknown when its build recorded none), and the mesh and control node it serves.",
		ConstLabels: prometheus.Labels{"version": orUnknown(version), "revision": orUnknown(revision), "mesh": orUnknown(mesh), "node": orUnknown(node)}})
	g.Set(1)
	return g
}

// orUnknown is s, or "unknown" for "": Prometheus drops a label whose value is empty.
func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// Ready reports whether this control node can serve: a Raft leader is known and its
// broker accepts clients.
func (d *Daemon) Ready() bool { return notReady(d.raft.Leader(), d.broker.Running()) == "" }

// notReady is what /readyz answers when this control node cannot serve: which of
// the two conditions fails, and where to look; "" when it can.
func notReady(leader string, brokerRunning bool) string {
	var why []string
	if leader == "" {
		why = append(why, "no Raft leader is known (`meshctl control status` names the voters that do not answer)")
	}
	if !brokerRunning {
		why = append(why, "the broker does not accept clients (this node's log says why)")
	}
	if len(why) == 0 {
		return ""
	}
	return "not ready: " + strings.Join(why, "; ")
}

// handler serves /metrics, /healthz and /readyz (and the profiler if asked for).
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{}))
	if d.opts.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(d.raft.Leader(), d.broker.Running()); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		// Whose: another process on the port answered for this one (a review).
		fmt.Fprintf(w, "ready: control node %s of mesh %s\n", d.cfg.Node, d.cfg.Mesh)
	})
	return mux
}

// startingHandler is what the endpoint serves while Open waits for the replicated
// state (a quorum lost, a leader not yet known): alive, not ready, and why; of the
// metrics, Raft's and the process's (the rest come with the state and the broker).
func (d *Daemon) startingHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		why := "no Raft leader is known (`meshctl control status` names the voters that do not answer)"
		if d.raft.Leader() != "" {
			why = "the replicated state is not current yet"
		}
		http.Error(w, "not ready: starting: "+why+"; the broker opens once it is (this node's log says what it waits for)", http.StatusServiceUnavailable)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.startingRegistry(), promhttp.HandlerOpts{}))
	return mux
}

// What one client of the metrics endpoint may hold. The address is not
// authenticated: with only a header timeout, a stranger's 4,100 keep-alive
// connections, one GET each and then silent, were held for minutes, and the
// control node ran out of file descriptors (operators' meshctl failed with it).
// A Prometheus scrape takes one or two connections and well under a second.
const (
	webReadHeaderTimeout = 5 * time.Second
	// webReadTimeout bounds reading a whole request; these take no body.
	webReadTimeout = 10 * time.Second
	// webWriteTimeout bounds writing an answer to a client that reads slowly.
	// Go's profiler (--pprof) extends it by the seconds a CPU profile or a trace
	// is asked to run for (net/http/pprof sets the write deadline of those
	// requests from the server's WriteTimeout), so a 30 s profile is not cut.
	webWriteTimeout = 30 * time.Second
	// webIdleTimeout closes a keep-alive connection that sends no next request.
	webIdleTimeout = 30 * time.Second
	// webMaxConns caps the connections served at once; a connection beyond it
	// waits in the kernel's backlog, taking no descriptor, until one closes.
	webMaxConns = 64
)

// webLimits are the bounds the endpoint serves within: the constants above, and
// shorter ones in tests.
type webLimits struct {
	readHeader, read, write, idle time.Duration
	conns                         int
}

func defaultWebLimits() webLimits {
	return webLimits{readHeader: webReadHeaderTimeout, read: webReadTimeout, write: webWriteTimeout, idle: webIdleTimeout, conns: webMaxConns}
}

// webEndpoint is the HTTP server of /metrics, /healthz and /readyz: one listener
// for the process's life, its handler swapped once the node is open.
type webEndpoint struct {
	srv     *http.Server
	handler atomic.Pointer[http.Handler]
	done    chan error
	// stopWaiting ends the wait for an address another process held at start.
	stopWaiting context.CancelFunc
}

// startWeb listens on addr and serves first. What the HTTP server itself reports (a
// connection it could not serve) goes to log as a warning, structured as the rest.
func startWeb(addr string, first http.Handler, log *slog.Logger) (*webEndpoint, error) {
	return startWebWithin(addr, first, log, defaultWebLimits())
}

// startWebWithin is startWeb with the bounds lim.
//
// An address another process holds does not keep the control node from starting:
// any local user may bind a loopback port first, and would otherwise keep it down.
// It runs on without the endpoint, says so, and serves it once the address is free.
func startWebWithin(addr string, first http.Handler, log *slog.Logger, lim webLimits) (*webEndpoint, error) {
	ln, inUse, err := busyaddr.Listen(addr)
	if err != nil && !inUse {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	e := &webEndpoint{done: make(chan error, 1)}
	e.handler.Store(&first)
	e.srv = &http.Server{ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle,
		MaxHeaderBytes: webMaxHeaderBytes, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*e.handler.Load()).ServeHTTP(w, r) })}
	waitCtx, stopWaiting := context.WithCancel(context.Background())
	e.stopWaiting = stopWaiting
	go func() {
		if ln == nil {
			log.Error("the metrics endpoint's address is held by another process: this control node runs on without it, and serves it as soon as the address is free. "+
				"Until then, what answers there is not this node: if that process is not one of yours, another user may be answering health checks and scrapes in its place",
				"listen", addr, "err", err)
			if ln = busyaddr.Await(waitCtx, addr, webRetry); ln == nil {
				e.done <- http.ErrServerClosed
				return
			}
			log.Info("the metrics endpoint is served now", "listen", addr)
		}
		e.done <- e.srv.Serve(netutil.LimitListener(ln, lim.conns))
	}()
	return e, nil
}

// webMaxHeaderBytes bounds a request's header: a scrape's is a few hundred bytes, and
// Go's default (1 MiB) let any local user hold a megabyte of the node a connection.
const webMaxHeaderBytes = 8 << 10

// webRetry is how often a control node tries again to take a metrics address another
// process held when it started.
const webRetry = 5 * time.Second

// serve makes h what the endpoint serves from now on.
func (e *webEndpoint) serve(h http.Handler) { e.handler.Store(&h) }

// run serves until ctx ends, then shuts the server down.
func (e *webEndpoint) run(ctx context.Context) error {
	select {
	case err := <-e.done:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return ctx.Err()
	case <-ctx.Done():
	}
	e.stopWaiting()
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(shut)
	return ctx.Err()
}

// close stops the server at once.
func (e *webEndpoint) close() {
	e.stopWaiting()
	_ = e.srv.Close()
}
