// Package writeerr keeps the first error of the writes to a writer: a command whose
// output went to a full disk or a closed file did not succeed, though its printers
// (fmt.Fprintf, a tabwriter's Flush) leave their errors unchecked. meshctl and
// meshhost write their standard output through it.
package writeerr

import (
	"io"
	"sync/atomic"
)

// Writer writes to W and keeps the first error a write returned.
type Writer struct {
	W   io.Writer
	err atomic.Pointer[error]
}

// Write writes p to W, keeping the error if it is the first.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.W.Write(p)
	if err != nil {
		w.err.CompareAndSwap(nil, &err)
	}
	return n, err
}

// Err is the first write error, or nil.
func (w *Writer) Err() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}
