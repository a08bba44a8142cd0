//go:build unix

package state

import "syscall"

// noFollow makes opening the state file fail if its name is a symbolic link: the
// agent writes its own file, not one a link points at.
const noFollow = syscall.O_NOFOLLOW
