package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/nats-io/nkeys"

	"mesh/host/atomicfile"
)

// ErrStrayJoinKeys means JoinPendingFile is in the directory of a control node
// whose join completed, and it is not that join's: serve leaves it, and says so.
var ErrStrayJoinKeys = errors.New("a join's private keys that are not this node's finished join's")

// LeftJoinKeys reports whether JoinPendingFile, the keys `meshctl join` keeps until
// it completes, is still in the directory of the control node cfg (mesh.json, read
// by LoadConfig) once its join completed: `meshctl join` removes it as its last
// step, after it records the join as done, so a join killed between the two, or a
// removal a power cut lost, left the node's private keys a second time, in every
// backup taken after. It is that join's when it names cfg's node and its curve seed
// is curve's (the node's own key). An error says what else stands at that name:
// something unreadable, or a file of other keys (ErrStrayJoinKeys), which only a
// person can judge. A directory with a join under way (cfg.Joining) holds the file
// for that join: false, and no error.
func (d Dir) LeftJoinKeys(cfg Config, curve nkeys.KeyPair) (bool, error) {
	if cfg.Joining {
		return false, nil
	}
	path := d.Path(JoinPendingFile)
	data, err := readCapped(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w; this control node's join completed, so it is a leftover that may hold private keys: look at it, then remove it", path, err)
	}
	// The fields of join's pending keys this needs (controlplane/join).
	var p struct {
		Node      string `json:"node"`
		CurveSeed string `json:"curve_seed"`
	}
	ours := json.Unmarshal(data, &p) == nil && p.Node == cfg.Node && sameCurveKey(p.CurveSeed, curve)
	if !ours {
		return false, fmt.Errorf("%s: %w (mesh.json says control node %s completed its join); serve leaves it: look at it, then remove it",
			path, ErrStrayJoinKeys, cfg.Node)
	}
	return true, nil
}

// RemoveFinishedJoinKeys removes JoinPendingFile when it holds the keys of the
// completed join of cfg (LeftJoinKeys), and flushes the directory so that the
// removal outlasts a power cut. It reports whether it removed it; an error is
// LeftJoinKeys's, or the removal's.
func (d Dir) RemoveFinishedJoinKeys(cfg Config, curve nkeys.KeyPair) (bool, error) {
	left, err := d.LeftJoinKeys(cfg, curve)
	if !left {
		return false, err
	}
	path := d.Path(JoinPendingFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: it holds the keys of this node's finished join a second time: remove it", err)
	}
	if err := atomicfile.SyncDir(string(d)); err != nil {
		return true, fmt.Errorf("removed %s, but flushing %s: %w", path, d, err)
	}
	return true, nil
}

// sameCurveKey reports whether seed is the seed of curve's key pair.
func sameCurveKey(seed string, curve nkeys.KeyPair) bool {
	if curve == nil {
		return false
	}
	kp, err := nkeys.FromCurveSeed([]byte(seed))
	if err != nil {
		return false
	}
	defer kp.Wipe()
	a, err1 := kp.PublicKey()
	b, err2 := curve.PublicKey()
	return err1 == nil && err2 == nil && a == b
}
