package daemon

import (
	"context"
	"errors"
	"time"

	"mesh/controlplane/state"
)

// reconcileLoop re-sends, while this node leads, the declarations that live nodes
// have not applied (a push lost to a partition, a leader change).
func (d *Daemon) reconcileLoop(ctx context.Context) error {
	t := time.NewTicker(d.opts.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if d.raft.IsLeader() {
				d.reconcile(d.now())
			}
		}
	}
}

func (d *Daemon) reconcile(now time.Time) {
	d.refresh(now)
	var lagging []string
	d.fsm.Read(func(s *state.State) {
		for id, n := range s.Nodes {
			if n.Revoked {
				continue
			}
			if !d.alive(n, now) {
				continue
			}
			a := n.Applied
			behind := !a.HaveApplied || a.Version < n.Declared.Version
			// A node that verified this very version and could not apply it would
			// only fail again; it retries when a new version comes.
			failedThis := a.ErrorCode == "apply_failed" && a.ErrorVersion == n.Declared.Version
			if behind && !failedThis {
				lagging = append(lagging, id)
			}
		}
	})
	if len(lagging) > 0 {
		d.log.Info("re-sending declarations not yet applied", "nodes", len(lagging))
		d.publishDeclarations(lagging)
	}
}

// refresh re-signs, in one log entry, every declaration past half its validity, and
// sends them: hosts that keep receiving them never go stale.
func (d *Daemon) refresh(now time.Time) {
	var due []string
	d.fsm.Read(func(s *state.State) { due = s.DueForRefresh(now) })
	if len(due) == 0 {
		return
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpRefresh, At: now.UTC(), Refresh: &state.RefreshCmd{Nodes: due}}, 10*time.Second)
	if err != nil || res.Err != nil {
		d.log.Warn("declarations not refreshed; will try again", "nodes", len(due), "err", errors.Join(err, res.Err))
		return
	}
	nodes := make([]string, 0, len(res.Assignments))
	for _, a := range res.Assignments {
		nodes = append(nodes, a.Node)
	}
	d.log.Info("declarations re-signed before they expire", "nodes", len(nodes))
	d.publishDeclarations(nodes)
}
