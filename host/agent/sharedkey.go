package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/wire"
)

// A machine imaged after its enrolment (a VM template, a disk or a state directory
// copied) runs a second agent with this node's key. The mesh cannot tell the two
// apart: both receive every declaration, secrets included, and their reports
// overwrite each other. What the mesh sees is two connections with one key; once that
// lasts past a reconnection, it answers each status report that names a reply
// subject with the connections holding the key (wire.StatusAnswer), and each agent
// says so: a line in its log, and `meshhost status`.

// sharedKeyLogEvery is how often the agent logs again that another machine holds its
// key while the mesh keeps saying so, the same machines: at every heartbeat it would
// bury the rest of the log. Other machines are news, logged at once.
const sharedKeyLogEvery = 10 * time.Minute

// sharedKeyLogGap is the least time between two such lines, other machines named
// or not: a heartbeat's interval.
const sharedKeyLogGap = 15 * time.Second

// sharedKeyShownFor is how many heartbeats `meshhost status` shows what the mesh
// last said after it stopped saying it (the other machine stopped, or was enrolled
// again): the mesh tells at every report while it lasts, and nothing once it is over.
const sharedKeyShownFor = 3

// sharedKey is what the mesh last said of this node's key held elsewhere.
type sharedKey struct {
	// from are the other connections' addresses as the mesh's brokers see them,
	// connections how many hold the key, this one included, and since when the
	// oldest of the others was seen. toldAt is when the mesh last said it.
	from        []string
	connections int
	since       time.Time
	toldAt      time.Time
	// loggedAt and loggedFrom are when it was last logged, and of which addresses.
	loggedAt   time.Time
	loggedFrom string
}

// noRespondersHeader and noResponders are the header and value of the message the
// broker sends to a request's reply subject when nothing subscribes to its subject
// (nats.go's statusHdr and noResponders, unexported there).
const (
	noRespondersHeader = "Status"
	noResponders       = "503"
)

// statusInbox subscribes to the inbox the agent's status reports name as their reply
// subject, on nc for as long as it lives (nats.go subscribes again after a
// reconnection), and returns it; "" when it could not, and the reports then name
// none.
func (a *Agent) statusInbox(nc *nats.Conn) (string, func()) {
	inbox := nc.NewInbox()
	sub, err := nc.Subscribe(inbox, func(m *nats.Msg) {
		if len(m.Data) == 0 && m.Header.Get(noRespondersHeader) == noResponders {
			// The broker says no one serves status reports where this
			// connection is: between two leaders, or a revoked key's, in the
			// revoked account, while it waits for its notice. Nothing was
			// answered: at each change of leader the whole fleet warned.
			return
		}
		a.statusAnswered(nc, m.Data)
	})
	if err != nil {
		a.log.Warn("no inbox for the mesh's answers to status reports: this agent will not hear that another machine holds its key", "err", err)
		return "", func() {}
	}
	return inbox, func() { _ = sub.Unsubscribe() }
}

// statusAnswered handles the mesh's answer to a status report. It runs on nats.go's
// goroutine for the subscription, one answer at a time.
func (a *Agent) statusAnswered(nc *nats.Conn, data []byte) {
	ans, err := wire.DecodeReply[wire.StatusAnswer](data)
	if err != nil {
		if ok, held := a.refusals.allow("status answer", a.o.Now()); ok {
			a.log.Warn("the mesh's answer to a status report was not understood", append([]any{"err", err}, heldBack(held)...)...)
		}
		return
	}
	if len(ans.SharedKey) < 2 {
		return
	}
	// This connection, as the broker named it to this agent, is one of them; the
	// others are the other machines. If it is not found (a broker that does not say
	// the connection's id), every one is named.
	server := nc.ConnectedServerId()
	cid, _ := nc.GetClientID()
	others := slices.DeleteFunc(slices.Clone(ans.SharedKey), func(h wire.KeyHolder) bool { return h.Server == server && h.CID == cid })
	if len(others) == 0 {
		return
	}
	var from []string
	since := others[0].Since
	for _, h := range others {
		addr := h.Addr
		if addr == "" {
			addr = "unknown"
		}
		if !slices.Contains(from, addr) {
			from = append(from, addr)
		}
		if !h.Since.IsZero() && (since.IsZero() || h.Since.Before(since)) {
			since = h.Since
		}
	}
	now := a.o.Now()
	fromText := strings.Join(from, ", ")
	var logNow bool
	a.stats.set(func(s *stats) {
		k := &s.sharedKey
		k.from, k.connections, k.since, k.toldAt = from, len(ans.SharedKey), since, now
		// Other machines named at once, the same again every sharedKeyLogEvery, and
		// never more than a line each sharedKeyLogGap: only the control plane may
		// answer into this inbox, but a hostile one (or broker) that changed the
		// addresses at every answer would have filled the journal (a review).
		if k.loggedAt.IsZero() || now.Sub(k.loggedAt) >= sharedKeyLogEvery || fromText != k.loggedFrom && now.Sub(k.loggedAt) >= sharedKeyLogGap {
			k.loggedAt, k.loggedFrom, logNow = now, fromText, true
		}
	})
	if logNow {
		a.log.Error("another machine holds this node's key (cloned after its enrolment?): both receive every declaration, secrets included, and the mesh cannot tell them apart; have the node revoked (meshctl revoke NODE) and enrol each machine again with a token of its own",
			"from", fromText, "connections", len(ans.SharedKey), "since", since.UTC().Format(time.RFC3339))
	}
}

// SharedKeyStatus is what `meshhost status` says of this node's key held by another
// machine, as the mesh last told the agent.
type SharedKeyStatus struct {
	// From are the other machines' addresses as the mesh's brokers see them.
	From []string `json:"from"`
	// Connections is how many connections hold the key, this one included.
	Connections int `json:"connections"`
	// Since is when the mesh first saw the oldest of the others; ToldAt when it
	// last said so.
	Since  time.Time `json:"since,omitzero"`
	ToldAt time.Time `json:"told_at"`
}

// sharedKeyStatus is what the mesh last said, while it still says it (within
// sharedKeyShownFor heartbeats); nil otherwise. The caller holds s.mu.
func (a *Agent) sharedKeyStatus(s *stats) *SharedKeyStatus {
	k := s.sharedKey
	if k.toldAt.IsZero() || a.o.Now().Sub(k.toldAt) > sharedKeyShownFor*a.o.Heartbeat {
		return nil
	}
	return &SharedKeyStatus{From: slices.Clone(k.from), Connections: k.connections, Since: k.since, ToldAt: k.toldAt}
}
