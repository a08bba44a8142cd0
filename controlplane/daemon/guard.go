package daemon

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// Reason says why the control plane dropped a message without acting on it. Each is
// counted (Daemon.Dropped, and the metrics) and logged at a bounded rate, never once
// per message: a host that floods must not flood the log too.
type Reason string

// Why messages are dropped.
const (
	// ReasonForeignReply: the reply subject is not the requester's own inbox
	// (another node's subjects, the operator API, another client's inbox). Nothing
	// is sent there.
	ReasonForeignReply Reason = "foreign_reply"
	// ReasonNoReply: a request that needs an answer named no reply subject.
	ReasonNoReply Reason = "no_reply"
	// ReasonTooLarge: over the size budget of its subject.
	ReasonTooLarge Reason = "too_large"
	// ReasonRate: the node sent more than its message budget allows.
	ReasonRate Reason = "rate"
	// ReasonMalformed: not a message of the protocol.
	ReasonMalformed Reason = "malformed"
	// ReasonBadProof: an enrolment request whose key proof does not verify, so the
	// reply subject it names cannot be trusted to be the requester's.
	ReasonBadProof Reason = "bad_proof"
	// ReasonOtherNode: a message naming another node than its subject's.
	ReasonOtherNode Reason = "other_node"
	// ReasonConnections: a node opened more connections than its budget; the newest
	// is closed.
	ReasonConnections Reason = "connections"
)

// Budgets bound what one node may send. Every limit here is enforced by dropping the
// message and, for size, rate and connections, disconnecting the node; the broker
// enforces the hosts account's own caps (payload, subscriptions) before these.
type Budgets struct {
	// MaxEnrol, MaxSync and MaxStatus cap one message on each subject, in bytes.
	MaxEnrol, MaxSync, MaxStatus int
	// Burst and PerSecond are a node's message budget on its sync and status
	// subjects together: Burst at once, refilled at PerSecond.
	Burst     float64
	PerSecond float64
	// MaxConnections caps the connections one node key holds open at once,
	// cluster-wide.
	MaxConnections int
	// SyncAnswerBytes is how many bytes of what the control plane sends onto a
	// node's subjects on its behalf (a sync's answer, a repeated enrolment's, a
	// re-send to a node that has not acknowledged) cost it one more message of its
	// budget, counted once for every copy the broker may deliver: the hosts
	// account's subscription cap on each connection the key holds (payAnswer). A
	// request of a few bytes is answered with the node's whole declaration (up to
	// 1 MiB); at a message each, a stolen identity syncing at its rate had 20 MiB a
	// second sent to it, a connection, and charged a copy a connection, 17 MiB a
	// second on 4 connections of 15 subscriptions each.
	//
	// At 64 KiB, an agent (one connection, 4 copies charged) syncing the largest
	// declaration pays 64 messages of its 200: a sync and a re-send, with the
	// request and a report, take 130, refilled in 6.5 s; a declaration of up to
	// 16 KiB costs it nothing more. What one node can have sent to it is 16 MiB at
	// once (one answer of up to 16 MiB, which costs a full budget: payable) and
	// about 1.6 MiB a second after (1.25 at 64 KiB a message; an answer capped at a
	// full budget sends more a message), whatever it holds; what it can leave in
	// its brokers' memory by not reading is what that pays for within nats-server's
	// 10 s write deadline (docs/security.md, Budgets).
	SyncAnswerBytes int
}

// DefaultBudgets leave honest agents far inside every limit: an agent sends a status
// after each declaration and a heartbeat every 15 s, and syncs once per connection.
func DefaultBudgets() Budgets {
	return Budgets{MaxEnrol: 16 << 10, MaxSync: 1 << 10, MaxStatus: 8 << 10, Burst: 200, PerSecond: 20, MaxConnections: 4,
		SyncAnswerBytes: 64 << 10}
}

