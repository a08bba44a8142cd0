package daemon

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// A control token's identity is recorded sealed to the control nodes' curve keys,
// and the node that admits its joiner opens its own copy; a node that joined after
// the token was minted has none, and refuses the joiner before the token is used.
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
	if e == nil || e.Code != api.CodeUnavailable || !strings.Contains(e.Message, "(cp-9)") || !strings.Contains(e.Message, "meshctl token cancel cp-3") {
		t.Fatalf("a token sealed to other control nodes only: %+v", e)
	}
}
