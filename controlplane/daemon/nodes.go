package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

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

// handleSync answers a node asking for its current declaration and keyring.
func (d *Daemon) handleSync(m *nats.Msg) {
	node := nodeOf(m.Subject)
	d.seen.mark(node, d.now())
	resp := api.SyncResponse{V: api.ProtocolVersion}
	if req, err := api.Decode[api.SyncRequest](m.Data); err != nil {
		resp.Error = &api.Error{Code: api.CodeBadRequest, Message: err.Error()}
	} else {
		d.fsm.Read(func(s *state.State) {
			n, ok := s.Nodes[node]
			if !ok || n.Revoked {
				resp.Error = &api.Error{Code: api.CodeNotFound, Message: "no such node"}
				return
			}
			env, err := d.signer.declaration(s, n)
			if err != nil {
				resp.Error = &api.Error{Code: api.CodeInternal, Message: err.Error()}
				return
			}
			resp.Declaration = env
			resp.Keyring = s.Keyring.Envelope
			resp.Brokers = s.Brokers()
			resp.Keyrings = s.KeyringChain(req.KeyringEpoch)
		})
	}
	data, _ := json.Marshal(resp)
	if err := m.Respond(data); err != nil {
		d.log.Warn("sync reply not sent", "node", node, "err", err)
	}
}

// handleStatus records a node's report: liveness in memory, changes through the log.
func (d *Daemon) handleStatus(m *nats.Msg) {
	node := nodeOf(m.Subject)
	now := d.now()
	st, err := api.Decode[api.Status](m.Data)
	if err != nil {
		d.log.Warn("status report refused", "node", node, "err", err)
		return
	}
	if st.Node != node {
		d.log.Warn("status report names another node than its subject; ignored", "subject_node", node, "claimed", st.Node)
		return
	}
	d.seen.mark(node, now)
	a := state.Applied{
		HaveApplied:  st.HaveApplied,
		Version:      st.AppliedVersion,
		KeyringEpoch: st.KeyringEpoch,
		Stale:        st.Stale,
	}
	if st.Error != nil {
		a.ErrorCode, a.ErrorMessage, a.ErrorVersion = st.Error.Code, truncate(st.Error.Message, 512), st.Error.Version
	}
	changed := false
	d.fsm.Read(func(s *state.State) {
		n, ok := s.Nodes[node]
		if !ok || n.Revoked {
			return
		}
		old := n.Applied
		old.ReportedAt = time.Time{}
		changed = old != a
	})
	if changed {
		d.status.add(node, a)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// liveness remembers when each node was last heard from. It is the leader's memory,
// not replicated: a new leader learns it again within a heartbeat.
type liveness struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func newLiveness() *liveness { return &liveness{last: map[string]time.Time{}} }

func (l *liveness) mark(node string, t time.Time) {
	if node == "" {
		return
	}
	l.mu.Lock()
	l.last[node] = t
	l.mu.Unlock()
}

func (l *liveness) get(node string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.last[node]
	return t, ok
}

func (l *liveness) forget(node string) {
	l.mu.Lock()
	delete(l.last, node)
	l.mu.Unlock()
}

// statusBatcher collects status changes and commits them as one command per flush.
type statusBatcher struct {
	d       *Daemon
	mu      sync.Mutex
	pending map[string]state.Applied
}

func newStatusBatcher(d *Daemon) *statusBatcher {
	return &statusBatcher{d: d, pending: map[string]state.Applied{}}
}

func (b *statusBatcher) add(node string, a state.Applied) {
	b.mu.Lock()
	b.pending[node] = a
	b.mu.Unlock()
}

func (b *statusBatcher) run(ctx context.Context) error {
	t := time.NewTicker(b.d.opts.StatusFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			b.flush()
		}
	}
}

func (b *statusBatcher) flush() {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	batch := b.pending
	b.pending = map[string]state.Applied{}
	b.mu.Unlock()
	if !b.d.raft.IsLeader() {
		return // the new leader hears the next heartbeat
	}
	cmd := &state.StatusCmd{}
	for node, a := range batch {
		cmd.Reports = append(cmd.Reports, state.StatusReport{Node: node, Applied: a})
	}
	if _, err := b.d.raft.Apply(state.Command{Op: state.OpStatus, Status: cmd}, 10*time.Second); err != nil {
		b.d.log.Warn("status reports not committed; they will be reported again", "nodes", len(batch), "err", err)
	}
}

// publishDeclarations signs and sends each node's declaration. Signing dominates a
// fleet-wide declaration (Ed25519, ~20 µs each), so it runs on every core; sending
// follows in node order.
func (d *Daemon) publishDeclarations(nodes []string) {
	envs := make([][]byte, len(nodes))
	d.fsm.Read(func(s *state.State) {
		workers := min(runtime.GOMAXPROCS(0), max(1, len(nodes)/64))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(nodes); i += workers {
					n, ok := s.Nodes[nodes[i]]
					if !ok || n.Revoked {
						continue
					}
					env, err := d.signer.declaration(s, n)
					if err != nil {
						d.log.Error("declaration not signed", "node", nodes[i], "err", err)
						continue
					}
					envs[i] = env
				}
			}()
		}
		wg.Wait()
	})
	for i, env := range envs {
		if env == nil {
			continue
		}
		if err := d.nc.Publish(api.DeclarationSubject(nodes[i]), env); err != nil {
			d.log.Warn("declaration not sent; the node gets it on its next sync", "node", nodes[i], "err", err)
		}
	}
	_ = d.nc.Flush()
}

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
			last, ok := d.seen.get(id)
			if !ok || now.Sub(last) > d.opts.OfflineAfter {
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

// enforceRevocation tells the node, with a signed notice, that it was revoked, then
// closes its connections on this control node's broker. The notice goes first so the
// agent can stop with the right message instead of retrying.
//
// It returns how many connections the node had open on this broker when the
// revocation was enforced: the agent usually leaves on the notice, before the kick.
func (d *Daemon) enforceRevocation(node string) int {
	// nats-server knows an nkey client by its key, not by the name we granted.
	var user string
	d.fsm.Read(func(s *state.State) {
		if n, ok := s.Nodes[node]; ok {
			user = n.PublicKey
		}
	})
	open := 0
	if conns, err := d.broker.Connections(); err == nil {
		open = conns[user]
	}
	notice, err := d.signer.revocation(d.cfg.Mesh, node, d.now().UTC().Truncate(time.Second))
	if err == nil {
		_ = d.nc.Publish(api.DeclarationSubject(node), notice)
		_ = d.nc.FlushTimeout(time.Second)
		// Give the broker a moment to write the notice out before the kick closes
		// the socket.
		time.Sleep(100 * time.Millisecond)
	} else {
		d.log.Error("revocation notice not signed", "node", node, "err", err)
	}
	n, err := d.broker.Kick(user)
	if err != nil {
		d.log.Error("could not close the revoked node's connections", "node", node, "err", err)
	}
	d.seen.forget(node)
	return max(open, n)
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
