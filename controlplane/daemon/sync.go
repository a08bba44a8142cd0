package daemon

import (
	"encoding/json"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// nodeOf extracts the node id from mesh.node.<id>.<suffix>. The broker only lets a
// node publish on its own subjects, so the subject names the sender.
func nodeOf(subject string) string {
	rest := strings.TrimPrefix(subject, api.NodePrefix)
	if i := strings.IndexByte(rest, '.'); i > 0 {
		return rest[:i]
	}
	return ""
}

// handleSync answers a node asking for its current state: the keyrings it has not
// seen, the brokers' membership if it holds an older one, and its declaration are
// published on its declaration subject, and the reply, on the node's own inbox only,
// says how many.
func (d *Daemon) handleSync(m *nats.Msg) {
	node := nodeOf(m.Subject)
	if !d.admitNodeMessage("sync", node, m, d.guard.budgets.MaxSync) {
		return
	}
	if !replyUnder(m.Reply, api.NodeInbox(node)+".") {
		d.dropReply("sync", node, m.Reply)
		return
	}
	d.seen.mark(node, d.now())
	resp := api.SyncResponse{V: api.ProtocolVersion}
	req, err := api.Decode[api.SyncRequest](m.Data)
	var envs [][]byte
	if err != nil {
		resp.Error = &api.Error{Code: api.CodeBadRequest, Message: err.Error()}
	} else {
		var (
			in       state.DeclarationInput
			ok       bool
			members  state.MembershipInput
			keyrings []json.RawMessage
		)
		d.fsm.Read(func(s *state.State) {
			if in, ok = s.DeclarationInput(node); !ok {
				return
			}
			keyrings = s.KeyringChain(req.KeyringEpoch)
			members = s.MembershipInput()
		})
		// What the node lacks, and only that: keyrings after its epoch, a newer
		// membership, and its declaration unless it holds it applied already.
		var env []byte
		switch {
		case !ok:
			resp.Error = &api.Error{Code: api.CodeNotFound, Message: "no such node"}
		case req.HasDeclared(in.Declared.Version, in.Declared.ExpiresAt):
		default:
			// The agent asking says whether it takes an envelope from a batch
			// (one kept from a fan-out), not the node's record: it may have been
			// downgraded since its last report.
			in.BatchProofs = req.BatchProofs
			if env, err = d.signer.declaration(in); err != nil {
				resp.Error = &api.Error{Code: api.CodeInternal, Message: err.Error()}
			}
		}
		if resp.Error == nil {
			for _, kr := range keyrings {
				envs = append(envs, kr)
			}
			if req.MembershipVersion < members.Version {
				m, err := d.signer.membership(members, d.now().UTC().Truncate(time.Second))
				if err != nil {
					d.logRepeated(slog.LevelError, "membership not signed", "node", node, "err", err)
				} else {
					envs = append(envs, m)
				}
			}
			if env != nil {
				envs = append(envs, env)
			}
			// What is sent is paid for from the node's budget as the request was:
			// a few bytes asking, again and again, for a declaration of a megabyte,
			// delivered to every subscription the node holds on its subject.
			size := 0
			for _, e := range envs {
				size += len(e)
			}
			if !d.payAnswer(node, in.NodeKey, size) {
				d.guard.refuse("sync", ReasonRate, node, "the node asked for its declaration again faster than its budget pays for sending it")
				resp.Error = &api.Error{Code: api.CodeUnavailable, Message: "this node asked for its declaration again faster than its message budget allows for its size: ask again in a few seconds"}
				envs = nil
			}
		}
	}
	// In order, on one connection: each keyring before what it signs. Tagged, when
	// the node tagged its request, so that a declaration pushed to it meanwhile does
	// not count as one of these.
	var header nats.Header
	if tag := syncTag(m); tag != "" {
		header = nats.Header{api.SyncHeader: []string{tag}}
	}
	for _, env := range envs {
		out := &nats.Msg{Subject: api.DeclarationSubject(node), Data: env, Header: header}
		if err := d.conns.publisher.PublishMsg(out); err != nil {
			d.logRepeated(slog.LevelWarn, "sync: envelope not sent", "node", node, "err", err)
		}
	}
	resp.Sent = len(envs)
	data, _ := json.Marshal(resp)
	if err := d.conns.hosts.PublishMsg(&nats.Msg{Subject: m.Reply, Data: data, Header: header}); err != nil {
		d.logRepeated(slog.LevelWarn, "sync reply not sent", "node", node, "err", err)
	}
}

// payAnswer takes from budget what sending size bytes onto the subjects of key (a
// node's, or an enrolling client's) costs, and reports whether the budget paid: the
// guard's answerCost of every copy the broker may deliver. Each connection of the
// key may hold the hosts account's cap of subscriptions on the subject (the broker's
// HostLimits), and each receives its own copy: charged a copy a connection, a host
// holding 15 subscriptions on each of its 4 connections was sent 15 times what its
// budget paid for, 17 MiB a second.
func (d *Daemon) payAnswer(budget, key string, size int) bool {
	perConn := int(d.broker.HostLimits().MaxSubscriptions)
	// The presence lock, only when the answer may cost anything (a key holds more
	// than MaxConnections only until the newest are closed).
	if size*d.guard.budgets.MaxConnections*perConn < d.guard.budgets.SyncAnswerBytes {
		return true
	}
	cost := d.guard.answerCost(size * d.copies(key, perConn))
	return cost == 0 || d.guard.spendKeeping(budget, cost, answerReserve)
}

// copies is how many copies of a message published on one of key's subjects the
// broker may deliver: perConn on each connection of the key, and on one, for a
// connection nats-server has not announced yet.
func (d *Daemon) copies(key string, perConn int) int {
	return max(1, d.presence.Open(key)) * perConn
}

// syncTag returns the tag of a sync request (api.SyncHeader), or "" if it has none
// or one that is not a number of at most api.MaxSyncTag digits: the node chooses it,
// and it is only ever sent back to the node.
func syncTag(m *nats.Msg) string {
	tag := m.Header.Get(api.SyncHeader)
	if tag == "" || len(tag) > api.MaxSyncTag {
		return ""
	}
	for _, c := range []byte(tag) {
		if c < '0' || c > '9' {
			return ""
		}
	}
	return tag
}

// admitNodeMessage checks a message on one of node's subjects against its budgets:
// its size, and the node's message rate. A node over either is disconnected (on
// whichever broker holds it) and the message dropped.
func (d *Daemon) admitNodeMessage(kind, node string, m *nats.Msg, maxSize int) bool {
	if node == "" {
		d.guard.drop(kind, ReasonMalformed, m.Subject, "no node in the subject")
		return false
	}
	switch {
	case payloadSize(m) > maxSize:
		d.guard.drop(kind, ReasonTooLarge, node, "message over the subject's budget")
		d.disconnectNode(node, ReasonTooLarge)
		return false
	case !d.guard.spend(node):
		d.guard.drop(kind, ReasonRate, node, "message rate over the node's budget")
		d.disconnectNode(node, ReasonRate)
		return false
	}
	return true
}

// dropReply counts a request whose reply subject is not the requester's own inbox.
// Nothing is sent there: a requester chooses its reply subject freely, and answering
// it would publish the control plane's answer wherever the requester liked.
func (d *Daemon) dropReply(kind, who, reply string) {
	if reply == "" {
		d.guard.drop(kind, ReasonNoReply, who, "no reply subject")
		return
	}
	d.guard.drop(kind, ReasonForeignReply, who, "reply subject "+reply+" is not the requester's inbox")
}

// disconnectNode closes every connection of node, cluster-wide. A flood puts many
// over-budget messages in the queue at once; each connection is asked to close once.
// A node whose connection nats-server has not announced yet (its connect event can
// trail its first messages) owes the disconnection, paid when it is announced.
func (d *Daemon) disconnectNode(node string, why Reason) {
	if n, ok := d.nodeKey(node); ok {
		d.disconnectKey(n, why)
	}
}

// disconnectKey closes every connection of the hosts account that logged in with
// key (a node's, or an enrolling client's), cluster-wide, as disconnectNode does.
func (d *Daemon) disconnectKey(key string, why Reason) {
	// The brokers that held its connections refuse the key for a while once they
	// close them (connectionKicked, decision 0038).
	asked, open := d.presence.Kick(key)
	switch {
	case asked > 0:
		d.guard.kicked(why)
	case open == 0:
		d.guard.owe(key, why)
	}
}

// kickAll closes every connection of account a (revoked keys, or removed control
// nodes' operator credentials) whose user accept picks, or all when accept is nil.
func (d *Daemon) kickAll(a broker.Account, why Reason, accept func(user string) bool) {
	t := d.shutOut[a]
	if t == nil {
		return
	}
	for _, user := range t.Users() {
		if accept != nil && !accept(user) {
			continue
		}
		if asked, _ := t.Kick(user); asked > 0 {
			d.guard.kicked(why)
		}
	}
}

// nodeKey returns the public key node is enrolled with.
func (d *Daemon) nodeKey(node string) (string, bool) {
	var key string
	d.fsm.Read(func(s *state.State) {
		if n, ok := s.Nodes[node]; ok {
			key = n.PublicKey
		}
	})
	return key, key != ""
}
