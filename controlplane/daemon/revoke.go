package daemon

import (
	"time"

	"mesh/controlplane/api"
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
			d.log.Error("revocation notice not signed", "node", n.node, "err", err)
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
