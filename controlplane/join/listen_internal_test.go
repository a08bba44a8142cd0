package join

import (
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/integration/freeport"
)

// TestAnEarlierRunsListenIsKeptForItsAddressOnly: a join run again into a
// directory an earlier run wrote (mesh.json, joining) listens where that run did,
// its --listen behind NAT included, while the mesh admits the node at the same
// address hosts dial. Admitted at another (a new token after the node's removal,
// minted with another --addr), it listened at the old one (a walkthrough's
// advice to join into the same directory), and hosts dialled the new in vain.
func TestAnEarlierRunsListenIsKeptForItsAddressOnly(t *testing.T) {
	addrs := freeport.Addrs(t, 5)
	self := api.ControlMember{ID: "cp-2", Broker: addrs[0], Raft: addrs[1], Cluster: addrs[2]}
	for _, c := range []struct {
		name    string
		earlier datadir.Config
		want    string
	}{
		{"the earlier run at the admitted address", datadir.Config{Listen: addrs[0]}, addrs[0]},
		{"the earlier run behind NAT, its --listen, for the admitted address", datadir.Config{Listen: addrs[3], Advertise: addrs[0]}, addrs[3]},
		{"the earlier run at an old address", datadir.Config{Listen: addrs[4]}, addrs[0]},
		{"the earlier run's --listen for an old address", datadir.Config{Listen: addrs[3], Advertise: addrs[4]}, addrs[0]},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			cfg := c.earlier
			cfg.Mesh, cfg.Node, cfg.Joining, cfg.Joined = "m", "cp-2", true, true
			cfg.RaftListen, cfg.ClusterListen, cfg.Brokers = addrs[1], addrs[2], []string{addrs[0]}
			if err := d.SaveConfig(cfg); err != nil {
				t.Fatal(err)
			}
			r := &run{o: Options{Dir: d}}
			got, err := r.listenable(self)
			if err != nil || got != c.want {
				t.Fatalf("listens on %q (%v), want %s", got, err, c.want)
			}
		})
	}
}
