package agent

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
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
// declaration, up to 12 hours later. It is a copy, verified again before it is
// applied; absent, stale or damaged, the agent asks the mesh for a fresh one.
const KeptFileName = "applied.envelope"

// checkTimer says when the next file check is due. The first comes at a random
// point of the first interval and each later one within a tenth of it, so that a
// fleet's agents started together do not read their disks together. While checks
// in a row put files back (something on the host keeps changing them), each waits
// twice as long as the one before, up to maxCheckBackoff: the hooks of those files
// do not run every interval, without end.
type checkTimer struct {
	every, wait time.Duration
	streak      int // checks in a row that put files back
	t           *time.Timer
}

// maxCheckBackoff bounds the wait between checks that keep putting files back.
const maxCheckBackoff = time.Hour

func newCheckTimer(every time.Duration) *checkTimer {
	c := &checkTimer{every: every, wait: every}
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

// next sets the timer after a check, which put files back or not.
func (c *checkTimer) next(putBack bool) {
	if c.t == nil {
		return
	}
	if putBack {
		c.streak++
		if c.streak > 1 {
			c.wait = min(2*c.wait, max(c.every, maxCheckBackoff))
		}
	} else {
		c.streak, c.wait = 0, c.every
	}
	c.t.Reset(time.Duration(float64(c.wait) * (0.9 + 0.2*rand.Float64())))
}

func (c *checkTimer) stop() {
	if c.t != nil {
		c.t.Stop()
	}
}

// checkOutcome is what a file check did: put files back, changed what the node
// reports (a put back, or a failure to), or found no usable copy and wants the
// mesh asked for the applied declaration.
type checkOutcome struct {
	putBack, report, ask bool
}

// differ is an Applier that can tell, only looking, whether applying files would
// change the root (apply.FileApplier): a check verifies and applies only then.
type differ interface {
	Differs(ctx context.Context, files []apply.File, previous []string) (bool, error)
}

// keep makes raw, a copy of the applied declaration that verified, whose files are
// files and which expires at until, the one the file check applies again. It is
// written to KeptFileName at the next check, off the path of the declaration's
// apply. It ends an ask for the applied declaration (askApplied), and the check
// being off for want of a usable copy.
func (a *Agent) keep(raw []byte, files []apply.File, until time.Time) {
	a.askApplied = false
	a.checkOn()
	if bytes.Equal(raw, a.kept) {
		return
	}
	a.kept, a.keptFiles, a.keptUntil, a.keptSaved = raw, files, until, false
}

// asDeclared reports whether the root is known to hold the kept copy's files as
// they are, with no failure of the check to end: then there is nothing to verify
// or apply. It looks only (differ), with the files of a copy verified before.
func (a *Agent) asDeclared(ctx context.Context) bool {
	d, ok := a.applier.(differ)
	if !ok || a.keptFiles == nil || a.checkFailed != "" ||
		a.applied.LastErrorCode == wire.StatusApplyFailed && a.applied.LastErrorVersion == a.applied.Version {
		return false
	}
	differs, err := d.Differs(ctx, a.keptFiles, a.applied.Managed)
	return err == nil && !differs
}

// checkFiles puts back, as the applied declaration has them, the managed files
// changed or removed on this host since they were applied (a hand edit, a
// package's post-install script), and runs their hooks. A root as declared is only
// looked at (asDeclared), while the copy that says so is within its validity;
// otherwise the declaration is verified again first, as one the mesh sends, and
// applied. A copy that does not verify is handled by unusableCopy. Nothing is
// checked while a newer declaration fails to apply: its retries own the root, and
// after a restart its recorded failure does.
func (a *Agent) checkFiles(ctx context.Context) checkOutcome {
	if !a.applied.HaveApplied || len(a.applied.Managed) == 0 || a.newerFailing() {
		return checkOutcome{}
	}
	if a.kept == nil && !a.keptLoaded {
		a.keptLoaded = true
		a.kept = a.loadKept()
		a.keptSaved = a.kept != nil
	}
	if a.kept == nil {
		// Asked for already, mostly: as the agent started (noKeptCopy), or as
		// the copy was removed (unusableCopy).
		if !a.checkOff(CheckOffNoCopy, "no copy of the applied declaration is kept; the mesh is asked for one") {
			return checkOutcome{}
		}
		a.log.Warn("files changed on this host are not put back until the mesh sends a copy of the applied declaration: none is kept")
		// One that cannot be read (its mode changed by hand) is not absent, and
		// was not asked for as the agent started.
		ask := !a.askApplied
		a.askApplied = true
		return checkOutcome{ask: ask}
	}
	a.keepOnDisk()
	// Past its expiry the copy is verified before it is trusted even to say the
	// root is as declared: the verifier decides, with its tolerance, whether the
	// check is off.
	if !a.o.Now().After(a.keptUntil) && a.asDeclared(ctx) {
		a.log.Debug("file check: the managed files are as declared", "version", a.applied.Version, "paths", len(a.applied.Managed))
		a.checkOn()
		a.checked()
		return checkOutcome{}
	}
	v, files, err := a.verifyKept()
	if err != nil {
		return a.unusableCopy(err)
	}
	if held, ask := a.rootNewer(); held {
		return checkOutcome{ask: ask}
	}
	a.checkOn()
	a.keptFiles, a.keptUntil = files, v.ExpiresAt
	a.noteIssuedAhead(v)
	code, msg := a.applied.LastErrorCode, a.applied.LastError
	changed, err := a.putBack(ctx, v.Version, files)
	a.checked()
	if err != nil && ctx.Err() == nil {
		// Reported once: the same failure found again at each check is no news,
		// and stays the node's until a check or a declaration succeeds. Told
		// apart by the path it concerns: the message names a temporary file.
		key := err.Error()
		var ae *apply.ApplyError
		if errors.As(err, &ae) {
			key = ae.Path
			var errno syscall.Errno
			if errors.As(err, &errno) {
				key += "\x00" + errno.Error() // another cause at the path is news
			}
		}
		if code != wire.StatusApplyFailed || a.applied.LastErrorVersion != v.Version || key != a.checkFailed {
			a.failPutBack(err, v.Version)
		}
		a.checkFailed = key
	} else if err == nil {
		a.checkFailed = ""
	}
	return checkOutcome{putBack: len(changed) > 0, report: len(changed) > 0 || a.applied.LastErrorCode != code || a.applied.LastError != msg}
}

// unusableCopy handles a kept copy that does not verify, and says whether to ask
// the mesh for the applied declaration. One outside its validity by this
// machine's clock (expired while the mesh was out of reach for longer than its
// validity, or the clock ahead) is kept, on disk too, and used again once it is
// valid: a clock set right, with or without a restart, brings the checks back
// before the mesh is reached, where removed it left them off for the rest of an
// outage (an audit). Any other fault is for good (older than the keyring after a
// rotation, older than the applied version after a crash, damaged): that copy is
// removed. Either way no failure is reported, the check is off until a usable
// copy is in hand (meshhost status and mesh_agent_file_check_off say so), and the
// mesh is asked for one as the check turns off.
func (a *Agent) unusableCopy(err error) checkOutcome {
	if errors.Is(err, declarations.ErrExpired) || errors.Is(err, declarations.ErrNotYetValid) {
		if !a.checkOff(declarations.Code(err), "the kept copy of the applied declaration is not valid by this machine's clock; the mesh is asked for a fresh one: "+err.Error()) {
			return checkOutcome{}
		}
		a.log.Warn("files changed on this host are not put back until a fresh copy of the applied declaration arrives from the mesh, or this machine's clock makes the kept one valid again", "err", err)
	} else {
		a.log.Info("the kept copy of the applied declaration cannot be used any more: removed, and the mesh asked for a fresh one, which the file check uses from then on", "err", err)
		a.dropKept()
		a.checkOff(CheckOffNoCopy, "the kept copy of the applied declaration could not be used and was removed; the mesh is asked for one: "+err.Error())
	}
	a.askApplied = true
	return checkOutcome{ask: true}
}

// dropKept forgets the kept copy and removes it from the state directory: a
// failure to write it is over too.
func (a *Agent) dropKept() {
	a.kept, a.keptFiles, a.keptUntil, a.keptSaved = nil, nil, time.Time{}, false
	a.setNotKept("", "")
	if err := os.Remove(filepath.Join(a.o.StateDir, KeptFileName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn("could not remove the unusable copy of the applied declaration", "err", err)
	}
}

// errNotApplied is a kept copy that verifies but is not the applied declaration.
var errNotApplied = errors.New("not the applied declaration")

// verifyKept verifies the kept copy as one the mesh sends (signature, audience,
// keyring, expiry), and that it is the applied declaration, whose files it
// returns. Its issue time may lie any distance in this machine's future
// (AppliedAnyIssueTime, for this copy only): putting back what is applied applies
// nothing new, and an issue time carries no security weight (decision 0006).
// Refused, a clock stepped back by a day stopped the checks without a word until
// the clock was set right (an audit).
func (a *Agent) verifyKept() (declarations.Verified, []apply.File, error) {
	return a.verifyCopy(a.kept)
}

// verifyCopy is verifyKept of raw, a copy of the applied declaration.
func (a *Agent) verifyCopy(raw []byte) (declarations.Verified, []apply.File, error) {
	env, err := declarations.ParseEnvelope(raw)
	if err != nil {
		return declarations.Verified{}, nil, err
	}
	exp := a.expect()
	exp.AppliedAnyIssueTime = true
	v, err := env.VerifyDeclaration(a.keys, exp)
	if err == nil && !v.SameAsApplied {
		err = errNotApplied
	}
	if err != nil {
		return v, nil, err
	}
	files, err := filesOf(v)
	return v, files, err
}

// noteIssuedAhead logs, once until it ends, that the kept copy was issued further
// in this machine's future than a new declaration may be: the checks go on, but
// the next declaration is refused (not_yet_valid) until the clock is right, and
// nothing else says so before it arrives.
func (a *Agent) noteIssuedAhead(v declarations.Verified) {
	if v.IssuedAhead && !a.issuedAhead {
		a.log.Warn("this machine's clock is behind the applied declaration's issue time by more than the tolerance: "+
			"its files are still checked and put back, but a new declaration is refused (not_yet_valid) until the clock is right",
			"version", v.Version, "issued_at", v.IssuedAt.UTC().Format(time.RFC3339), "now", a.o.Now().UTC().Format(time.RFC3339))
	}
	a.issuedAhead = v.IssuedAhead
}

// newerFailing reports whether a declaration newer than the applied one fails to
// apply: its retries own the managed root, and after a restart (or once its
// attempts ended) its recorded failure does. Nothing puts the applied one's files
// back meanwhile, neither the check nor a copy of it the mesh (or a broker
// replaying one) sends.
func (a *Agent) newerFailing() bool {
	return a.retry.raw != nil ||
		a.applied.LastErrorCode == wire.StatusApplyFailed && a.applied.LastErrorVersion > a.applied.Version
}

// checked records, for meshhost status, that the check compared the files now.
func (a *Agent) checked() {
	now := a.o.Now()
	a.stats.set(func(s *stats) { s.checkedAt = now })
}

// noKeptCopy reports whether the agent manages files but keeps no copy of the
// declaration it applied for the file check (an agent from before the check, or
// one stopped before its first check): the first sync asks the mesh for it.
func (a *Agent) noKeptCopy() bool {
	if !a.applied.HaveApplied || len(a.applied.Managed) == 0 || a.o.CheckFiles < 0 {
		return false
	}
	_, err := os.Lstat(filepath.Join(a.o.StateDir, KeptFileName))
	return errors.Is(err, fs.ErrNotExist)
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

// keepOnDisk writes the kept copy to KeptFileName if it is not yet. Only the check
// after a restart needs it, so a failure is tried again at the next check, and
// said once per distinct failure, not at every check (a full state directory
// fails at each: it was a warning a minute without end), and once as it is kept
// again; meshhost status shows it meanwhile.
func (a *Agent) keepOnDisk() {
	err := a.saveKept()
	if err == nil {
		if a.notKept != "" {
			a.log.Info("kept the copy of the applied declaration in the state directory again")
			a.setNotKept("", "")
		}
		return
	}
	if key := failureKey(err); key != a.notKept {
		a.log.Warn("could not keep a copy of the applied declaration in the state directory: after a restart, files are checked from the next copy the mesh sends; tried again at each check", "err", err)
		a.setNotKept(key, err.Error())
		return
	}
	a.setNotKept(a.notKept, err.Error())
}

// setNotKept notes the failure to keep the copy on disk: key tells failures
// apart (failureKey), text is shown by meshhost status; both "" once kept.
func (a *Agent) setNotKept(key, text string) {
	a.notKept = key
	a.stats.set(func(s *stats) { s.notKept = text })
}

// failureKey tells a failure to write a file apart from another: its system error
// when it has one, since the message names a temporary file, new at each write.
func failureKey(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// saveKept writes the kept copy to KeptFileName if it has not been yet: at a check,
// and as the agent stops.
func (a *Agent) saveKept() error {
	if a.kept == nil || a.keptSaved {
		return nil
	}
	if err := atomicfile.WriteFile(filepath.Join(a.o.StateDir, KeptFileName), a.kept, 0o600); err != nil {
		return err
	}
	a.keptSaved = true
	return nil
}
