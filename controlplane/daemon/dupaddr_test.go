package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestAJoinAtAMembersRaftAddressIsRefusedAsSuch: a control node admitted at the Raft
// address of a member (two control tokens minted for the same addresses, before the
// mint refused that) cannot be added to Raft ("duplicate address"); the join was
// answered unavailable, told to run again, and every rerun ended alike (a docs
// walkthrough). It is refused bad_request, naming the member, and saying to remove
// the node and mint its token at addresses of its own; nothing is added to Raft.
func TestAJoinAtAMembersRaftAddressIsRefusedAsSuch(t *testing.T) {
	d := fleet(t, 0)
	members, err := d.raft.Members()
	if err != nil || len(members) != 1 {
		t.Fatalf("members %v, %v", members, err)
	}
	taken := members[0].Address
	id := strings.Repeat("e5", 32)
	if res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: id, Node: "cp-13", Role: state.RoleControl,
		TTL: time.Hour, Control: &state.ControlAddrs{Broker: "127.0.0.9:7300", Raft: taken, Cluster: "127.0.0.9:7302"}, Sealed: []byte("sealed")}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("mint: %v %v", err, res.Err)
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: d.now().UTC(), Rules: d.admissionRules(state.RoleControl),
		Enrol: &state.EnrolCmd{TokenID: id, Node: "cp-13", Role: state.RoleControl, PublicKey: "K13", CurveKey: "X13"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("admit cp-13: %v %v", err, res.Err)
	}
	_, err = d.controlAdd(api.ControlRequest{Node: "cp-13"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "where "+members[0].ID+", a member, is") ||
		!strings.Contains(ae.Message, "meshctl control remove cp-13") {
		t.Fatalf("adding cp-13 at %s, %s's Raft address: %v; want bad_request naming %s and the removal", taken, members[0].ID, err, members[0].ID)
	}
	if after, _ := d.raft.Members(); len(after) != 1 {
		t.Fatalf("members after the refusal: %v", after)
	}
}
