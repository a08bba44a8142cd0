package agent

import "fmt"

// rootMarkAttr is the extended attribute on the managed root that names the
// declaration last applied to it, "VERSION DIGEST": the root's own record of what
// it holds, beside the state directory's. A state directory restored from an older
// copy (or an apply whose state save a crash cut off) says an older version than
// the root holds, and the file check put the older files back, and ran their
// hooks, for as long as the mesh was out of reach (audit of the host's weeks,
// finding 2).
const rootMarkAttr = "user.meshhost.applied"

// CheckOffRootNewer: the managed root was last written by a newer declaration
// than the applied state names (rootMarkAttr): the state directory was restored
// from an older copy, or an apply was cut off before its state was saved. Files
// are not put back from the older declaration until the mesh sends the current one.
const CheckOffRootNewer = "root_newer"

// rootNewer reports, and logs once, that the root holds a newer declaration than
// the applied state: the check then puts nothing back and asks the mesh, whose
// current declaration ends it.
func (a *Agent) rootNewer() (held bool, ask bool) {
	marked, ok := rootMark(a.o.Root)
	if !ok || marked <= a.applied.Version {
		return false, false
	}
	why := fmt.Sprintf("the managed root was last written by v%d, newer than the v%d the state directory names (restored from an older copy, or an apply cut off before its state was saved): files are not put back from v%d until the mesh sends the current declaration", marked, a.applied.Version, a.applied.Version)
	if a.checkOff(CheckOffRootNewer, why) {
		a.log.Warn("files changed on this host are not put back: "+why+"; to go back to the older declaration on purpose, remove the mark (setfattr -x "+rootMarkAttr+" ROOT)",
			"root", a.o.Root, "root_version", marked, "state_version", a.applied.Version)
		ask = !a.askApplied
		a.askApplied = true
	}
	return true, ask
}
