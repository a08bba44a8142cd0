package daemon

import (
	"errors"
	"slices"
	"testing"

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
