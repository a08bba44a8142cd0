package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/state"
)

// TestWhatIsRevokedIsBackedUpAtOnce: a backup from before a revocation (of nodes,
// of operator credentials, a control node's removal), a token's cancellation or a
// keyring change restores a control plane that admits what was revoked or
// cancelled, or signs with a key the hosts left behind: each asks for a backup at
// once (effectBackup, or effectKeyring, which takes one), where other changes wait
// for the interval. The removal's ask had no test (the last note). A command
// refused asks nothing.
func TestWhatIsRevokedIsBackedUpAtOnce(t *testing.T) {
	d := &Daemon{effects: newEffectQueue()}
	d.cfg.Node = "cp-1"
	d.effects.opened.Store(true)
	asksBackup := func(c state.Command, res state.Result) bool {
		d.applied(&c, res)
		kinds := []effectKind{}
		for _, e := range d.effects.take() {
			kinds = append(kinds, e.kind)
		}
		return slices.Contains(kinds, effectBackup) || slices.Contains(kinds, effectKeyring)
	}
	for _, c := range []struct {
		name string
		cmd  state.Command
		want bool
	}{
		{"revoke", state.Command{Op: state.OpRevoke}, true},
		{"token cancel", state.Command{Op: state.OpCancelTokens}, true},
		{"operator revoke", state.Command{Op: state.OpRevokeOperators}, true},
		{"control remove", state.Command{Op: state.OpRemoveControl, RemoveControl: &state.RemoveControlCmd{Node: "cp-2"}}, true},
		{"control remove of this node", state.Command{Op: state.OpRemoveControl, RemoveControl: &state.RemoveControlCmd{Node: "cp-1"}}, true},
		{"signing-key rotate", state.Command{Op: state.OpRotate}, true},
		{"signing-key retire", state.Command{Op: state.OpRetire}, true},
		{"label", state.Command{Op: state.OpLabel}, false},
	} {
		if got := asksBackup(c.cmd, state.Result{}); got != c.want {
			t.Errorf("%s: asks for a backup at once %v, want %v", c.name, got, c.want)
		}
		if c.want && asksBackup(c.cmd, state.Result{Err: errors.New("refused")}) {
			t.Errorf("%s refused: asks for a backup", c.name)
		}
	}
}

// TestASnapshotFromTheLeaderHasItsEffects: a follower too far behind for the log
// (cut off for a while from a busy mesh) is sent the leader's snapshot, and the
// commands it stands for are never applied one by one: their effects were not
// carried out, and a rotation and retirement missed so kept the node signing with
// the retired key once it led. A snapshot restored queues every effect that follows
// from the state as a whole, and the node's stop when the state says it was
// removed.
func TestASnapshotFromTheLeaderHasItsEffects(t *testing.T) {
	curve, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{effects: newEffectQueue(), fsm: state.NewFSM(), curve: curve}
	d.cfg.Node = "cp-1"
	d.effects.opened.Store(true)
	d.fsm.OnRestore(d.restored)
	restore := func(removed bool) []effectKind {
		st := state.New()
		st.ControlNodes["cp-1"] = &state.ControlNode{ID: "cp-1", Removed: removed}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatal(err)
		}
		var kinds []effectKind
		for _, e := range d.effects.take() {
			kinds = append(kinds, e.kind)
		}
		return kinds
	}
	got := restore(false)
	for _, want := range []effectKind{effectKeyring, effectMembership, effectOperatorsRemoved, effectOperatorsRevoked} {
		if !slices.Contains(got, want) {
			t.Errorf("a snapshot restored: effects %v, want %v among them", got, want)
		}
	}
	if slices.Contains(got, effectRemoved) {
		t.Errorf("a snapshot restored that keeps this node: effects %v, want no stop", got)
	}
	if got := restore(true); !slices.Contains(got, effectRemoved) {
		t.Errorf("a snapshot restored that says this node was removed: effects %v, want the stop", got)
	}
}

