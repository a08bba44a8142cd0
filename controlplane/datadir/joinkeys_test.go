package datadir

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/nats-io/nkeys"
)

// writeJoinKeys writes a join's pending keys for node, with curve's seed, as
// `meshctl join` keeps them.
func writeJoinKeys(t *testing.T, d Dir, node string, curve nkeys.KeyPair) {
	t.Helper()
	seed, err := curve.Seed()
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]string{"node": node, "token_hash": "00", "nkey_seed": "SU", "curve_seed": string(seed)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.Path(JoinPendingFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestAFinishedJoinsKeysAreRemoved: join-pending.json left in the directory of a
// node whose join completed (mesh.json no longer says joining) is removed when it
// holds that join's keys: the node's and its curve key. Another file by that name
// is left and said to be a stray; so is the file of a join still under way, which
// is not said at all.
func TestAFinishedJoinsKeysAreRemoved(t *testing.T) {
	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	other, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	done := Config{Node: "cp-2", Joined: true}
	for _, tc := range []struct {
		name        string
		cfg         Config
		node        string
		keys        nkeys.KeyPair
		wantRemoved bool
		wantErr     error
	}{
		{"the finished join's", done, "cp-2", curve, true, nil},
		{"another key", done, "cp-2", other, false, ErrStrayJoinKeys},
		{"another node", done, "cp-3", curve, false, ErrStrayJoinKeys},
		{"a join under way", Config{Node: "cp-2", Joined: true, Joining: true}, "cp-2", curve, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Dir(t.TempDir())
			if removed, err := d.RemoveFinishedJoinKeys(tc.cfg, curve); removed || err != nil {
				t.Fatalf("without the file: %v, %v", removed, err)
			}
			writeJoinKeys(t, d, tc.node, tc.keys)
			left, err := d.LeftJoinKeys(tc.cfg, curve)
			if left != tc.wantRemoved || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("LeftJoinKeys = %v, %v; want %v, %v", left, err, tc.wantRemoved, tc.wantErr)
			}
			removed, err := d.RemoveFinishedJoinKeys(tc.cfg, curve)
			if removed != tc.wantRemoved || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("RemoveFinishedJoinKeys = %v, %v; want %v, %v", removed, err, tc.wantRemoved, tc.wantErr)
			}
			_, serr := os.Lstat(d.Path(JoinPendingFile))
			if gone := errors.Is(serr, os.ErrNotExist); gone != tc.wantRemoved {
				t.Errorf("join-pending.json gone: %v, want %v (%v)", gone, tc.wantRemoved, serr)
			}
		})
	}
}
