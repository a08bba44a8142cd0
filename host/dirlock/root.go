package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
)

// RootInUseError says that a managed root is another agent's: the same directory,
// one inside the root of another (Outer), or one holding it (Inner). It matches
// ErrInUse.
type RootInUseError struct {
	Root string
	// Outer is the other agent's root that holds Root; "" when it is Root itself.
	Outer string
	// Inner is the other agent's root inside Root, as its links lead; "" when
	// Root does not hold it.
	Inner string
	// PID is the other agent's process, as the kernel gives it (0 when unknown).
	PID int
}

func (e *RootInUseError) Error() string {
	if e.Outer != "" {
		return fmt.Sprintf("managed root %s is inside %s, the managed root of a running agent (pid %d): two agents on one tree put back each other's files for good, "+
			"each running its hooks every time; give each agent a root of its own, apart from the other's", e.Root, e.Outer, e.PID)
	}
	if e.Inner != "" {
		return fmt.Sprintf("managed root %s holds %s, the managed root of a running agent (pid %d): two agents on one tree put back each other's files for good, "+
			"each running its hooks every time; give each agent a root of its own, apart from the other's", e.Root, e.Inner, e.PID)
	}
	return fmt.Sprintf("managed root %s is in use by another running agent (pid %d): two agents on one root put back each other's files for good, "+
		"each running its hooks every time; give each agent a root of its own", e.Root, e.PID)
}

// Is matches ErrInUse.
func (e *RootInUseError) Is(target error) bool { return target == ErrInUse }

// RootLock is an agent's claim on its managed root.
type RootLock struct {
	release func()
	// Unheld says why the root is not claimed, when a process of another user
	// holds its claim: the agent goes on, and a second agent on the root is not
	// refused. "" when it is claimed.
	Unheld string
	// Unchecked says why the directories inside the root were not all looked
	// for another agent's root (claimInside): the agent goes on, and one on a
	// root inside this one might not be refused. "" when all were.
	Unchecked string
}

// Release gives the claim up (exiting does too).
func (l *RootLock) Release() {
	if l.release != nil {
		l.release()
	}
}

// claimant is the process holding a root's claim, as the kernel says it (the
// credentials it listened with).
type claimant struct{ pid, uid int }

// agent reports whether the claimant is an agent's that counts: root's, or this
// process's user's. Another user may take a root's claim first (any user may); that
// claim is not an agent's, and refusing for it let any local user keep the agent
// from starting (a review).
func (c claimant) agent() bool { return c.uid == 0 || c.uid == os.Geteuid() }

// AcquireRoot claims root, an agent's managed root, for this process, or refuses,
// with a *RootInUseError, a root another agent claims, one inside the root another
// agent claims, or one holding it. Each is looked for once the claim is taken, so
// that of two agents starting at once on roots one inside the other, the second to
// claim finds the first.
//
// Two agents on one root (of two meshes, or two nodes of one) each put back the
// other's files at every check, forever, running their hooks each time, while both
// meshes showed the node converged (a review). The claim is a name the kernel keeps
// for one process at a time, made of the root's device and inode (claimRoot): it
// goes with the process however it exits, holds nothing open in the root (a lock
// on the directory kept its file system from being unmounted), and its holder's
// user is the kernel's word, not a name a process can take. Where the kernel has
// no such names (not Linux), or in another network namespace, nothing is claimed
// or found.
func AcquireRoot(root string) (*RootLock, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("the managed root %s: %w", root, err)
	}
	release, holder, err := claimRoot(abs, fi)
	if err != nil {
		return nil, fmt.Errorf("claim the managed root %s: %w", root, err)
	}
	lock := &RootLock{release: release}
	if holder != nil {
		if holder.agent() {
			return nil, &RootInUseError{Root: root, PID: holder.pid}
		}
		who := fmt.Sprintf("a process of another user (uid %d, pid %d)", holder.uid, holder.pid)
		if holder.uid < 0 {
			who = "a process that does not answer"
		}
		lock.Unheld = who + " holds the managed root's claim: the agent runs without it, and a second agent on this root would not be refused"
	}
	if err := claimedAbove(root, abs); err != nil {
		lock.Release()
		return nil, err
	}
	// An agent started on a root above a running agent's went unrefused, and the
	// two put back each other's files for good (a docs walkthrough).
	inner, h, unchecked := claimInside(abs)
	if h != nil {
		lock.Release()
		return nil, &RootInUseError{Root: root, Inner: inner, PID: h.pid}
	}
	lock.Unchecked = unchecked
	return lock, nil
}

// RefuseInsideClaimed refuses, with a *RootInUseError, a root inside the root of
// another running agent, whether or not the root exists yet: asked before the agent
// makes a missing root, so that a refused run leaves no directory in the other
// agent's tree (it did, a docs walkthrough). AcquireRoot asks again.
func RefuseInsideClaimed(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return claimedAbove(root, abs)
}

// claimedAbove looks for an agent's claim on each directory above abs.
func claimedAbove(root, abs string) error {
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if di, err := os.Stat(dir); err == nil {
			if h := rootClaimant(di); h != nil && h.agent() {
				return &RootInUseError{Root: root, Outer: dir, PID: h.pid}
			}
		}
		if dir == filepath.Dir(dir) {
			return nil
		}
	}
}
