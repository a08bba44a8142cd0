package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/atomicfile"
	"mesh/host/internal/jsonfile"
	"mesh/host/wire"
)

// DefaultCheckFiles is how often the agent compares the managed root with the
// applied declaration when Options.CheckFiles is 0.
const DefaultCheckFiles = time.Minute

// KeptFileName is where, in the state directory, the agent keeps the signed
// envelope of the declaration it applied, for the file check after a restart:
// without it, a restarted agent checked nothing until the mesh re-signed the
// declaration, up to 12 hours later. It is a copy, verified again before each use;
// absent, stale or damaged, the check waits for the next copy the mesh sends.
const KeptFileName = "applied.envelope"

// checkTimer says when the next file check is due. The first comes at a random
// point of the first interval and each later one within a tenth of it, so that
// a fleet's agents started together do not read their disks together.
type checkTimer struct {
	every time.Duration
	t     *time.Timer
}

func newCheckTimer(every time.Duration) *checkTimer {
	c := &checkTimer{every: every}
	if every > 0 {
		c.t = time.NewTimer(time.Duration(float64(every) * (0.1 + 0.9*rand.Float64())))
	}
	return c
}

// C is the timer's channel; nil (never ready) when the check is off.
func (c *checkTimer) C() <-chan time.Time {
	if c.t == nil {
		return nil
	}
	return c.t.C
}

func (c *checkTimer) next() {
	if c.t != nil {
		c.t.Reset(time.Duration(float64(c.every) * (0.9 + 0.2*rand.Float64())))
	}
}

func (c *checkTimer) stop() {
	if c.t != nil {
		c.t.Stop()
	}
}

// keep makes raw, a copy of the applied declaration that verified, the one the file
// check applies again. It is written to KeptFileName at the next check, off the
// path of the declaration's apply.
func (a *Agent) keep(raw []byte) {
	if bytes.Equal(raw, a.kept) {
		return
	}
	a.kept, a.keptSaved = raw, false
}

// checkFiles puts back, as the applied declaration has them, the managed files
// changed or removed on this host since they were applied (a hand edit, a
// package's post-install script), and runs their hooks; it reports whether the
// node's state changed (put back, or a failure to). The declaration is verified
// again first, as one the mesh sends: a copy that expired, or that the keyring
// no longer trusts, is dropped, and the check waits for the next one. Nothing is
// checked while a newer declaration fails to apply: its retries own the root.
func (a *Agent) checkFiles(ctx context.Context) bool {
	if !a.applied.HaveApplied || a.retry.raw != nil {
		return false
	}
	if a.kept == nil && !a.keptLoaded {
		a.keptLoaded = true
		a.kept = a.loadKept()
		a.keptSaved = a.kept != nil
	}
	if a.kept == nil {
		return false
	}
	env, err := declarations.ParseEnvelope(a.kept)
	var v declarations.Verified
	if err == nil {
		v, err = env.VerifyDeclaration(a.keys, a.expect())
	}
	if err == nil && !v.SameAsApplied {
		err = errors.New("not the applied declaration")
	}
	var files []apply.File
	if err == nil {
		files, err = filesOf(v)
	}
	if err != nil {
		// Expired (the mesh out of reach for longer than its validity), or
		// superseded on disk by an older copy: not this node's fault, and not news.
		a.log.Debug("the kept copy of the applied declaration is no longer usable: files are checked again once the mesh sends a fresh copy", "err", err)
		a.kept, a.keptSaved = nil, false
		if rerr := os.Remove(filepath.Join(a.o.StateDir, KeptFileName)); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			a.log.Debug("could not remove the unusable copy of the applied declaration", "err", rerr)
		}
		return false
	}
	if !a.keptSaved {
		if err := atomicfile.WriteFile(filepath.Join(a.o.StateDir, KeptFileName), a.kept, 0o600); err != nil {
			// Only the check after a restart needs it; tried again at the next.
			a.log.Warn("could not keep a copy of the applied declaration in the state directory: after a restart, files are checked from the next copy the mesh sends", "err", err)
		} else {
			a.keptSaved = true
		}
	}
	code, msg := a.applied.LastErrorCode, a.applied.LastError
	changed, err := a.putBack(ctx, v.Version, files)
	if err != nil && ctx.Err() == nil {
		// Reported once: the same failure found again each interval is no news,
		// and stays the node's until a check or a declaration succeeds.
		if code != wire.StatusApplyFailed || msg != err.Error() || a.applied.LastErrorVersion != v.Version {
			a.failCode(wire.StatusApplyFailed, err, v.Version)
		}
	}
	return len(changed) > 0 || a.applied.LastErrorCode != code || a.applied.LastError != msg
}

// loadKept reads KeptFileName, nil when it is absent or cannot be used (it is
// verified before each use).
func (a *Agent) loadKept() []byte {
	p := filepath.Join(a.o.StateDir, KeptFileName)
	raw, err := jsonfile.ReadRegular(p, declarations.MaxEnvelopeSize)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.log.Debug("the kept copy of the applied declaration cannot be read: files are checked once the mesh sends a fresh copy", "file", p, "err", err)
		}
		return nil
	}
	return raw
}

// saveKept writes the kept copy if it has not been yet, as the agent stops.
func (a *Agent) saveKept() {
	if a.kept == nil || a.keptSaved {
		return
	}
	if err := atomicfile.WriteFile(filepath.Join(a.o.StateDir, KeptFileName), a.kept, 0o600); err == nil {
		a.keptSaved = true
	}
}
