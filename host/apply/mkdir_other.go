//go:build !linux

package apply

// settleDir gives the directory just made at p the documented mode 0755. Without
// openat(2) in the standard library it changes the mode by name (see the Linux
// version for what that leaves open to a local user who may write in the root).
func (r *run) settleDir(parent *dirHandle, p, name string) error {
	return r.root.Chmod(p, 0o755)
}