func (b Budgets) withDefaults() Budgets {
	d := DefaultBudgets()
	if b.MaxEnrol == 0 {
		b.MaxEnrol = d.MaxEnrol
	}
	if b.MaxSync == 0 {
		b.MaxSync = d.MaxSync
	}
	if b.MaxStatus == 0 {
		b.MaxStatus = d.MaxStatus
	}
	if b.Burst == 0 {
		b.Burst = d.Burst
	}
	if b.PerSecond == 0 {
		b.PerSecond = d.PerSecond
	}
	if b.MaxConnections == 0 {
		b.MaxConnections = d.MaxConnections
	}
	if b.SyncAnswerBytes == 0 {
		b.SyncAnswerBytes = d.SyncAnswerBytes
	}
	return b
}

// DropKey names a counter of dropped messages: the kind of subject and the reason.
type DropKey struct {
	Subject string // "enrol", "sync", "status", "admin", "heartbeat"
	Reason  Reason
}

// guard counts what the control plane refuses to act on, logs it at a bounded rate,
// and keeps each node's message budget.
type guard struct {
	log      *slog.Logger
	now      func() time.Time
	budgets  Budgets
	interval time.Duration // at most one log line per key per interval

	mu      sync.Mutex
	counts  map[DropKey]uint64 // dropped: not acted on, not answered
	refused map[DropKey]uint64 // answered with a refusal
	kicks   map[Reason]uint64  // disconnections for a budget
	logged  map[DropKey]time.Time
	since   map[DropKey]uint64 // since the last line for the key
	buckets map[string]*tokenBucket
	owed    map[string]owedKick // by node key
}

// owedFor is how long a disconnection is owed to a connection the presence tracker
// has not heard of yet: nats-server's connect event can trail the node's messages by
// seconds when the system account is busy.
const owedFor = 10 * time.Second

// owedKick is a disconnection decided for a node key before its connection was
// known (nats-server's connect event comes after the node's first messages).
type owedKick struct {
	at     time.Time
	reason Reason
}

// owe records that key's connection is to be closed as soon as it is known.
func (g *guard) owe(key string, reason Reason) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.owed) > 100_000 {
		clear(g.owed)
	}
	g.owed[key] = owedKick{at: g.now(), reason: reason}
}

// collect returns, and forgets, a disconnection owed to key, if still due for a
// connection the broker accepted at started: one accepted after the offending message
// arrived owes nothing (a second of slack covers the brokers' clocks).
func (g *guard) collect(key string, started time.Time) (Reason, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	o, ok := g.owed[key]
	if !ok {
		return "", false
	}
	delete(g.owed, key)
	if !started.IsZero() && started.After(o.at.Add(time.Second)) {
		return "", false
	}
	return o.reason, g.now().Sub(o.at) < owedFor
}

func newGuard(log *slog.Logger, now func() time.Time, b Budgets) *guard {
	return &guard{
		log: log, now: now, budgets: b.withDefaults(), interval: 10 * time.Second,
		counts: map[DropKey]uint64{}, refused: map[DropKey]uint64{}, kicks: map[Reason]uint64{},
		logged: map[DropKey]time.Time{}, since: map[DropKey]uint64{},
		buckets: map[string]*tokenBucket{}, owed: map[string]owedKick{},
	}
}

// drop counts a message not acted on and not answered. The first of its kind is
// logged at once; later ones at most once per interval, with how many there were
// meanwhile.
func (g *guard) drop(subject string, reason Reason, who, detail string) {
	g.count(g.counts, slog.LevelWarn, "message dropped", subject, reason, who, detail)
}

// refuse counts a request answered with a refusal, logged the same bounded way, at
// refusalLevel.
func (g *guard) refuse(subject string, reason Reason, who, detail string) {
	g.count(g.refused, refusalLevel(subject, reason), "request refused", subject, reason, who, detail)
}

