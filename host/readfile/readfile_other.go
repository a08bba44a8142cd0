//go:build !unix

package readfile

import (
	"os"
	"time"
)

const openFlags = 0

// OffersInput reports whether f (a command's stdin) offers something to read; here,
// where no pipe is polled, only a regular file that is not empty does.
func OffersInput(f *os.File, _ time.Duration) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode().IsRegular() && fi.Size() > 0
}
