package daemon

import (
	"log/slog"
	"slices"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// tellBrokers runs on every control node when the control nodes changed, and on a
// new leader. The leader sends every node the current signed list of brokers (and
// logs done); every control node writes the list into its own mesh.json, so that
// meshctl run with any control node's data directory tries every broker, not only
// the ones known when it joined.
func (d *Daemon) tellBrokers(done string) {
	var (
		members state.MembershipInput
		targets []string
	)
	d.fsm.Read(func(s *state.State) {
		members = s.MembershipInput()
		for id, n := range s.Nodes {
			if !n.Revoked {
				targets = append(targets, id)
			}
		}
	})
	d.saveBrokers(members.Brokers)
	if !d.raft.IsLeader() || len(members.Brokers) == 0 {
		return
	}
	env, err := d.signer.membership(members, d.now().UTC().Truncate(time.Second))
	if err != nil {
		d.log.Error("membership not signed; hosts learn it on their next sync", "err", err)
		return
	}
	for _, id := range targets {
		_ = d.conns.publisher.Publish(api.DeclarationSubject(id), env)
	}
	_ = d.conns.publisher.Flush()
	d.log.Info(done, "version", members.Version, "brokers", members.Brokers, "nodes", len(targets))
}

// saveBrokers records brokers in this node's mesh.json when they differ. Only the
// effects actor calls it (and Open, before the actor runs); a save that fails is
// tried again at the next reconcile tick.
func (d *Daemon) saveBrokers(brokers []string) {
	if len(brokers) == 0 {
		return
	}
	cfg, err := d.opts.Dir.LoadConfig()
	if err != nil {
		d.logRepeated(slog.LevelWarn, "the brokers are not recorded in mesh.json: it cannot be read", "err", err)
		return
	}
	if slices.Equal(brokers, cfg.Brokers) {
		return
	}
	cfg.Brokers = slices.Clone(brokers)
	if err := d.opts.Dir.SaveConfig(cfg); err != nil {
		d.logRepeated(slog.LevelWarn, "the brokers are not recorded in mesh.json; trying again at the next reconcile (meshctl on this node tries the brokers listed before)", "err", err)
	}
}
