//go:build !unix

package hooks

import (
	"context"
	"os/exec"
)

// ownGroup leaves cmd as it is: without process groups, the timeout kills the hook
// itself and WaitDelay bounds the wait for its output.
func ownGroup(context.Context, *exec.Cmd) {}

func killGroup(*exec.Cmd) {}

func (Config) recordGroup(*exec.Cmd) {}

func (Config) forgetGroup() {}

// KillLeftover finds nothing where there are no process groups.
func KillLeftover(string) (bool, error) { return false, nil }
