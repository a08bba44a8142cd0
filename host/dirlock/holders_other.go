//go:build !linux

package dirlock

import "os"

// flockHolders cannot name the holders of a lock here: none is known, and a root
// held by another process is taken as not an agent's (AcquireRoot goes on).
func flockHolders(*os.File) []int { return nil }

// isAgent: no process is known to be an agent here.
func isAgent(int) bool { return false }
