package daemon

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"mesh/controlplane/state"
)

// TestEntryOfANewerMeshctlStopsTheNode: a control node whose log holds an entry of
// newer rules than its own (a node put back to an older meshctl, the others having
// gone on) stops serving with ErrNewerRules, and refuses to open again at the same
// entry, rather than apply the rest of the log otherwise than the others do.
func TestEntryOfANewerMeshctlStopsTheNode(t *testing.T) {
	dir := bootstrapped(t, "rules")
	open := func() (*Daemon, error) {
		return Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), ReadyTimeout: 20 * time.Second,
			Timeouts: testTimeouts})
	}
	d, err := open()
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- d.Run(context.Background()) }()
	before, _ := d.raft.Apply(state.Command{Op: state.OpProbe, At: time.Now().UTC(), Rules: state.ApplyRules}, time.Minute)
	if before.Err != nil {
		t.Fatalf("an entry of this node's own rules: %v", before.Err)
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpProbe, At: time.Now().UTC(), Rules: state.ApplyRules + 1}, time.Minute)
	var nre *state.NewerRulesError
	if err != nil || !errors.As(res.Err, &nre) || nre.Rules != state.ApplyRules+1 || nre.Op != state.OpProbe {
		t.Fatalf("an entry of newer rules: %v, %v; want *NewerRulesError", res.Err, err)
	}
	select {
	case err := <-ran:
		if !errors.Is(err, ErrNewerRules) {
			t.Fatalf("Run = %v, want ErrNewerRules", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node still serves after an entry of newer rules")
	}
	if _, err := d.fsm.Snapshot(); !errors.Is(err, ErrNewerRules) {
		t.Fatalf("a snapshot of the stopped state machine: %v, want ErrNewerRules", err)
	}
	d.Close()

	if d2, err := open(); !errors.Is(err, ErrNewerRules) {
		if d2 != nil {
			d2.Close()
		}
		t.Fatalf("opened again: %v, want ErrNewerRules (the entry is still in the log)", err)
	}
}
