package dirlock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// RootInUseError says that a managed root is another agent's: the same directory,
// or one inside the root of another (Outer). It matches ErrInUse.
type RootInUseError struct {
	Root string
	// Outer is the other agent's root that holds Root; "" when it is Root itself.
	Outer string
	// PID is the other agent's process.
	PID int
}

func (e *RootInUseError) Error() string {
	if e.Outer != "" {
		return fmt.Sprintf("managed root %s is inside %s, the managed root of a running agent (pid %d): two agents on one tree put back each other's files for good, "+
			"each running its hooks every time; give each agent a root of its own, apart from the other's", e.Root, e.Outer, e.PID)
	}
	return fmt.Sprintf("managed root %s is in use by another running agent (pid %d): two agents on one root put back each other's files for good, "+
		"each running its hooks every time; give each agent a root of its own", e.Root, e.PID)
}

// Is matches ErrInUse.
func (e *RootInUseError) Is(target error) bool { return target == ErrInUse }

// RootLock is an agent's hold on its managed root.
type RootLock struct {
	f *os.File
	// Unheld says why the root is not held, when a process that is no agent
	// holds a lock on it: the agent goes on, and a second agent on the root is not
	// refused. "" when it is held.
	Unheld string
}

// Release gives the root up (exiting does too).
func (l *RootLock) Release() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}

// AcquireRoot takes root, an agent's managed root, for this process: an exclusive
// flock(2) on the directory itself, so that nothing is written into the root, and
// the kernel gives it up however the agent exits. It refuses, with a
// *RootInUseError, a root another agent holds, or one inside the root another agent
// holds (each directory above root is tried shared for the time of one call). A root
// that holds another agent's root is refused by that agent when it starts next.
//
// Two agents on one root (of two meshes, or two nodes of one) each put back the
// other's files at every check, forever, running their hooks each time, while both
// meshes showed the node converged (a review). Any user who may read a directory
// may lock it, so a lock is an agent's only when its holder is one (isAgent, by
// /proc/locks; where that cannot be told, no holder is): another's lock leaves the
// root unheld (RootLock.Unheld), and the agent runs.
func AcquireRoot(root string) (*RootLock, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("open the managed root to hold it: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("hold the managed root %s: %w", root, err)
	}
	lock := &RootLock{f: f}
	if !held {
		holders := flockHolders(f)
		if pid := agentAmong(holders); pid != 0 {
			f.Close()
			return nil, &RootInUseError{Root: root, PID: pid}
		}
		f.Close()
		lock = &RootLock{Unheld: fmt.Sprintf("a process that is no agent holds a lock on the managed root (%s): the agent runs without holding it, and a second agent on this root would not be refused", pidList(holders))}
	}
	for dir := filepath.Dir(abs); ; dir = filepath.Dir(dir) {
		if pid := agentHolding(dir); pid != 0 {
			lock.Release()
			return nil, &RootInUseError{Root: root, Outer: dir, PID: pid}
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return lock, nil
}

// agentAmong returns the first of pids that is an agent's (isAgent), 0 if none.
func agentAmong(pids []int) int {
	for _, pid := range pids {
		if isAgent(pid) {
			return pid
		}
	}
	return 0
}

// pidList names pids for a message.
func pidList(pids []int) string {
	if len(pids) == 0 {
		return "its process unknown"
	}
	s := make([]string, len(pids))
	for i, pid := range pids {
		s[i] = fmt.Sprint(pid)
	}
	return "pid " + strings.Join(s, ", ")
}

// agentHolding returns the agent (isAgent) that holds dir's exclusive flock, 0 if
// none does. Anything that keeps it from being tried (a directory this user cannot
// open) says none.
func agentHolding(dir string) int {
	d, err := os.Open(dir)
	if err != nil {
		return 0
	}
	defer d.Close()
	if free, err := trySharedLock(d); free || err != nil {
		return 0
	}
	return agentAmong(flockHolders(d))
}
