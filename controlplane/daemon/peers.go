package daemon

import (
	"slices"

	"mesh/controlplane/state"
)

// The control nodes accept each other's routes and Raft connections by the pins of
// their TLS keys, recorded in the replicated state when each was admitted
// (docs/decisions/0014). Every leaf of the mesh CA is good for ten years: without
// pins, a control node removed from the mesh could route back in and speak Raft as
// the leader.

// clusterPins returns the pins routes and Raft accept, or nil to accept every leaf
// of the mesh CA: before the state names any control node (a node that is joining
// and has not caught up), or while an active node has no pin recorded (it joined
// before pins were), since checking an incomplete list would cut it off.
func clusterPins(s *state.State) []string {
	pins, unpinned := s.ControlPins()
	if len(pins) == 0 || len(unpinned) > 0 {
		return nil
	}
	return pins
}

// peerAllowed is the Raft transport's check of a peer's pin, asked at every
// handshake.
func (d *Daemon) peerAllowed(pin string) bool {
	var pins []string
	d.fsm.Read(func(s *state.State) { pins = clusterPins(s) })
	return pins == nil || slices.Contains(pins, pin)
}

// clusterPeers returns the pins routes accept and the cluster addresses of the
// other active control nodes, which this node's broker routes to.
func (d *Daemon) clusterPeers() (pins, routes []string) {
	d.fsm.Read(func(s *state.State) {
		pins = clusterPins(s)
		for _, c := range s.ActiveControlNodes() {
			if c.ID != d.cfg.Node {
				routes = append(routes, c.Cluster)
			}
		}
	})
	return pins, routes
}

// updateClusterPeers makes the broker and Raft follow a change of the control
// nodes: a removed node's routes and Raft connections are closed, a new node's
// accepted and its route solicited.
func (d *Daemon) updateClusterPeers() {
	pins, routes := d.clusterPeers()
	if err := d.broker.SetClusterPeers(pins, routes); err != nil {
		d.log.Error("the broker's routes do not follow the control nodes' change", "err", err)
	}
	d.raft.DropPeersNotAllowed()
}

// warnUnpinned tells the operator, at start, that routes and Raft take any leaf of
// the mesh CA because a control node has no pin recorded.
func (d *Daemon) warnUnpinned() {
	var unpinned []string
	d.fsm.Read(func(s *state.State) { _, unpinned = s.ControlPins() })
	if len(unpinned) > 0 {
		d.log.Warn("some control nodes joined before the mesh recorded their TLS keys: routes and Raft accept any certificate of the mesh CA, and removing a control node cannot shut its certificate out. "+
			"Join each of them again (meshctl control remove, then a new control token and meshctl join on a fresh data directory) to record it",
			"nodes", unpinned)
	}
}
