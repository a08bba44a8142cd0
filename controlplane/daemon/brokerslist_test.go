package daemon

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"mesh/controlplane/replication"
)

// TestMeshJSONListsTheBrokersAgain: a broker list mesh.json does not hold (a save
// that failed on a full disk, an edit by hand) is written again within a reconcile
// interval, not only at the next change of the control nodes, so meshctl on this
// node tries the brokers there are.
func TestMeshJSONListsTheBrokersAgain(t *testing.T) {
	dir := bootstrapped(t, "brokers")
	d, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), ReadyTimeout: 20 * time.Second,
		ReconcileInterval: 200 * time.Millisecond,
		Timeouts:          replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran; d.Close() })

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
