package daemon

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestARotationGoesPastTheEpochHostsReport (audit of backup and restore, finding 4):
// a control plane restored from a copy older than a rotation installed, at its next
// rotation, the epoch the hosts had accepted already with other keys; they refused it
// as a replay, and `signing-key status` showed them acknowledged. The rotation now
// goes past the highest epoch a node reports, stamped with the rules that allow it;
// an epoch claimed beyond MaxKeyringHistory is a host's word and does not count. While
// a control node on older rules runs, the rotation takes the next epoch, unstamped.
func TestARotationGoesPastTheEpochHostsReport(t *testing.T) {
	report := func(t *testing.T, d *Daemon, node string, epoch uint64) {
		t.Helper()
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
		d.status.flush()
	}
	rules := func(d *Daemon) int {
		var r int
		d.fsm.Read(func(s *state.State) { r = s.Rules })
		return r
	}
	setUp := func(t *testing.T) *Daemon {
		d := fleet(t, 3)
		report(t, d, "n-0", 3)                           // accepted epochs 2 and 3 of the lost copy
		report(t, d, "n-1", 1+state.MaxKeyringHistory+1) // out of reach: not counted
		report(t, d, "n-2", 1)
		return d
	}

	t.Run("every member on the rules", func(t *testing.T) {
		d := setUp(t)
		res, err := d.rotateKey(api.RotateRequest{})
		if err != nil || res.Epoch != 4 || len(res.Keys) != 2 {
			t.Fatalf("rotate: %+v, %v; want epoch 4, past the 3 n-0 reports", res, err)
		}
		// Stamped with the newest rules a rotation needs, which include these.
		if r := rules(d); r != state.RulesRotateSealedToAll {
			t.Errorf("the state's rules after the rotation: %d, want %d (stamped)", r, state.RulesRotateSealedToAll)
		}
		st, _ := d.keyringStatus(api.KeyringStatusRequest{})
		if st.Epoch != 4 {
			t.Errorf("signing-key status: epoch %d, want 4", st.Epoch)
		}
	})
	t.Run("a control node on older rules", func(t *testing.T) {
		d := setUp(t)
		d.ctl.beat(api.ControlHeartbeat{V: api.ProtocolVersion, Node: "cp-old", Raft: api.RaftVoter, Rules: state.RulesCancelByID}, d.now(), 0)
		res, err := d.rotateKey(api.RotateRequest{})
		if err != nil || res.Epoch != 2 {
			t.Fatalf("rotate: %+v, %v; want the next epoch, 2", res, err)
		}
		if r := rules(d); r >= state.RulesRotatePastReported {
			t.Errorf("the state's rules after the rotation: %d, want below %d (unstamped)", r, state.RulesRotatePastReported)
		}
	})
	t.Run("no node ahead", func(t *testing.T) {
		d := fleet(t, 1)
		report(t, d, "n-0", 1)
		if res, err := d.rotateKey(api.RotateRequest{}); err != nil || res.Epoch != 2 {
			t.Fatalf("rotate: %+v, %v; want epoch 2", res, err)
		}
		// Stamped all the same (every rotation is checked for a copy sealed to
		// each control node), but with the next epoch.
		if r := rules(d); r != state.RulesRotateSealedToAll {
			t.Errorf("an ordinary rotation was stamped with rules %d, want %d", r, state.RulesRotateSealedToAll)
		}
	})
}
