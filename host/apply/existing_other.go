//go:build !linux

package apply

// openDirFlag is 0 where the standard library has no O_DIRECTORY to offer.
const openDirFlag = 0

// readExistingAt, without openat(2) in the standard library, looks at the name
// and then checks the file it opened (see readExistingByName).
func (r *run) readExistingAt(d *dirHandle, p, name string, declared bool) (*saved, error) {
	return r.readExistingByName(d, p, name, declared)
}