// refusalLevel is the level a refusal is logged at. An operator's request refused
// for what it asked (a node that does not exist, a token pending, a malformed
// selector) is answered to the operator, who reads why there: as a warning, a typo
// in `meshctl revoke` set off alerts on WARN, which are for what goes wrong. What
// hosts and enrolling clients are refused, and an operator's request the control
// plane could not carry out (its fault, not the request's), stay warnings.
func refusalLevel(subject string, reason Reason) slog.Level {
	if subject != subjectAdmin {
		return slog.LevelWarn
	}
	switch string(reason) {
	case api.CodeInternal, api.CodeDiskFull, api.CodeUnavailable:
		return slog.LevelWarn
	case api.CodeCredentialsNotValid, api.CodeNotSigned:
		// Not a typo: credentials revoked, expired or a removed node's at work
		// (a leaked file?), or a request changed since it was signed, which
		// is what an operator alerts on (a review).
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// kicked counts a connection closed for exceeding a budget.
func (g *guard) kicked(reason Reason) {
	g.mu.Lock()
	g.kicks[reason]++
	g.mu.Unlock()
}

func (g *guard) count(into map[DropKey]uint64, level slog.Level, what, subject string, reason Reason, who, detail string) {
	g.mu.Lock()
	into[DropKey{Subject: subject, Reason: reason}]++
	g.mu.Unlock()
	if due, n := g.due(DropKey{Subject: what + " " + subject, Reason: reason}); due {
		g.log.Log(context.Background(), level, what, "subject", subject, "reason", string(reason), "from", who, "detail", clipText(detail, 200), "count", n)
	}
}

// due counts one event of kind lk and reports whether a line is due for it: the
// first at once, later ones at most once per interval. n is how many there were
// since the last line, this one included.
func (g *guard) due(lk DropKey) (due bool, n uint64) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.since[lk]++
	last, seen := g.logged[lk]
	due = !seen || now.Sub(last) >= g.interval
	n = g.since[lk]
	if due {
		g.logged[lk], g.since[lk] = now, 0
	}
	return due, n
}

// connError logs what nats.go reports outside a call on one of the control plane's
// own connections, at most once per interval per kind with the count of the others.
// Clients decide how often some of these happen: nats-server passes on a header
// block as a client wrote it, and each one that does not parse is reported here.
// Without a handler of ours nats.go printed every one to stderr, outside the log and
// its limits. The kind is the connection, the subscription and the error's kind,
// never its text, which may quote what a client chose.
func (g *guard) connError(conn string, sub *nats.Subscription, err error) {
	subject := ""
	if sub != nil {
		subject = sub.Subject
	}
	kind := "other"
	for _, known := range []error{nats.ErrBadHeaderMsg, nats.ErrSlowConsumer, nats.ErrPermissionViolation, nats.ErrAuthorization} {
		if errors.Is(err, known) {
			kind = known.Error()
			break
		}
	}
	if due, n := g.due(DropKey{Subject: "connection error " + conn + " " + subject, Reason: Reason(kind)}); due {
		g.log.Warn("the control plane's connection reported an error", "connection", conn, "subscription", subject,
			"err", clipText(err.Error(), 200), "count", n)
	}
}

// payloadSize is what a client sent in a message it published: its body and its
// headers. The protocol's one header is a sync's tag (api.SyncHeader), but a client
// may send up to the account's payload cap of them, so a budget counted on the body
// alone let 64 KiB through where it allows 1 KiB.
func payloadSize(m *nats.Msg) int {
	return m.Size() - len(m.Subject) - len(m.Reply)
}

// Counts is what the guard counted since the daemon started.
type Counts struct {
	Dropped map[DropKey]uint64
	Refused map[DropKey]uint64
	Kicked  map[Reason]uint64
}

func (g *guard) snapshot() Counts {
	g.mu.Lock()
	defer g.mu.Unlock()
	return Counts{Dropped: maps.Clone(g.counts), Refused: maps.Clone(g.refused), Kicked: maps.Clone(g.kicks)}
}

// entries returns how many budgets and owed disconnections the guard holds.
func (g *guard) entries() (budgets, owed int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.buckets), len(g.owed)
}

