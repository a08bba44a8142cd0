package daemon

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
)

// A control token's identity is recorded sealed to the control nodes' curve keys,
// and the node that admits its joiner opens its own copy; a node that holds none
// (one admitted by a node that had none either, or one whose copy another machine
// under its id held) refuses the joiner before the token is used.
func TestControlIdentitySealedToTheControlNodes(t *testing.T) {
	d := fleet(t, 0)
	identity := []byte("the identity as meshctl sealed it under the token's secret")
	sealedTo, sum, err := d.sealToControlNodes(identity)
	if err != nil || len(sealedTo) != 1 || sum == "" {
		t.Fatalf("sealToControlNodes = %v, %q, %v; want a copy for %s", sealedTo, sum, err, d.cfg.Node)
	}
	if bytes.Contains(sealedTo[d.cfg.Node].Blob, identity) {
		t.Fatal("the copy holds the identity as it came")
	}
	addrs := &state.ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}
	mint := func(id, node string, to map[string]state.SealedIdentity) {
		t.Helper()
		res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{
			ID: id, Node: node, Role: state.RoleControl, TTL: time.Hour, Control: addrs, SealedTo: to, SealedSum: sum}}, time.Minute)
		if err != nil || res.Err != nil {
			t.Fatalf("mint: %v %v", err, res.Err)
		}
	}
	mint(strings.Repeat("a", 64), "cp-2", sealedTo)
	got, e := d.controlIdentity(strings.Repeat("a", 64), "cp-2")
	if e != nil || !bytes.Equal(got, identity) {
		t.Fatalf("controlIdentity = %q, %v; want the identity", got, e)
	}

	other := sealedTo[d.cfg.Node]
	other.Blob = append([]byte{}, other.Blob...)
	other.Blob[len(other.Blob)-1] ^= 1
	mint(strings.Repeat("c", 64), "cp-4", map[string]state.SealedIdentity{d.cfg.Node: other})
	if _, e := d.controlIdentity(strings.Repeat("c", 64), "cp-4"); e == nil || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "meshctl token cancel cp-4") {
		t.Fatalf("a copy this node's curve key does not open: %+v", e)
	}

	mint(strings.Repeat("b", 64), "cp-3", map[string]state.SealedIdentity{"cp-9": sealedTo[d.cfg.Node]})
	_, e = d.controlIdentity(strings.Repeat("b", 64), "cp-3")
	if e == nil || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "control nodes cp-9 only;") || !strings.Contains(e.Message, "meshctl token cancel cp-3") {
		t.Fatalf("a token sealed to other control nodes only: %+v", e)
	}
}

// A joining control node is handed, sealed to its curve key, the identities of
// the other pending control tokens this node holds a copy of; a curve key nothing
// can be sealed to is refused before anything is committed.
func TestPendingIdentitiesResealedToAJoiner(t *testing.T) {
	d := fleet(t, 0)
	identity := []byte("cp-3's identity as meshctl sealed it")
	sealedTo, sum, err := d.sealToControlNodes(identity)
	if err != nil {
		t.Fatal(err)
	}
	addrs := &state.ControlAddrs{Broker: "10.0.0.3:7300", Raft: "10.0.0.3:7301", Cluster: "10.0.0.3:7302"}
	for id, node := range map[string]string{strings.Repeat("a", 64): "cp-2", strings.Repeat("b", 64): "cp-3"} {
		res, err := d.raft.Apply(state.Command{Op: state.OpCreateToken, At: d.now().UTC(), CreateToken: &state.CreateTokenCmd{
			ID: id, Node: node, Role: state.RoleControl, TTL: time.Hour, Control: addrs, SealedTo: sealedTo, SealedSum: sum}}, time.Minute)
		if err != nil || res.Err != nil {
			t.Fatalf("mint: %v %v", err, res.Err)
		}
	}
	if _, e := d.resealControlTokens(strings.Repeat("a", 64), "UNOTACURVEKEY"); e == nil || e.Code != api.CodeBadRequest {
		t.Fatalf("a joiner's curve key that is not one: %+v, want bad_request", e)
	}
	joiner, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := joiner.PublicKey()
	out, e := d.resealControlTokens(strings.Repeat("a", 64), pub)
	if e != nil || len(out) != 1 {
		t.Fatalf("resealControlTokens = %v, %+v; want the other token's copy only", out, e)
	}
	c := out[strings.Repeat("b", 64)]
	if bytes.Contains(c.Blob, identity) {
		t.Fatal("the copy holds the identity in clear")
	}
	if got, err := seal.FromCurveKey(joiner, c.Blob, c.Sealer); err != nil || !bytes.Equal(got, identity) {
		t.Fatalf("the joiner's curve key opens %q, %v", got, err)
	}
}

// TestAnIdentityIsNeverRecordedAsItCame (audit of secrets, finding 5): with no
// control node recording a curve key, a control token's identity was recorded as
// meshctl sealed it, under the token's secret alone, which a copy of the Raft log
// and the token's text open (decision 0004). It is refused, nothing minted.
func TestAnIdentityIsNeverRecordedAsItCame(t *testing.T) {
	d := fleet(t, 0)
	// A state no control node of this version makes: every one records a curve
	// key as it is made.
	d.fsm.Read(func(s *state.State) {
		for _, c := range s.ControlNodes {
			c.CurveKey = ""
		}
	})
	sealedTo, _, err := d.sealToControlNodes([]byte("the identity as meshctl sealed it"))
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeInternal || !strings.Contains(ae.Message, "nothing was minted") || sealedTo != nil {
		t.Fatalf("sealToControlNodes with no curve key: %v, %v; want internal, nothing minted", sealedTo, err)
	}
}
