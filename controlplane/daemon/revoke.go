package daemon

import (
	"time"

	"mesh/controlplane/api"
)

// enforceRevocation tells the node, with a signed notice bound to the key it was
// enrolled with, that it was revoked, then closes its connections on this control
// node's broker. The notice goes first so the agent can stop with the right message
// instead of retrying.
//
// It returns how many connections the node had open on this broker when the
// revocation was enforced: the agent usually leaves on the notice, before the kick.
func (d *Daemon) enforceRevocation(node, key string) int {
	open := 0
	// nats-server knows an nkey client by its key, not by the name we granted.
	if conns, err := d.broker.Connections(); err == nil {
		open = conns[key]
	}
	notice, err := d.signer.revocation(d.cfg.Mesh, node, key, d.now().UTC().Truncate(time.Second))
	if err == nil {
		_ = d.conns.publisher.Publish(api.DeclarationSubject(node), notice)
		_ = d.conns.publisher.FlushTimeout(time.Second)
		// Give the broker a moment to write the notice out before the kick closes
		// the socket.
		time.Sleep(100 * time.Millisecond)
	} else {
		d.log.Error("revocation notice not signed", "node", node, "err", err)
	}
	n, err := d.broker.Kick(key)
	if err != nil {
		d.log.Error("could not close the revoked node's connections", "node", node, "err", err)
	}
	d.seen.forget(node)
	return max(open, n)
}
