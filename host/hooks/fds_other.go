//go:build !linux

package hooks

// closeInherited does nothing where the process's descriptors cannot be listed:
// Go opens its own close-on-exec, and a hook inherits those the agent inherited.
func closeInherited() {}
