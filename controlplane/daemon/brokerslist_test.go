package daemon

import (
	"slices"
	"testing"
	"time"
)

// TestMeshJSONListsTheBrokersAgain: a broker list mesh.json does not hold (a save
// that failed on a full disk, an edit by hand) is written again within a reconcile
// interval, not only at the next change of the control nodes, so meshctl on this
// node tries the brokers there are.
func TestMeshJSONListsTheBrokersAgain(t *testing.T) {
	dir := bootstrapped(t, "brokers")
	runDaemon(t, Options{Dir: dir, ReadyTimeout: 20 * time.Second, ReconcileInterval: 200 * time.Millisecond})

	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(cfg.Brokers)
	if len(want) == 0 {
		t.Fatal("mesh.json lists no brokers after start")
	}
	cfg.Brokers = []string{"127.0.0.9:1"}
	if err := dir.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := dir.LoadConfig()
		if err == nil && slices.Equal(got.Brokers, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("mesh.json lists %v 10 s later, want %v (%v)", got.Brokers, want, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
