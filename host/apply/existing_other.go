//go:build !linux

package apply

// readExistingAt, without openat(2) in the standard library, looks at the name
// and then checks the file it opened (see readExistingByName).
func (r *run) readExistingAt(d *dirHandle, p, name string, declared bool) (*saved, error) {
	root, err := d.writeRoot()
	if err != nil {
		return nil, inspectError(p, err)
	}
	return r.readExistingByName(root, p, name, declared)
}
