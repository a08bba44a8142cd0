//go:build unix

package state

import (
	"os"
	"syscall"
)

// stampOf is what tells whether a state file is still as the Store left it: still
// the file of its name, and not written since (its change time and size). A file
// removed, replaced or edited by hand while the agent runs is read again, or made
// anew, rather than written where no one will read it or under a sequence that a
// restored copy's outranks.
func stampOf(f *os.File) (stamp, bool) {
	fi, err := f.Stat()
	if err != nil {
		return stamp{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{}, false
	}
	sec, nsec := st.Ctim.Unix()
	return stamp{linked: st.Nlink > 0, ctimeSec: sec, ctimeNsec: nsec, size: fi.Size()}, st.Nlink > 0
}
