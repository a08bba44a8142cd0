//go:build !unix

package datadir

// CheckWritable is a no-op where access(2) is not there to ask: the real run says
// what it finds when it writes.
func (d Dir) CheckWritable() error { return nil }
