//go:build !linux

package apply

import "os"

// openDirFlag is 0 where the standard library has no O_DIRECTORY to offer.
const openDirFlag = 0

// readExistingAt, without openat(2) in the standard library, looks at the name
// and then checks the file it opened (see readExistingByName).
func (r *run) readExistingAt(d *dirHandle, p, name string, declared bool) (*saved, error) {
	return r.readExistingByName(d, p, name, declared)
}

// openDirIn opens the directory p by name from the managed root where there is
// no openat to open it from its parent without following a link.
func openDirIn(_ *os.File, _, p string, managed *os.Root) (*os.File, error) {
	return managed.OpenFile(p, os.O_RDONLY, 0)
}