// sweep forgets the budgets refilled to full, which a node or client sending again
// gets afresh anyway, and the disconnections no longer owed. Budgets are kept per
// node and per enrolling client (a fresh key each): without it, the guard kept one
// for every node revoked and every enrolment ever made, until a million.
func (g *guard) sweep() {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, b := range g.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*g.budgets.PerSecond >= g.budgets.Burst {
			delete(g.buckets, k)
		}
	}
	for k, o := range g.owed {
		if now.Sub(o.at) >= owedFor {
			delete(g.owed, k)
		}
	}
	// A kind of line whose interval has passed with nothing held back is logged at
	// once next time anyway. Most kinds are fixed, but connError's name the
	// subscription, and some of the control plane's are inboxes made afresh.
	for k, at := range g.logged {
		if g.since[k] == 0 && now.Sub(at) >= g.interval {
			delete(g.logged, k)
			delete(g.since, k)
		}
	}
}

// spend takes one message from node's budget and reports whether it had one.
func (g *guard) spend(node string) bool { return g.spendN(node, 1) }

// answerCost is what sending size bytes (every copy counted) costs the node beyond
// its request, in messages of its budget: one for each SyncAnswerBytes (see
// payable).
func (g *guard) answerCost(size int) float64 {
	return g.payable(float64(size / g.budgets.SyncAnswerBytes))
}

// payable caps a cost in messages at what a full budget less the request and
// answerReserve holds, so that any answer can be paid for once the budget refills.
func (g *guard) payable(n float64) float64 {
	return min(n, max(g.budgets.Burst-1-answerReserve, 0))
}

// spendN takes n messages from node's budget if it holds them, and reports whether
// it did; it takes nothing when it does not.
func (g *guard) spendN(node string, n float64) bool { return g.spendKeeping(node, n, 0) }

// answerReserve is how many messages of a node's budget an answer paid for from it
// leaves: the node's next message (the report an agent sends once it applied what
// it was sent) counted as one past its budget, and disconnected the node, when the
// answer took the last one (a review).
const answerReserve = 2

// spendKeeping is spendN for what leaves at least keep messages in the budget: it
// takes nothing unless the budget holds n+keep.
func (g *guard) spendKeeping(node string, n, keep float64) bool {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.buckets[node]
	if b == nil {
		if len(g.buckets) > 1_000_000 { // bound memory under a spray of node ids
			clear(g.buckets)
		}
		b = &tokenBucket{tokens: g.budgets.Burst, at: now}
		g.buckets[node] = b
	}
	return b.take(now, g.budgets.Burst, g.budgets.PerSecond, n, keep)
}

// tokenBucket is a message budget: up to burst at once, refilled at rate per second.
type tokenBucket struct {
	tokens float64
	at     time.Time
}

// take takes n messages, refilled to now, if at least keep are left after them.
func (b *tokenBucket) take(now time.Time, burst, rate, n, keep float64) bool {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(burst, b.tokens+d.Seconds()*rate)
		b.at = now
	}
	if b.tokens < n+keep {
		return false
	}
	b.tokens -= n
	return true
}

// replyUnder reports whether reply is a subject under prefix (prefix ends in '.').
// A requester chooses its reply subject freely and the broker does not check it
// against the requester's permissions, so the control plane answers only on the
// requester's own inbox and drops everything else. An empty token (`a..b`, a
// trailing '.') makes no subject: the request was carried out (a token spent, a
// sync's envelopes paid for) and its answer refused by the broker as a permissions
// violation of the control plane's own connection (a walkthrough).
func replyUnder(reply, prefix string) bool {
	if len(reply) <= len(prefix) || !strings.HasPrefix(reply, prefix) {
		return false
	}
	rest := reply[len(prefix):]
	return !strings.ContainsAny(rest, "*> \t\r\n") && rest[0] != '.' && rest[len(rest)-1] != '.' && !strings.Contains(rest, "..")
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
