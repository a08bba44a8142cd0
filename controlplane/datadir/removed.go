package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"mesh/host/readfile"
)

// RemovedFile records that the control plane removed this directory's node. Removal
// is for good (the node's keys are shut out), so the record only saves time: serve
// and bootstrap refuse the directory at once, where they would otherwise start Raft
// and wait for the other control nodes to say so, or advise starting a node that
// will not serve.
const RemovedFile = "removed.json"

// maxRemovedSize bounds what Removed reads: the record is a few dozen bytes.
const maxRemovedSize = 4096

// ErrRemoved means this control node was removed from the control plane
// (`meshctl control remove`): its data directory will not serve again.
var ErrRemoved = errors.New("this control node was removed from the control plane")

// Removal is what RemovedFile holds.
type Removal struct {
	Node string `json:"node"`
	// At is when this node learnt of its removal.
	At time.Time `json:"at"`
}

// RemovedError is a data directory whose node was removed. errors.Is(err,
// ErrRemoved) holds.
type RemovedError struct {
	Dir     Dir
	Removal Removal
}

func (e *RemovedError) Error() string {
	return fmt.Sprintf("%v: %s holds control node %s, removed (meshctl control remove; learnt %s), and it will not serve again. To bring the machine back, join it with a new control token and a fresh --data directory",
		ErrRemoved, e.Dir, e.Removal.Node, e.Removal.At.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrRemoved) hold.
func (e *RemovedError) Is(target error) bool { return target == ErrRemoved }

// MarkRemoved records that node, this directory's, was removed. Writing it again
// keeps the first record.
func (d Dir) MarkRemoved(node string, at time.Time) error {
	if _, ok, err := d.Removed(); err != nil || ok {
		return err
	}
	data, err := json.Marshal(Removal{Node: node, At: at.UTC()})
	if err != nil {
		return err
	}
	return WriteFile(d.Path(RemovedFile), append(data, '\n'), 0o644)
}

// Removed reads the record MarkRemoved wrote. A record that cannot be parsed still
// says the node was removed: nothing else writes the file.
func (d Dir) Removed() (Removal, bool, error) {
	data, err := readfile.Regular(d.Path(RemovedFile), maxRemovedSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Removal{}, false, nil
	case errors.Is(err, readfile.ErrTooLarge):
		return Removal{Node: "?"}, true, nil
	case errors.Is(err, readfile.ErrNotRegular):
		// A FIFO or a directory in its place: refused without waiting for a
		// writer, and said, rather than taken for a removal or its absence.
		return Removal{}, false, fmt.Errorf("read %s: %w", d.Path(RemovedFile), notAFile{err})
	case err != nil:
		return Removal{}, false, fmt.Errorf("read %s: %w", d.Path(RemovedFile), err)
	}
	var r Removal
	if json.Unmarshal(data, &r) != nil {
		return Removal{Node: "?"}, true, nil
	}
	return r, true, nil
}

// CheckNotRemoved returns a *RemovedError when the directory records its node's
// removal.
func (d Dir) CheckNotRemoved() error {
	r, ok, err := d.Removed()
	if err != nil || !ok {
		return err
	}
	return &RemovedError{Dir: d, Removal: r}
}
