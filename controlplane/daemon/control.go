package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/datadir"
	"mesh/controlplane/replication"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
)

// ErrRemoved is returned by Run when this control node was removed from the control
// plane.
var ErrRemoved = errors.New("this control node was removed from the control plane")

// HeartbeatInterval is how often a control node reports itself.
const HeartbeatInterval = 2 * time.Second

// controlTracker is the leader's memory of control nodes: their heartbeats and the
// probe entries issued to joiners.
type controlTracker struct {
	mu     sync.Mutex
	beats  map[string]api.ControlHeartbeat
	seen   map[string]time.Time
	probes map[string]string // node -> id of the probe entry it must prove it applied
}

func newControlTracker() *controlTracker {
	return &controlTracker{beats: map[string]api.ControlHeartbeat{}, seen: map[string]time.Time{}, probes: map[string]string{}}
}

func (c *controlTracker) beat(h api.ControlHeartbeat, at time.Time) {
	c.mu.Lock()
	c.beats[h.Node], c.seen[h.Node] = h, at
	c.mu.Unlock()
}

func (c *controlTracker) last(node string) (api.ControlHeartbeat, time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.seen[node]
	return c.beats[node], at, ok
}

// heartbeatLoop reports this control node to the leader, every control node alike.
func (d *Daemon) heartbeatLoop(ctx context.Context) error {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		role := api.RaftVoter
		if d.raft.IsLeader() {
			role = api.RaftLeader
		}
		data, _ := json.Marshal(api.ControlHeartbeat{V: api.ProtocolVersion, Node: d.cfg.Node, AppliedIndex: d.raft.AppliedIndex(), Raft: role})
		_ = d.conns.control.Publish(api.ControlHeartbeatSubject(d.cfg.Node), data)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (d *Daemon) handleHeartbeat(m *nats.Msg) {
	var h api.ControlHeartbeat
	if err := json.Unmarshal(m.Data, &h); err != nil || h.V != api.ProtocolVersion || api.ControlHeartbeatSubject(h.Node) != m.Subject {
		d.guard.drop("heartbeat", ReasonMalformed, m.Subject, "not a heartbeat of this protocol version from the node its subject names")
		return
	}
	d.ctl.beat(h, d.now())
}

// admitControl answers a joining control node: the identity sealed when its token was
// minted, and the signing key sealed now to the curve key it presented.
func (d *Daemon) admitControl(req api.EnrolRequest, cn *state.ControlNode) (*api.ControlAdmission, error) {
	if req.CurveKey == "" {
		return nil, errors.New("a joining control node must present a curve key")
	}
	keyPEM, err := datadir.EncodeSigningKeys(d.signer.currentKeys())
	if err != nil {
		return nil, err
	}
	sealedKey, sealer, err := seal.ToCurveKey(keyPEM, req.CurveKey)
	if err != nil {
		return nil, fmt.Errorf("seal the signing key: %w", err)
	}
	adm := &api.ControlAdmission{SigningKey: sealedKey, Sealer: sealer,
		Self: api.ControlMember{ID: cn.ID, Broker: cn.Broker, Raft: cn.Raft, Cluster: cn.Cluster}}
	id, _ := authn.SecretID(req.Secret)
	d.fsm.Read(func(s *state.State) {
		if t, ok := s.Tokens[id]; ok {
			adm.Sealed = t.Sealed
		}
		adm.AdminAccount, adm.CAHolder = s.AdminAccount, s.CAHolder
		for _, m := range s.ActiveControlNodes() {
			if m.ID != cn.ID {
				adm.Members = append(adm.Members, api.ControlMember{ID: m.ID, Broker: m.Broker, Raft: m.Raft, Cluster: m.Cluster})
			}
		}
	})
	if len(adm.Sealed) == 0 {
		return nil, errors.New("the control token's sealed identity is missing from the state")
	}
	return adm, nil
}

func activeControl(d *Daemon, node string) (state.ControlNode, error) {
	var (
		cn state.ControlNode
		ok bool
	)
	d.fsm.Read(func(s *state.State) {
		if c, found := s.ControlNodes[node]; found && !c.Removed {
			cn, ok = *c, true
		}
	})
	if !ok {
		return cn, &api.Error{Code: api.CodeNotFound, Message: "no admitted control node " + node + " (mint a control token and run meshctl join first)"}
	}
	return cn, nil
}

// controlAdd makes an admitted control node a Raft nonvoter and appends a probe entry
// whose id it can only learn by replicating the log.
func (d *Daemon) controlAdd(req api.ControlRequest) (api.ControlAddResult, error) {
	var out api.ControlAddResult
	cn, err := activeControl(d, req.Node)
	if err != nil {
		return out, err
	}
	members, err := d.raft.Members()
	if err != nil {
		return out, err
	}
	idx := slices.IndexFunc(members, func(m replication.Member) bool { return m.ID == cn.ID })
	if idx < 0 {
		if err := d.raft.AddNonvoter(cn.ID, cn.Raft, 10*time.Second); err != nil {
			return out, &api.Error{Code: api.CodeUnavailable, Message: "add " + cn.ID + " as a nonvoter: " + err.Error()}
		}
		d.log.Info("control node added as a Raft nonvoter; waiting for it to prove it replicates", "node", cn.ID, "raft", cn.Raft)
	}
	probe := make([]byte, 16)
	rand.Read(probe)
	id := hex.EncodeToString(probe)
	d.ctl.mu.Lock()
	d.ctl.probes[cn.ID] = id
	d.ctl.mu.Unlock()
	index, err := d.raft.ApplyIndex(state.Command{Op: state.OpProbe, Probe: &state.ProbeCmd{ID: id}}, 10*time.Second)
	if err != nil {
		return out, &api.Error{Code: api.CodeUnavailable, Message: "append the probe entry: " + err.Error()}
	}
	out.ProbeIndex = index
	return out, nil
}

// controlConfirm checks the joiner's proof and promotes voters so that their number
// stays odd: a cluster of two voters stops when either stops, so a second control
// node waits as a (replicating, serving) nonvoter until a third joins, and then both
// are promoted together.
func (d *Daemon) controlConfirm(req api.ControlConfirmRequest) (api.ControlConfirmResult, error) {
	var out api.ControlConfirmResult
	cn, err := activeControl(d, req.Node)
	if err != nil {
		return out, err
	}
	d.ctl.mu.Lock()
	want := d.ctl.probes[cn.ID]
	d.ctl.mu.Unlock()
	if want == "" || !slices.Contains(req.Probes, want) {
		return out, &api.Error{Code: api.CodeBadRequest, Message: cn.ID + " has not applied its probe entry: it is not replicating the log"}
	}
	members, err := d.raft.Members()
	if err != nil {
		return out, err
	}
	voters := 0
	var candidates []state.ControlNode
	now := d.now()
	for _, m := range members {
		if m.Voter {
			voters++
			continue
		}
		if m.ID == cn.ID {
			candidates = append(candidates, cn)
			continue
		}
		// Another nonvoter is promoted along only if it is alive and caught up.
		other, err := activeControl(d, m.ID)
		if err != nil {
			continue
		}
		if hb, at, ok := d.ctl.last(m.ID); ok && now.Sub(at) < 3*HeartbeatInterval && hb.AppliedIndex+10 >= d.raft.AppliedIndex() {
			candidates = append(candidates, other)
		}
	}
	slices.SortFunc(candidates, func(a, b state.ControlNode) int { return a.JoinedAt.Compare(b.JoinedAt) })
	if (voters+len(candidates))%2 == 0 {
		candidates = candidates[:len(candidates)-1] // keep the voter count odd
	}
	for _, c := range candidates {
		if err := d.raft.Promote(c.ID, c.Raft, 10*time.Second); err != nil {
			return out, &api.Error{Code: api.CodeUnavailable, Message: "promote " + c.ID + ": " + err.Error()}
		}
		out.Promoted = append(out.Promoted, c.ID)
		if c.ID == cn.ID {
			out.Voter = true
		}
	}
	if members, err = d.raft.Members(); err == nil {
		for _, m := range members {
			if m.Voter {
				out.Voters = append(out.Voters, m.ID)
			}
		}
	}
	if !out.Voter {
		out.Note = fmt.Sprintf("%s replicates and serves as a nonvoter: with %d voter(s), promoting it would make an even number, and two voters stop when either stops; it is promoted when the next control node joins", cn.ID, voters)
	}
	d.log.Info("control node confirmed", "node", cn.ID, "voter", out.Voter, "promoted", out.Promoted, "voters", out.Voters)
	return out, nil
}

// controlAbort rolls back a join that could not be confirmed: the node leaves the Raft
// configuration; its admission stays, so the same token can run the join again.
func (d *Daemon) controlAbort(req api.ControlRequest) (struct{}, error) {
	members, err := d.raft.Members()
	if err != nil {
		return struct{}{}, err
	}
	for _, m := range members {
		if m.ID == req.Node {
			if m.Voter {
				return struct{}{}, &api.Error{Code: api.CodeBadRequest, Message: req.Node + " is a voter; use meshctl control remove"}
			}
			if err := d.raft.Remove(req.Node, 10*time.Second); err != nil {
				return struct{}{}, &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
			}
		}
	}
	d.log.Warn("join rolled back", "node", req.Node)
	return struct{}{}, nil
}

// controlRemove takes a control node out of Raft and of the control plane for good.
func (d *Daemon) controlRemove(req api.ControlRequest) (struct{}, error) {
	if _, err := activeControl(d, req.Node); err != nil {
		return struct{}{}, err
	}
	if req.Node == d.cfg.Node {
		return struct{}{}, &api.Error{Code: api.CodeBadRequest, Message: req.Node + " is the leader answering this request; stop it (another node takes over) or transfer leadership first, then remove it from another control node"}
	}
	members, err := d.raft.Members()
	if err != nil {
		return struct{}{}, err
	}
	voters := 0
	for _, m := range members {
		if m.Voter && m.ID != req.Node {
			voters++
		}
	}
	if voters == 0 {
		return struct{}{}, &api.Error{Code: api.CodeBadRequest, Message: "removing " + req.Node + " would leave no voter"}
	}
	res, err := d.commit(state.Command{Op: state.OpRemoveControl, RemoveControl: &state.RemoveControlCmd{Node: req.Node}})
	if err != nil {
		return struct{}{}, err
	}
	if res.Err != nil {
		return struct{}{}, &api.Error{Code: api.CodeBadRequest, Message: res.Err.Error()}
	}
	if slices.ContainsFunc(members, func(m replication.Member) bool { return m.ID == req.Node }) {
		if err := d.raft.Remove(req.Node, 10*time.Second); err != nil {
			return struct{}{}, &api.Error{Code: api.CodeUnavailable, Message: "removed from the roster, but not from Raft: " + err.Error()}
		}
	}
	d.log.Warn("control node removed", "node", req.Node)
	return struct{}{}, nil
}

// controlViews describes every control node, with its Raft role.
func (d *Daemon) controlViews(s *state.State, now time.Time) []api.ControlView {
	members, _ := d.raft.Members()
	leader := d.raft.Leader()
	var out []api.ControlView
	ids := make([]string, 0, len(s.ControlNodes))
	for id := range s.ControlNodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		c := s.ControlNodes[id]
		v := api.ControlView{ID: c.ID, Broker: c.Broker, CAHolder: c.ID == s.CAHolder, Raft: api.RaftNotMember}
		for _, m := range members {
			if m.ID == c.ID {
				switch {
				case m.ID == leader:
					v.Raft = api.RaftLeader
				case m.Voter:
					v.Raft = api.RaftVoter
				default:
					v.Raft = api.RaftNonvoter
				}
			}
		}
		hb, at, ok := d.ctl.last(c.ID)
		switch {
		case c.Removed:
			v.Raft, v.State = api.RaftRemoved, api.StateRemoved
		case c.ID == d.cfg.Node || ok && now.Sub(at) <= 3*HeartbeatInterval:
			v.State = api.StateAlive
		default:
			v.State = api.StateOffline
		}
		if c.ID == d.cfg.Node {
			v.LastSeen, v.AppliedIndex = now.UTC(), d.raft.AppliedIndex()
		} else if ok {
			v.LastSeen, v.AppliedIndex = at.UTC(), hb.AppliedIndex
		}
		out = append(out, v)
	}
	return out
}
