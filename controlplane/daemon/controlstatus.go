package daemon

import (
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// handleControlStatus answers, on every control node, what this node sees of the
// control plane (api.ControlStatusSubject). It reads this node's own state and Raft
// and changes nothing, so it needs no leader: with the quorum lost it is what tells
// an operator which voters are missing. As for the operator API, a request counts
// only when it came through the operators' service import (the broker's "_R_."
// reply, which leads back to the requester and nowhere else) and is exactly a
// request for this operation.
func (d *Daemon) handleControlStatus(m *nats.Msg) {
	if !replyUnder(m.Reply, "_R_.") {
		d.dropReply("admin", api.OpControlStatus, m.Reply)
		return
	}
	resp := api.AdminResponse{V: api.ProtocolVersion}
	var req api.ControlStatusRequest
	switch {
	case len(m.Data) > MaxAdminRequest:
		resp.Error = badRequest("request of %d bytes exceeds the %d byte cap", len(m.Data), MaxAdminRequest)
	default:
		if err := api.DecodeAdminRequest(api.OpControlStatus, m.Data, &req); err != nil {
			resp.Error = badRequest("%v", err)
		}
	}
	if resp.Error != nil {
		d.guard.refuse("admin", Reason(resp.Error.Code), api.OpControlStatus, resp.Error.Message)
	} else {
		resp.Result, _ = encodeJSON(d.controlStatus())
	}
	d.reply(api.OpControlStatus, m.Reply, resp)
}

// controlStatus is this node's view of the control plane.
func (d *Daemon) controlStatus() api.ControlStatus {
	st := d.raft.Status()
	out := api.ControlStatus{
		Mesh: d.cfg.Mesh, Node: d.cfg.Node, Version: d.opts.Version, Raft: d.raft.State(), Leader: d.raft.Leader(),
		Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.Applied,
		RequireSignedChanges: &d.opts.RequireSignedChanges,
	}
	if err := d.raft.LogWriteError(); err != nil {
		out.LogWriteError = err.Error()
	}
	if !st.LastContact.IsZero() && out.Raft != api.RaftStateLeader {
		out.LastContact = st.LastContact.UTC()
	}
	// Raft stamps LastContact by this machine's own clock, not the injected
	// one: At is read from the same.
	out.At = time.Now().UTC()
	if members, err := d.raft.Members(); err == nil {
		for _, m := range members {
			out.Members = append(out.Members, api.RaftMember{ID: m.ID, Address: m.Address, Voter: m.Voter})
		}
	}
	now := d.now()
	d.fsm.Read(func(s *state.State) { out.Control = d.controlViews(s, now) })
	return out
}
