package state

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestARotationSealsItsKeyToEveryControlNode: the leader seals a rotation's new key
// to the control nodes it looked at; one admitted before the rotation committed
// (its commit pending across a leader change) held no copy, and after the retire no
// key of the keyring. Stamped RulesRotateSealedToAll, a rotation without a copy
// for an active control node changes nothing (ErrRotationMissesNode); with one for
// each, it applies; a removed node needs none. Older rules apply it, as older code
// does.
func TestARotationSealsItsKeyToEveryControlNode(t *testing.T) {
	setUp := func() *machine {
		m := newMachine(t)
		ic := initCmd("demo", t0)
		ic.Init.Control = ControlNode{ID: "cp-1", Broker: "10.0.0.1:7300", Raft: "10.0.0.1:7301", Cluster: "10.0.0.1:7302", JoinedAt: t0, CurveKey: "XKEYcp-1"}
		m.must(ic)
		for _, n := range []string{"cp-2", "cp-3"} {
			m.must(Command{Op: OpCreateToken, At: t0, Rules: ApplyRules, CreateToken: &CreateTokenCmd{ID: "tok-" + n, Node: n, Role: RoleControl, TTL: time.Hour,
				Control:  &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302", Operator: "OP-" + n},
				SealedTo: map[string]SealedIdentity{"cp-1": {Blob: []byte(n + " to cp-1"), Sealer: "X"}}, SealedSum: "sum-" + n}})
			m.must(Command{Op: OpEnrol, At: t0, Rules: ApplyRules, Enrol: &EnrolCmd{TokenID: "tok-" + n, Node: n, Role: RoleControl, PublicKey: "UKEY" + n, CurveKey: "XKEY" + n}})
		}
		m.must(Command{Op: OpRemoveControl, At: t0, Rules: ApplyRules, RemoveControl: &RemoveControlCmd{Node: "cp-3"}})
		return m
	}
	rotate := func(rules int, to ...string) Command {
		sealed := map[string]SealedKey{}
		for _, n := range to {
			sealed[n] = SealedKey{KeyID: "bb22", Blob: []byte("key to " + n), Sealer: "S", To: "XKEY" + n}
		}
		return Command{Op: OpRotate, At: t0, Rules: rules, Rotate: &RotateCmd{Keyring: Keyring{Epoch: 2, Keys: []string{"aa11", "bb22"}, Envelope: json.RawMessage(`{"payloadType":"k2"}`)}, Sealed: sealed}}
	}
	epoch := func(m *machine) (e uint64) {
		m.f.Read(func(s *State) { e = s.Keyring.Epoch })
		return e
	}

	m := setUp()
	if r := m.apply(rotate(RulesRotateSealedToAll, "cp-1")); !errors.Is(r.Err, ErrRotationMissesNode) {
		t.Fatalf("a rotation sealed to cp-1 alone, cp-2 active: %v, want ErrRotationMissesNode", r.Err)
	}
	if e := epoch(m); e != 1 {
		t.Fatalf("the refused rotation changed the keyring: epoch %d", e)
	}
	// A copy for cp-2's id sealed to another machine's key (one admitted under the
	// id since the rotation looked): as none.
	wrong := rotate(RulesRotateSealedToAll, "cp-1", "cp-2")
	sk := wrong.Rotate.Sealed["cp-2"]
	sk.To = "XKEYcp-2-before"
	wrong.Rotate.Sealed["cp-2"] = sk
	if r := m.apply(wrong); !errors.Is(r.Err, ErrRotationMissesNode) {
		t.Fatalf("a copy for cp-2 sealed to another machine's key: %v, want ErrRotationMissesNode", r.Err)
	}
	m.must(rotate(RulesRotateSealedToAll, "cp-1", "cp-2")) // cp-3, removed, needs none

	older := setUp()
	older.must(rotate(RulesForgetRevoked, "cp-1"))
	if e := epoch(older); e != 2 {
		t.Fatalf("under rules %d the rotation was not applied: epoch %d", RulesForgetRevoked, e)
	}
}
