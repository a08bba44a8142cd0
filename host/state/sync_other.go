//go:build !linux

package state

import "os"

func datasync(f *os.File) error { return f.Sync() }
