package daemon

import (
	"encoding/json"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/state"
)

// RevokeGrace is how long a revoked node has to leave on its own, once its signed
// notice is sent, before the brokers close its connections for it. The notice
// should reach the agent first, so that it stops and says why rather than
// reconnecting into refusals; the broker refuses the node's key from the commit on,
// so nothing the node sends in the meantime is acted on.
const RevokeGrace = 250 * time.Millisecond

// revokedNode is a node just revoked and the key it was enrolled with.
type revokedNode struct{ node, key string }

// enforceRevocations tells each node, with a signed notice bound to the key it was
// enrolled with, that it was revoked, and closes its connections on every broker of
// the mesh after RevokeGrace. The leader does it, right after the commit; it does
// not wait for the grace, so an operator revoking many nodes one by one is not held
// up, and neither is anyone else. A connection the tracker hears of later for a
// revoked key is closed as it is announced (connectionChanged), and a new leader
// closes what a lost one left (closeRevokedConnections).
func (d *Daemon) enforceRevocations(nodes []revokedNode) {
	at := d.now().UTC().Truncate(time.Second)
	for _, n := range nodes {
		notice, err := d.signer.revocation(d.cfg.Mesh, n.node, n.key, at)
		if err != nil {
			d.logRepeated(slog.LevelError, "revocation notice not signed", "node", n.node, "err", err)
			continue
		}
		_ = d.conns.publisher.Publish(api.DeclarationSubject(n.node), notice)
	}
	_ = d.conns.publisher.FlushTimeout(time.Second)
	for _, n := range nodes {
		d.seen.forget(n.node)
	}
	time.AfterFunc(RevokeGrace, func() {
		for _, n := range nodes {
			d.presence.Kick(n.key)
		}
	})
}

// closeRevokedConnections closes every connection the tracker knows of that belongs
// to a revoked key. The leader runs it when it takes over and after each listing of
// the brokers' connections: a revocation whose leader was lost before its grace
// ended, or a connection whose announcement was missed, is closed there.
func (d *Daemon) closeRevokedConnections() {
	if !d.raft.IsLeader() {
		return
	}
	for _, user := range d.presence.Users() {
		if d.fsm.KeyRevoked(user) {
			d.presence.Kick(user)
		}
	}
}

// handleRevokedSync answers a revoked node's key asking for its state, in the
// revoked account, where the broker admits such a key for a few seconds
// (authn.RevokedGrant): the signed notice of each revocation of the node, on its
// declaration subject there, and how many on its inbox. The agent stops on the
// notice bound to its own key, and only on a signed notice: a bare refusal could come
// from anyone holding a leaf of the mesh CA (docs/decisions/0016). The node's rate
// budget is its own, apart from that of a node enrolled since under the id, which a
// revoked key must not be able to spend.
func (d *Daemon) handleRevokedSync(m *nats.Msg) {
	const kind = "revoked_sync"
	node := nodeOf(m.Subject)
	switch {
	case node == "":
		d.guard.drop(kind, ReasonMalformed, m.Subject, "no node in the subject")
		return
	case payloadSize(m) > d.guard.budgets.MaxSync:
		d.guard.drop(kind, ReasonTooLarge, node, "message over the subject's budget")
		return
	case !d.guard.spend(authn.RevokedUserPrefix + node):
		d.guard.drop(kind, ReasonRate, node, "message rate over the revoked node's budget")
		// Its keys' connections are closed: each lives 10 s, and a flood over it
		// cost the leader millions of dropped messages.
		d.kickAll(broker.AccountRevoked, ReasonRate, func(key string) bool {
			n, revoked := d.fsm.RevokedKey(key)
			return revoked && n == node
		})
		return
	case !replyUnder(m.Reply, api.NodeInbox(node)+"."):
		d.dropReply(kind, node, m.Reply)
		return
	}
	now := d.now().UTC().Truncate(time.Second)
	resp := api.SyncResponse{V: api.ProtocolVersion}
	// The keyrings after the one the agent holds come first: a notice is signed
	// with the signing key of now, and an agent that was stopped while the key
	// was rotated and the old one retired refused it as signed by a key it does
	// not trust, and ran on for ever on its last declaration. The keyrings are
	// public (the signing keys' public halves, each signed by the one before).
	// A request that cannot be read still gets its notices.
	var chain []json.RawMessage
	req, err := api.Decode[api.SyncRequest](m.Data)
	if err == nil {
		d.fsm.Read(func(s *state.State) { chain = s.KeyringChain(req.KeyringEpoch) })
	}
	size := 0
	for _, kr := range chain {
		size += len(kr)
	}
	if cost := d.guard.answerCost(size); cost > 0 && !d.guard.spendN(authn.RevokedUserPrefix+node, cost) {
		d.guard.refuse(kind, ReasonRate, node, "the revoked node asked for the keyrings again faster than its budget pays for sending them")
		chain = nil
	}
	var header nats.Header
	if tag := syncTag(m); tag != "" {
		header = nats.Header{api.SyncHeader: []string{tag}}
	}
	for _, kr := range chain {
		if err := d.conns.revoked.PublishMsg(&nats.Msg{Subject: api.DeclarationSubject(node), Data: kr, Header: header}); err != nil {
			d.logRepeated(slog.LevelWarn, "keyring not sent to a revoked node", "node", node, "err", err)
			continue
		}
		resp.Sent++
	}
	revocations := d.fsm.Revocations(node)
	if req.Key != "" {
		// The agent names its key: its own notice is the one it stops on, and an
		// id replaced every week has dozens of others.
		if i := slices.IndexFunc(revocations, func(r state.Revocation) bool { return r.Key == req.Key }); i >= 0 {
			revocations = revocations[i : i+1]
		}
	}
	// Each notice is signed afresh, one for each time the id was revoked, unless
	// the request names one of its keys (older agents name none). Each beyond the
	// first costs the id's budget a message, so a revoked key asking again and
	// again costs at most the budget's rate in signatures.
	if extra := d.guard.payable(float64(len(revocations) - 1)); extra > 0 && !d.guard.spendN(authn.RevokedUserPrefix+node, extra) {
		d.guard.refuse(kind, ReasonRate, node, "the revoked node asked for its notices again faster than its budget pays for signing them")
		resp.Error = &api.Error{Code: api.CodeUnavailable, Message: "asked for the revocation notices again faster than the budget allows for how many there are: ask again in a few seconds"}
		revocations = nil
	}
	for _, r := range revocations {
		at := r.At
		if at.IsZero() {
			at = now
		}
		notice, err := d.signer.revocation(d.cfg.Mesh, node, r.Key, at.UTC().Truncate(time.Second))
		if err != nil {
			d.logRepeated(slog.LevelError, "revocation notice not signed", "node", node, "err", err)
			continue
		}
		if err := d.conns.revoked.PublishMsg(&nats.Msg{Subject: api.DeclarationSubject(node), Data: notice, Header: header}); err != nil {
			d.logRepeated(slog.LevelWarn, "revocation notice not sent", "node", node, "err", err)
			continue
		}
		resp.Sent++
	}
	data, _ := json.Marshal(resp)
	if err := d.conns.revoked.PublishMsg(&nats.Msg{Subject: m.Reply, Data: data, Header: header}); err != nil {
		d.logRepeated(slog.LevelWarn, "sync reply to a revoked node not sent", "node", node, "err", err)
	}
}
