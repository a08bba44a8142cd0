//go:build unix

package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"mesh/host/atomicfile"
)

// ownGroup runs cmd in a new process group, and makes cancelling it signal the
// group: at the hook's own timeout (ctx's deadline) SIGKILL at once, as the hook
// has had its time; when the agent stops (ctx cancelled: systemctl stop or restart,
// a package upgrade) SIGTERM, so that a hook amid apt-get or a migration may stop
// cleanly. What has not exited killGrace later is killed (exec's WaitDelay, then
// killGroup). Before, a stop killed the hook outright.
func ownGroup(ctx context.Context, cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		sig := syscall.SIGTERM
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			sig = syscall.SIGKILL
		}
		return syscall.Kill(-cmd.Process.Pid, sig)
	}
}

// killGroup kills what is left of cmd's process group after it ended.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// recordGroup writes the hook's process group to c.groupFile: its id and its
// leader's start time, which tell it from a later process given the same id.
// Atomically (a new file renamed over the name): written in place, an agent killed
// between the truncate and the write left an empty record, and the next one could
// neither kill the hook still running nor keep from running it again beside it.
func (c Config) recordGroup(cmd *exec.Cmd) {
	if c.groupFile == "" {
		return
	}
	pid := cmd.Process.Pid
	start, err := startTime(pid)
	if err != nil {
		return
	}
	_ = atomicfile.WriteFile(c.groupFile, fmt.Appendf(nil, "%d %d %s\n", pid, start, bootID()), 0o600)
}

// bootID is this boot's id (Linux's random boot_id), "" where there is none: start
// times count from the boot, so a record of another boot says nothing of a process
// now.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// forgetGroup removes c.groupFile once the hook's group is gone.
func (c Config) forgetGroup() {
	if c.groupFile != "" {
		_ = os.Remove(c.groupFile)
	}
}

// KillLeftover kills the process group recorded at path (WithGroupFile) when its
// leader, the hook's first process, still runs: a hook an agent ran when it was
// killed. It reports whether it killed one, and removes the file. The leader is
// known by its pid (the group's id) and its start time in this boot: a record of
// another boot, or a process of another start time under the id, is left alone, and
// so is a group whose leader exited (what is left of it cannot be told from a group
// that took the id since: the agent may run as root, and kills nothing it is not
// sure of).
func KillLeftover(path string) (killed bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer os.Remove(path)
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return false, fmt.Errorf("%s: not a process group, a start time and a boot", path)
	}
	pgid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pgid <= 1 {
		return false, fmt.Errorf("%s: not a process group, a start time and a boot", path)
	}
	if f[2] != bootID() {
		return false, nil // recorded before a reboot: the hook went with it
	}
	if now, err := startTime(pgid); err != nil || now != start {
		return false, nil // the leader exited, or another process has the id
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// startTime is the start time of process pid, in clock ticks since boot (field 22
// of /proc/PID/stat).
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