// TestARunningNodeCarriesOutARestoredSnapshotsEffects: the restore's effects are
// wired into a serving control node. A snapshot whose keyring lists a key this
// node was never given (a rotation it missed, whose sealed copy is not there either)
// is restored under it: the node takes up the keyring, and says it lacks the key.
func TestARunningNodeCarriesOutARestoredSnapshotsEffects(t *testing.T) {
	var log lockedBuffer
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "restored"), Logger: slog.New(slog.NewTextHandler(&log, nil))})
	var data []byte
	d.fsm.Read(func(s *state.State) {
		other, _, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		c := *s
		c.Keyring.Keys = append(slices.Clone(s.Keyring.Keys), hex.EncodeToString(other))
		if data, err = json.Marshal(&c); err != nil {
			t.Fatal(err)
		}
	})
	if err := d.fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the node takes up the restored keyring", func() bool {
		return strings.Contains(log.String(), "this control node lacks signing keys of the keyring")
	})
}

// TestAnUnfinishedBootstrapIsSaidAsSuch: a bootstrap stopped before its last step
// (here, its signing key and Raft store not written) then served said the key was
// missing and to restore it from a backup or remove the node and join it again,
// where no mesh exists yet (a docs walkthrough). serve and check say first that the
// directory holds an unfinished bootstrap, and to run it again; the file's own
// error stays the one a caller branches on. A node that served is told nothing of
// bootstrap.
func TestAnUnfinishedBootstrapIsSaidAsSuch(t *testing.T) {
	dir := bootstrapped(t, "unfinished")
	for _, f := range []string{datadir.SigningKeyFile, datadir.RaftDir} {
		if err := os.RemoveAll(dir.Path(f)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), Timeouts: testTimeouts})
	want := "most likely a `meshctl bootstrap` stopped before its last step"
	if err == nil || !strings.HasPrefix(err.Error(), string(dir)+" holds no Raft store") || !strings.Contains(err.Error(), want) ||
		!strings.Contains(err.Error(), "if it served, do not") || !strings.Contains(err.Error(), datadir.SigningKeyFile) {
		t.Fatalf("serve of an unfinished bootstrap: %v, want it said first, the missing file after", err)
	}
	var fe *datadir.FileError
	if !errors.As(err, &fe) {
		t.Errorf("the file's error is not kept: %v", err)
	}
	r := CheckDir(dir, time.Now(), time.Second)
	said := false
	for _, c := range r.Checks {
		said = said || c.Err != nil && strings.Contains(c.Err.Error(), want)
	}
	if !said {
		t.Errorf("check of an unfinished bootstrap does not say so: %+v", r.Checks)
	}

	// A file that is there but damaged: bootstrap, which takes a step whose file
	// is there as done, would not mend it.
	if err := os.WriteFile(dir.Path(datadir.SigningKeyFile), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), Timeouts: testTimeouts}); err == nil || strings.Contains(err.Error(), want) {
		t.Errorf("serve with a damaged key: %v, want no word of bootstrap", err)
	}
	if err := os.Remove(dir.Path(datadir.SigningKeyFile)); err != nil {
		t.Fatal(err)
	}
	// A node that served, by mesh.json (served recorded, or other brokers listed):
	// the file's own remedy alone.
	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []datadir.Config{func() datadir.Config { c := cfg; c.Served = true; return c }(), func() datadir.Config { c := cfg; c.Brokers = append(c.Brokers, "10.0.0.2:7300"); return c }()} {
		if err := dir.SaveConfig(c); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), Timeouts: testTimeouts}); err == nil || strings.Contains(err.Error(), want) {
			t.Errorf("serve of a node that served (%+v), its key missing: %v, want no word of bootstrap", c, err)
		}
	}
}

// TestNodesSayTheSharedKeyGrace: meshctl's line on a key held by more than one
// connection named the default grace whatever serve was given (a docs
// walkthrough): the answer says the grace the control node runs.
func TestNodesSayTheSharedKeyGrace(t *testing.T) {
	d := fleet(t, 0)
	res, err := d.nodes(api.NodesRequest{})
	if err != nil || time.Duration(res.SharedKeyGrace) != d.opts.SharedKeyGrace || res.SharedKeyGrace == 0 {
		t.Fatalf("nodes: grace %v, %v; want %v", time.Duration(res.SharedKeyGrace), err, d.opts.SharedKeyGrace)
	}
}
