package daemon

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/presence"
	"mesh/controlplane/state"
)

// A node's key held by more than one connection at once is an agent that
// reconnected before its broker saw the old connection end, for as long as the broker
// takes to notice (broker.SilentClientClosedWithin), or a second machine holding the
// key: one cloned after its enrolment, which the control plane cannot tell from the
// first. Each applies every declaration, secrets included, and their reports
// overwrite each other, so what the node seems to have applied flips between them.
// Past Options.SharedKeyGrace the node is failing api.KeyShared: `status` and
// `declare --wait` exit 5 naming it, the metrics count it failing, and the agents,
// told in the answer to their status reports, log it and `meshhost status` says it.

// keyShared reports since when key has been held by more than one connection at once
// (zero when it is not), and whether that has lasted past the grace at now.
func (d *Daemon) keyShared(key string, now time.Time) (since time.Time, past bool) {
	if d.presence == nil || key == "" {
		return time.Time{}, false
	}
	since, ok := d.presence.SharedSince(key)
	if !ok {
		return time.Time{}, false
	}
	return since, now.Sub(since) >= d.opts.SharedKeyGrace
}

// keySharedError is the error a node whose key has been shared past the grace shows
// in place of its own (api.KeyShared): reports that flip between two machines say
// nothing reliable of either. What a table's column keeps of it comes first (how
// many, how long, from where), what to do last, where a verdict's cut keeps it.
func (d *Daemon) keySharedError(n *state.Node, since, now time.Time) *api.StatusError {
	holders := d.presence.Holders(n.PublicKey)
	return &api.StatusError{Code: api.KeyShared, Version: n.Declared.Version, Message: api.CleanText(fmt.Sprintf(
		"held by %d connections for %s, from %s: two machines hold this node's key (one cloned after its enrolment?), each receiving every declaration, secrets included; revoke the node and enrol each machine again with a token of its own",
		len(holders), now.Sub(since).Round(time.Second), holderAddrs(holders)), api.MaxStatusMessageLen)}
}

// holderAddrs names where connections come from, each address once, in the order
// given ("unknown" for a broker that did not say).
func holderAddrs(holders []presence.Holder) string {
	var addrs []string
	for _, h := range holders {
		a := h.Addr
		if a == "" {
			a = "unknown"
		}
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return strings.Join(addrs, ", ")
}

// tellKeyShared answers a node's status report, on the reply subject it named, with
// the connections holding its key, when more than one has held it past the grace.
// Only then: a report is a heartbeat, and a fleet's are not each answered. Each agent
// holding the key reports, so each is told, and finds its own connection among
// them.
//
// Every report of a fleet passes here: the cheap test, which allocates nothing,
// comes first.
func (d *Daemon) tellKeyShared(m *nats.Msg, node, key string, now time.Time) {
	if m.Reply == "" {
		return
	}
	if _, past := d.keyShared(key, now); !past {
		return
	}
	if !replyUnder(m.Reply, api.NodeInbox(node)+".") {
		// Answered anywhere else, the answer would go where the node liked; the
		// report itself counts all the same.
		return
	}
	holders := d.presence.Holders(key)
	if len(holders) < 2 {
		return
	}
	answer := api.StatusAnswer{V: api.ProtocolVersion}
	// Bounded: the node's own budget caps its connections (MaxConnections), and a
	// reply must stay small.
	for _, h := range holders[:min(len(holders), maxKeyHoldersTold)] {
		answer.SharedKey = append(answer.SharedKey, api.KeyHolder{Server: h.Server, CID: h.CID, Addr: h.Addr, Since: h.Since.UTC()})
	}
	data, _ := json.Marshal(answer)
	// Paid for from the node's budget as a sync's answer is (a review found it
	// free): the clones' reports, each answered to every subscription they hold.
	if !d.payAnswer(node, key, len(data)) {
		d.guard.refuse(subjectStatus, ReasonRate, node, "the node's reports came faster than its budget pays for telling it of the other connections holding its key")
		return
	}
	if err := d.conns.hosts.Publish(m.Reply, data); err != nil {
		d.logRepeated(slog.LevelWarn, "status answer not sent", "node", node, "err", err)
	}
}

// maxKeyHoldersTold bounds the connections a node is told of.
const maxKeyHoldersTold = 16
