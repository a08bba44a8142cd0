//go:build linux

package dirlock

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// flockHolders returns the processes /proc/locks names as holding a flock(2) lock on
// the file f is open on (not those waiting for one).
func flockHolders(f *os.File) []int {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil
	}
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev)), st.Ino)
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return nil
	}
	defer locks.Close()
	var pids []int
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 fe:00:10207318 0 EOF"; a waiter's line
		// has "->" after the number.
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isAgent reports whether process pid is an agent whose lock on a managed root
// counts: this process, or a process called meshhost run by root or by this
// process's user. A lock any other user takes (any user who may read a directory
// may lock it) is not an agent's: counted, it kept the agent from starting (a
// review: `flock -s /srv/mesh` as nobody, or on /).
func isAgent(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "meshhost" {
		return false
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			ids := strings.Fields(rest)
			if len(ids) < 2 {
				return false
			}
			euid, err := strconv.Atoi(ids[1])
			return err == nil && (euid == 0 || euid == os.Geteuid())
		}
	}
	return false
}
