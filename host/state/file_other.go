//go:build !linux

package state

import (
	"os"

	"mesh/host/atomicfile"
)

// storeFile is the state file open for a Save.
type storeFile struct{ f *os.File }

// openStoreFile opens the state file at path to read and write it, never through a
// symbolic link at its name where the system can tell.
func openStoreFile(path string) (*storeFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|noFollow|atomicfile.NoPoll, 0)
	if err != nil {
		return nil, err
	}
	return &storeFile{f}, nil
}

// stamp reads the file's stamp.
func (f *storeFile) stamp() (stamp, bool) {
	fi, err := f.f.Stat()
	if err != nil {
		return stamp{}, false
	}
	return stampOfInfo(fi)
}

func (f *storeFile) readAt(b []byte, off int64) (int, error) { return f.f.ReadAt(b, off) }

func (f *storeFile) writeAt(b []byte, off int64) error {
	_, err := f.f.WriteAt(b, off)
	return err
}

// datasync flushes the file (fsync: there is no fdatasync to spare the inode's
// timestamps everywhere).
func (f *storeFile) datasync() error { return f.f.Sync() }

func (f *storeFile) close() error { return f.f.Close() }
