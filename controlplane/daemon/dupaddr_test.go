package daemon

import (
	"crypto/sha256"
	"errors"
	"fmt"
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
	admitControlAt(t, d, "cp-13", taken)
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

// TestAJoinAtAHalfRemovedMembersAddressSaysToFinishTheRemoval: a member removed
// from the roster but left in Raft (controlRemove's commit went through, its Raft
// change did not: raftRemoveError says to run the same command again to finish)
// holds its Raft address; a new node minted at that address was told to remove
// itself, where finishing the other's removal is the way out (a review).
func TestAJoinAtAHalfRemovedMembersAddressSaysToFinishTheRemoval(t *testing.T) {
	d := fleet(t, 0)
	const addr = "127.0.0.9:7301"
	admitControlAt(t, d, "cp-2", addr)
	if err := d.raft.AddNonvoter("cp-2", addr, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The roster half of controlRemove, its Raft half lost.
	if res, err := d.raft.Apply(state.Command{Op: state.OpRemoveControl, At: d.now().UTC(), RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("remove: %v %v", err, res.Err)
	}
	if taken := d.controlAddressesTaken("cp-5", &api.ControlMember{Broker: "127.0.0.9:7300", Raft: addr, Cluster: "127.0.0.9:7302"}); taken != "" {
		t.Fatalf("mint refused: %s", taken)
	}
	admitControlAt(t, d, "cp-5", addr)
	_, err := d.controlAdd(api.ControlRequest{Node: "cp-5"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "meshctl control remove cp-2") || strings.Contains(ae.Message, "control remove cp-5") {
		t.Fatalf("control.add cp-5: %v; want bad_request saying to finish cp-2's removal, not to remove cp-5", err)
	}
	// Finishing cp-2's removal is the way out, and cp-5 then joins at that address.
	out, rerr := d.controlRemove(api.ControlRequest{Node: "cp-2"})
	if rerr != nil || out.AlreadyRemoved {
		t.Fatalf("control remove cp-2 (again): %+v %v", out, rerr)
	}
	if _, err = d.controlAdd(api.ControlRequest{Node: "cp-5"}); err != nil {
		t.Fatalf("control.add cp-5 after finishing cp-2's removal: %v", err)
	}
}

// admitControlAt mints a control token for node at Raft address raft (the broker and
// cluster addresses beside it fixed) and commits node's admission with it, as a join
// would, past the mint's own check of addresses.
func admitControlAt(t *testing.T, d *Daemon, node, raft string) {
	t.Helper()
	id := fmt.Sprintf("%064x", sha256.Sum256([]byte(node)))
	if res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{ID: id, Node: node, Role: state.RoleControl,
		TTL: time.Hour, Control: &state.ControlAddrs{Broker: "127.0.0.9:7300", Raft: raft, Cluster: "127.0.0.9:7302"}, Sealed: []byte("sealed")}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("mint for %s: %v %v", node, err, res.Err)
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: d.now().UTC(), Rules: d.admissionRules(state.RoleControl),
		Enrol: &state.EnrolCmd{TokenID: id, Node: node, Role: state.RoleControl, PublicKey: "K" + node, CurveKey: "X" + node}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("admit %s: %v %v", node, err, res.Err)
	}
}
