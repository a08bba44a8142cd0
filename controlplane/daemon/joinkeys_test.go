package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"mesh/controlplane/datadir"
)

// leaveJoinKeys writes join-pending.json as a `meshctl join` of dir's node stopped
// at its last step leaves it: the node's id and its curve key's seed.
func leaveJoinKeys(t *testing.T, dir datadir.Dir) {
	t.Helper()
	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	curve, err := dir.LoadCurveKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := curve.Seed()
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]string{"node": cfg.Node, "token_hash": "00", "nkey_seed": "SU", "curve_seed": string(seed)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir.Path(datadir.JoinPendingFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServeRemovesAFinishedJoinsKeys: a join killed after it recorded itself done
// and before it removed its keys left join-pending.json, the node's private keys a
// second time; nothing removed it, and every backup copied it. serve's start
// removes it, and `meshctl check` (which writes nothing) says it is there.
func TestServeRemovesAFinishedJoinsKeys(t *testing.T) {
	dir := bootstrapped(t, "joinkeys")
	leaveJoinKeys(t, dir)
	rep := CheckDir(dir, time.Now(), time.Second)
	if err := rep.Err(); err != nil {
		t.Fatal(err)
	}
	var warned bool
	for _, c := range rep.Checks {
		for _, w := range c.Warnings {
			warned = warned || c.Name == CheckCurveKey && w != ""
		}
	}
	if !warned {
		t.Errorf("check does not mention the join's keys left: %+v", rep.Checks)
	}
	if _, err := os.Lstat(dir.Path(datadir.JoinPendingFile)); err != nil {
		t.Fatalf("check removed them: %v", err)
	}
	runUntilStopped(t, dir, time.Now)
	if _, err := os.Lstat(dir.Path(datadir.JoinPendingFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the finished join's keys are still there after serve started (%v)", err)
	}
}
