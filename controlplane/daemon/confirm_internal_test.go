package daemon

import (
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestAConfirmationOutlivesTheLeaderThatAppendedTheProbe: the probe entry a joiner
// must name to be confirmed was checked against the memory of the leader that
// appended it (control.add) only. A leader that took over before control.confirm,
// or one whose serve restarted, held none (or one of an earlier join of the node)
// and refused a joiner that had applied the committed probe as "not replicating the
// log"; meshctl join then rolled the healthy join back. The committed probe is in
// the node's record on every control node, and came to the joiner by the log as
// well: it is taken too. A probe the log did not commit last for the node (an
// earlier join's) or none is still refused.
func TestAConfirmationOutlivesTheLeaderThatAppendedTheProbe(t *testing.T) {
	d := fleet(t, 0)
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: "127.0.0.1:1", Raft: "127.0.0.1:2", Cluster: "127.0.0.1:3"}, Sealed: []byte("sealed")}},
		{Op: state.OpEnrol, Rules: d.admissionRules(state.RoleControl),
			Enrol: &state.EnrolCmd{TokenID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, PublicKey: "UCP2", CurveKey: "XCP2"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("%s: %v %v", c.Op, err, res.Err)
		}
	}
	committed := func() (id string) {
		d.fsm.Read(func(s *state.State) { id = s.ControlNodes["cp-2"].Probe })
		return id
	}
	// An earlier join of cp-2 (rolled back), then this one: each appends a probe.
	if _, err := d.controlAdd(api.ControlRequest{Node: "cp-2"}); err != nil {
		t.Fatal(err)
	}
	earlier := committed()
	if _, err := d.controlAdd(api.ControlRequest{Node: "cp-2"}); err != nil {
		t.Fatal(err)
	}
	probe := committed()
	if probe == "" || probe == earlier {
		t.Fatalf("probes committed %q then %q", earlier, probe)
	}
	confirm := func(probes ...string) error {
		_, err := d.controlConfirm(api.ControlConfirmRequest{Node: "cp-2", Probes: probes})
		return err
	}
	if err := confirm(probe); err != nil {
		t.Fatalf("the leader that appended the probe refuses it: %v", err)
	}

	for name, memory := range map[string]map[string]string{
		"a new leader": {},
		"a leader that appended an earlier probe":   {"cp-2": earlier},
		"a leader that appended a probe of its own": {"cp-2": "0123456789abcdef"},
	} {
		t.Run(name, func(t *testing.T) {
			d.ctl.mu.Lock()
			d.ctl.probes = memory
			d.ctl.mu.Unlock()
			if err := confirm(probe); err != nil {
				t.Errorf("a joiner that applied the committed probe is refused: %v", err)
			}
			for _, probes := range [][]string{nil, {"ffff"}, {earlier}} {
				if probes != nil && probes[0] == memory["cp-2"] {
					continue // the probe this leader appended
				}
				if err := confirm(probes...); err == nil || !strings.Contains(err.Error(), "not replicating") {
					t.Errorf("a joiner naming %v, not the committed probe, is not refused as not replicating: %v", probes, err)
				}
			}
		})
	}
}
