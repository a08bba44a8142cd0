package agent

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The root's mark is an extended attribute on the managed root that names the
// declaration last applied to it, "VERSION DIGEST": the root's own record of what
// it holds, beside the state directory's. A state directory restored from an older
// copy (or an apply whose state save a crash cut off) says an older version than
// the root holds, and the file check put the older files back, and ran their
// hooks, for as long as the mesh was out of reach (audit of the host's weeks,
// finding 2).
//
// The mark must be one only the agent could have written: a mark naming a newer
// declaration turns the file check off until the mesh speaks. On Linux anyone who
// may write a directory without the sticky bit may also set its user.* attributes
// (a reviewer's audit, 2026-12: uid 65534 set one on a root-owned 0777 root, which
// statedir.CheckRoot accepts), and so could turn the check off while swapping the
// root's files for theirs. So the agent marks user.meshhost.applied, and trusts it,
// only on a root that is its own user's (root's, for the unit's agent) and that
// group and others may not write, or that has the sticky bit (there Linux lets only
// the owner, or CAP_FOWNER, set a user.* attribute): userMarkTrusted. On any other
// root it marks nothing and reads nothing, says so once, and goes by the state
// alone.
//
// Not trusted.*, which only CAP_SYS_ADMIN may set whatever the root's mode: the
// unit runs the agent without it (dist/systemd/meshhost.service's
// CapabilityBoundingSet), and an agent that marked trusted.* kept no mark at all
// under it (a second review, 2026-12).
//
// A mark set while the root was writable by others, then kept as the operator
// tightened its mode, can still turn the check off, but only until the mesh's
// answer to the ask it causes: a fresh copy of the applied declaration marks the
// root again (markCurrent).
const rootMarkAttr = "user.meshhost.applied"

// userMarkTrusted reports whether a user.* mark on a root owned by uid, of mode
// perm (permission bits, sticky included, as stat gives them), can only have been
// set by an agent running as euid (or by a privileged process): the root is
// euid's, and group and others may not write it, or the sticky bit keeps them
// from setting its attributes. A root of root's while the agent runs as another
// user is not: whoever else may write it may set the mark.
func userMarkTrusted(uid, euid int, perm uint32) bool {
	const sticky, othersWrite = 0o1000, 0o022
	return uid == euid && (perm&othersWrite == 0 || perm&sticky != 0)
}

// rootMarkValue is what a mark says: the version and the body's digest (hex
// SHA-256) of the declaration last applied to the root.
type rootMarkValue struct {
	version uint64
	digest  string
}

func (m rootMarkValue) text() []byte { return fmt.Appendf(nil, "%d %s", m.version, m.digest) }

// parseRootMark reads a mark's text, "VERSION DIGEST"; false for anything else.
func parseRootMark(b []byte) (rootMarkValue, bool) {
	v, d, ok := strings.Cut(string(b), " ")
	if !ok {
		return rootMarkValue{}, false
	}
	version, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return rootMarkValue{}, false
	}
	if raw, err := hex.DecodeString(d); err != nil || len(raw) != 32 {
		return rootMarkValue{}, false
	}
	return rootMarkValue{version: version, digest: strings.ToLower(d)}, true
}

// CheckOffRootNewer: the managed root was last written by a newer declaration
// than the applied state names, or by another body of the same version (the
// root's mark): the state directory was restored from an older copy, or an apply
// was cut off before its state was saved. Files are not put back from the state's
// declaration until the mesh sends a declaration as its current one.
const CheckOffRootNewer = "root_newer"

// rootNewer reports, and logs once, that the root holds another declaration than
// the applied state (a newer version, or the same version with another body, by
// its mark): nothing is put back, neither by the check nor by a copy of the applied
// declaration older than the state's, and the mesh is asked; its current
// declaration ends it (markCurrent, or a newer one applied). A mark that does not
// hold any more (removed on purpose, or no longer trusted) ends it too.
func (a *Agent) rootNewer() (held bool, ask bool) {
	m, ok := rootMark(a.o.Root, a.euid)
	// Letter case aside: the state file takes the digest in either (a review).
	newer := ok && (m.version > a.applied.Version || m.version == a.applied.Version && !strings.EqualFold(m.digest, a.applied.BodyDigest))
	if !newer {
		if a.off.code == CheckOffRootNewer {
			a.log.Info("the managed root's mark no longer names another declaration than the state directory's (removed, or not trusted any more): the file check puts back files changed on this host again",
				"root", a.o.Root, "state_version", a.applied.Version, "off_since", a.off.since.UTC().Format(time.RFC3339))
			a.clearOff()
		}
		return false, false
	}
	var why string
	if m.version > a.applied.Version {
		why = fmt.Sprintf("the managed root was last written by v%d, newer than the v%d the state directory names (restored from an older copy, or an apply cut off before its state was saved): files are not put back from v%d until the mesh sends its current declaration", m.version, a.applied.Version, a.applied.Version)
	} else {
		why = fmt.Sprintf("the managed root was last written by another body of v%d than the state directory names (restored from another copy): files are not put back until the mesh sends its current declaration", m.version)
	}
	if a.checkOff(CheckOffRootNewer, why) {
		a.log.Warn("files changed on this host are not put back: "+why+"; to go back to the state's declaration on purpose, remove the mark (setfattr -x "+rootMarkAttr+" ROOT)",
			"root", a.o.Root, "root_version", m.version, "state_version", a.applied.Version)
		ask = !a.askApplied
		a.askApplied = true
	}
	return true, ask
}

// markApplied marks the root with the applied declaration (rootMarkValue) and
// reports whether it did. A failure is said once (rootMarkFailed): the check then
// goes by the state directory alone. Marked, the root holds what the state names,
// and a check off because the root held another declaration is on again.
func (a *Agent) markApplied() bool {
	m := rootMarkValue{version: a.applied.Version, digest: a.applied.BodyDigest}
	if err := markRoot(a.o.Root, a.euid, m); err != nil {
		if !a.rootMarkFailed {
			a.rootMarkFailed = true
			a.log.Warn("could not mark the managed root with the version applied; the file check goes by the state directory alone", "root", a.o.Root, "err", err)
		}
		return false
	}
	if a.off.code == CheckOffRootNewer {
		a.log.Info("the managed root is marked with the declaration the mesh sent as its current one: the file check puts back files changed on this host again",
			"root", a.o.Root, "version", m.version, "off_since", a.off.since.UTC().Format(time.RFC3339))
		a.clearOff()
	}
	return true
}

// markCurrent marks the root with the applied declaration, a fresh copy of which
// the mesh just sent (at its re-sign, or answering the ask of rootNewer): the mesh
// says that is this node's current declaration, whatever the root's mark named.
// Before, such a copy turned the check on (logging that it put files back again)
// without marking the root, and the next check turned it off again, a warning and
// an ask at every interval, for good when the mark was higher than the mesh's own
// version (a control plane and a state directory both restored from backups).
func (a *Agent) markCurrent() {
	if m, ok := rootMark(a.o.Root, a.euid); ok && m.version == a.applied.Version && strings.EqualFold(m.digest, a.applied.BodyDigest) {
		return
	}
	a.markApplied()
}
