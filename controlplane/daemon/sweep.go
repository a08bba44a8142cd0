package daemon

import (
	"context"
	"time"

	"mesh/controlplane/state"
)

// tableSweep is how often a control node forgets what its tables (memory.go) hold
// for nodes revoked, tokens and keys whose span is over, budgets refilled and
// connections closed long enough ago. Each sweep visits what is left since the last,
// a few entries per node and per enrolment.
const tableSweep = 10 * time.Second

// sweepTables is the actor that sweeps the tables every tableSweep.
func (d *Daemon) sweepTables(ctx context.Context) error {
	return every(ctx, tableSweep, d.sweep)
}

// sweep forgets, in every table, what no node, token or connection needs any more.
func (d *Daemon) sweep() {
	d.authn.Sweep()
	d.guard.sweep()
	d.presence.Expire()
	// Their closed connections went only as the next close in their account came,
	// weeks later perhaps.
	for _, t := range d.shutOut {
		t.Expire()
	}
	d.forgetGoneNodes()
}

// forgetGoneNodes drops the envelopes and the liveness kept for nodes revoked or no
// longer in the state. The leader forgets a node's liveness as it revokes it, but a
// report in flight marks it again, a follower that led once kept what it heard
// then, and the envelopes of revoked nodes stayed until 4,096 others pushed them out.
func (d *Daemon) forgetGoneNodes() {
	held := append(d.signer.nodes(), d.seen.nodes()...)
	digests := d.signer.bodyDigests()
	if len(held) == 0 && len(digests) == 0 {
		return
	}
	var gone, goneBodies []string
	d.fsm.Read(func(s *state.State) {
		for _, node := range held {
			if n, ok := s.Nodes[node]; !ok || n.Revoked {
				gone = append(gone, node)
			}
		}
		for _, digest := range digests {
			if _, ok := s.Bodies[digest]; !ok {
				goneBodies = append(goneBodies, digest)
			}
		}
	})
	d.signer.dropBodies(goneBodies)
	d.signer.forget(gone)
	for _, node := range gone {
		d.seen.forget(node)
	}
}
