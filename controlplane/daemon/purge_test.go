package daemon

import (
	"testing"
	"time"

	"mesh/controlplane/state"
)

// TestQuietMeshDropsAnExpiredSealedIdentity: with nothing else committed, the leader's
// reconcile commits the empty command that drops a control token's sealed identity
// once the token has expired, and commits nothing while nothing is due.
func TestQuietMeshDropsAnExpiredSealedIdentity(t *testing.T) {
	d := fleet(t, 0)
	now := d.now().UTC()
	res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: now, CreateToken: &state.CreateTokenCmd{
		ID: "cp2token", Node: "cp-2", Role: state.RoleControl, TTL: 10 * time.Minute,
		Control: &state.ControlAddrs{Broker: "127.0.0.2:7300", Raft: "127.0.0.2:7301", Cluster: "127.0.0.2:7302"}, Sealed: []byte("sealed identity")}}, time.Minute)
	if err != nil || res.Err != nil {
		t.Fatalf("mint: %v %v", err, res.Err)
	}
	sealed := func() int {
		var n int
		d.fsm.Read(func(s *state.State) { n = len(s.Tokens["cp2token"].Sealed) })
		return n
	}
	before := lastIndex(d)
	d.reconcile(now.Add(10*time.Minute - time.Second))
	if lastIndex(d) != before || sealed() == 0 {
		t.Fatalf("before the expiry: %d entries committed, sealed %d bytes; want none and the identity kept", lastIndex(d)-before, sealed())
	}
	d.reconcile(now.Add(10 * time.Minute))
	if sealed() != 0 {
		t.Fatal("the sealed identity outlived its token on a quiet mesh")
	}
	if n := lastIndex(d) - before; n != 1 {
		t.Fatalf("the purge committed %d entries, want 1", n)
	}
	before = lastIndex(d)
	d.reconcile(now.Add(11 * time.Minute))
	if n := lastIndex(d) - before; n != 0 {
		t.Fatalf("%d entries committed with nothing due", n)
	}
}
