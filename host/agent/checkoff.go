package agent

import "time"

// Why the file check is off (FilesStatus.OffCode), for a caller to branch on.
const (
	// CheckOffExpired: the kept copy of the applied declaration expired by this
	// machine's clock (the mesh out of reach for longer than its validity, or the
	// clock ahead). It is kept, and used again once a fresh copy arrives or the
	// clock makes it valid.
	CheckOffExpired = "expired"
	// CheckOffNotYetValid: the kept copy is not valid yet by this machine's clock.
	// A copy of the applied declaration never is (decision 0006: its issue time
	// carries no weight), so this names a copy that is not one.
	CheckOffNotYetValid = "not_yet_valid"
	// CheckOffNoCopy: no copy of the applied declaration is kept (none arrived
	// since the agent started without one, or the one kept was removed: older
	// than the keyring or the applied version, or damaged).
	CheckOffNoCopy = "no_copy"
)

// checkOffState is why the file check cannot put files back, and since when; the
// zero value while it can.
type checkOffState struct {
	code, why string
	since     time.Time
}

// checkOff notes that the file check cannot put files back: code is one of the
// CheckOff constants, why says it to a person. It reports whether that is news
// (the check could, or was off for another reason), for the caller to log and
// ask the mesh once, not at every check. Since stays the first moment off.
func (a *Agent) checkOff(code, why string) bool {
	if a.off.code == code {
		return false
	}
	if a.off.code == "" {
		a.off.since = a.o.Now()
	}
	a.off.code, a.off.why = code, why
	off := a.off
	a.stats.set(func(s *stats) { s.checkOff = off })
	return true
}

// checkOn notes that the file check can put files back again: a usable copy of
// the applied declaration is in hand. A check off because the root holds another
// declaration (CheckOffRootNewer) is not ended by a copy in hand but by the root's
// mark (rootNewer, markApplied): ended here, a copy of the same version said the
// check put files back again, and the next check turned it off again, at every
// interval (a reviewer's audit).
func (a *Agent) checkOn() {
	if a.off.code == "" || a.off.code == CheckOffRootNewer {
		return
	}
	a.log.Info("the file check puts back files changed on this host again: it holds a usable copy of the applied declaration",
		"off_since", a.off.since.UTC().Format(time.RFC3339), "was", a.off.code)
	a.clearOff()
}

// clearOff notes that the file check is on, its caller having said why.
func (a *Agent) clearOff() {
	a.off = checkOffState{}
	a.stats.set(func(s *stats) { s.checkOff = checkOffState{} })
}
