package daemon

import (
	"context"
	"slices"
	"time"

	"mesh/controlplane/replication"
)

// routeGrace is how long a control node's broker may lack a route to the leader's
// before the node says so: nats-server redials an explicit route every second, and a
// restarted leader's broker is back within a few.
const routeGrace = 10 * time.Second

// routeWatch tells an operator when this node's broker has no NATS route while Raft
// shows the leader running elsewhere. Operators and hosts connected to this node
// then reach nothing of the leader (the operator API, syncs, reports), and meshctl
// says only that no control node answered, while Raft itself, over its own
// transport, looks healthy.
type routeWatch struct {
	since  time.Time // when the routes were first seen missing; zero while up
	warned bool
}

// observe takes one look: whether a route is needed (a leader elsewhere that Raft
// heard from lately) and whether any is up. It says to warn once routeGrace has
// passed without one, once an episode, and recovered when a route is back after a
// warning. An episode that ends because no route is needed any more (this node
// leads, or Raft lost the leader) ends without a word.
func (w *routeWatch) observe(now time.Time, needed, up bool) (warn, recovered bool) {
	if !needed || up {
		recovered = w.warned && up
		*w = routeWatch{}
		return false, recovered
	}
	if w.since.IsZero() {
		w.since = now
	}
	if !w.warned && now.Sub(w.since) >= routeGrace {
		w.warned = true
		return true, false
	}
	return false, false
}

// watchRoutes runs the route watch every heartbeat. A change in the peer brokers
// routed to, or connections counted of a broker not routed to, also asks for a
// presence listing at once (syncPresence): a broker that stopped or died announced no
// disconnections, and the connections it held are forgotten once it is found gone;
// one cut off for a while and back lists its connections again, without waiting for
// the periodic listing (a minute). A broker that came and went between two looks
// leaves the peers as they were: its hosts' connections, announced meanwhile, are
// what says it was there (a control node restarted, its hosts back on it within a
// second, then removed: the others counted them for the next minute).
func (d *Daemon) watchRoutes(ctx context.Context) error {
	var w routeWatch
	var iso isolation
	stranded := strandedGrace(d.opts.Timeouts.Heartbeat)
	if d.opts.Timeouts.Heartbeat == 0 {
		stranded = strandedGrace(replication.DefaultTimeouts().Heartbeat)
	}
	peers := d.broker.Peers()
	slices.Sort(peers)
	return every(ctx, HeartbeatInterval, func() {
		now := d.broker.Peers()
		slices.Sort(now)
		if !slices.Equal(now, peers) || len(d.presence.Stranded()) > 0 {
			select {
			case d.peersChanged <- struct{}{}:
			default:
			}
		}
		peers = now
		// Raft's contact time is its own wall clock, hence time.Since.
		leader, contact := d.raft.Leader(), d.raft.LastContact()
		needed := !d.raft.IsLeader() && leader != "" && leader != d.cfg.Node &&
			!contact.IsZero() && time.Since(contact) < 3*HeartbeatInterval
		routes := d.broker.NumRoutes()
		warn, recovered := w.observe(d.now(), needed, routes > 0)
		switch {
		case warn:
			d.log.Warn("this node's broker has no NATS route to the other control nodes, though Raft hears the leader: "+
				"operators and hosts connected here cannot reach the leader; the cluster port (--cluster-listen) must be reachable both ways with mutual TLS",
				"leader", leader, "for", routeGrace)
		case recovered:
			d.log.Info("NATS route to the other control nodes up again", "routes", routes)
		}
		heard := d.raft.IsLeader() || (leader != "" && !contact.IsZero() && time.Since(contact) < 3*HeartbeatInterval)
		voters := 0
		if members, err := d.raft.Members(); err == nil {
			for _, m := range members {
				if m.Voter {
					voters++
				}
			}
		}
		shed, unshed := iso.observe(d.now(), heard, voters, len(now), stranded)
		switch {
		case shed:
			n, err := d.broker.Shed()
			d.log.Warn("this control node is cut off from the other control nodes (it hears no leader, and routes to too few brokers for a quorum or has heard none for long): "+
				"its broker sends its hosts to the others and refuses hosts until it hears a leader again; "+
				"check the network between control nodes, both ways (Raft and cluster ports)",
				"hosts_moved", n, "routed_peers", len(now), "voters", voters, "err", err)
		case unshed:
			d.broker.Unshed()
			d.log.Info("this control node hears a leader again; its broker admits hosts", "routed_peers", len(now))
		}
	})
}

// every runs fn every interval until ctx ends, and returns ctx's error.
func every(ctx context.Context, interval time.Duration, fn func()) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			fn()
		}
	}
}
