package integration

import (
	"encoding/json"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestTheBrokerAHostFloodedThroughRefusesIt: in a mesh of three control nodes, a
// host logged in on a follower's broker floods its status subject and is
// disconnected for its budget; that broker, the one that held it, refuses its key
// for a while (decision 0038), and the leader's, which handles every host's messages
// but never held this host, does not. Before, the leader's broker started the
// cooldown: the follower admitted the key again 2 ms after each disconnection, and
// the leader refused the host where it was not flooding (a review).
func TestTheBrokerAHostFloodedThroughRefusesIt(t *testing.T) {
	t.Parallel()
	cps := threeControlNodes(t, "kickwhere")
	byID := map[string]*harness.ControlPlane{"cp-2": cps[1], "cp-3": cps[2]}
	for _, c := range cps[0].Nodes().Control {
		if c.ID != "cp-2" && c.ID != "cp-3" {
			byID[c.ID] = cps[0]
		}
	}
	leader := leaderOf(t, cps[0], byID)
	var follower *harness.ControlPlane
	for _, cp := range cps {
		if cp != leader {
			follower = cp
			break
		}
	}
	h := harness.NewHost(t, bin, "flood")
	if r := h.Enrol(leader.Token("flood")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	pin := pinOf(t, cps[0])
	kp := h.KeyPair(t)
	report, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "flood"})
	if err != nil {
		t.Fatal(err)
	}
	refused := 0
	for round := 1; round <= 3; round++ {
		var nc interface {
			IsConnected() bool
			Close()
		}
		harness.Eventually(t, 70*time.Second, "the key admitted again on the follower's broker", func() bool {
			c, err := dialQuiet(kp, pin, follower.Listen)
			if err != nil {
				return false
			}
			for i := 0; i < 2000 && c.IsConnected(); i++ {
				_ = c.Publish(api.StatusSubject("flood"), report)
			}
			nc = c
			return true
		})
		harness.Eventually(t, 10*time.Second, "the flooding connection closed for its budget", func() bool { return !nc.IsConnected() })
		nc.Close()
		if c, err := dialQuiet(kp, pin, follower.Listen); err != nil {
			refused++
		} else {
			c.Close()
		}
		// The leader drops the rest of the flood for a moment after the
		// disconnection: a connection open while it does is one more of the
		// flooder's, and disconnected too. Then the leader's broker admits it.
		time.Sleep(3 * time.Second)
		c, err := dialQuiet(kp, pin, leader.Listen)
		if err != nil {
			t.Errorf("round %d: the leader's broker, which never held the flooding connection, refused the key: %v", round, err)
		} else {
			c.Close()
		}
	}
	if refused == 0 {
		t.Error("the follower's broker, which held the flooding connections, admitted the key again right after each disconnection for its budget")
	}
	if n := follower.Counter("mesh_broker_connections_refused_total", "reason=node_cooldown"); n == 0 {
		t.Errorf("the follower's broker counted no node_cooldown refusal")
	}
	if n := leader.Counter("mesh_broker_connections_refused_total", "reason=node_cooldown"); n != 0 {
		t.Errorf("the leader's broker counted %v node_cooldown refusals; the host was never on it", n)
	}
}
