//go:build !unix

package dirlock

import "os"

const noFollow = 0

// nonBlock: no flag where a lock file cannot be a named pipe one waits on.
const nonBlock = 0

// tryLock has no flock to take here: the mesh runs on Unix, and elsewhere
// the lock file only records its last holder.
func tryLock(*os.File) (bool, error) { return true, nil }

// trySharedLock has no flock to try here (see tryLock): nothing holds the lock.
func trySharedLock(*os.File) (bool, error) { return true, nil }
