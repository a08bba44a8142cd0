//go:build !linux

package terminal

import (
	"errors"
	"os"
	"time"
)

var errUnsupported = errors.New("turning a terminal's echo off is not supported on this system")

// HideEcho cannot turn a terminal's echo off outside Linux here: a paste is read
// as typed, shown.
func HideEcho(*os.File) (func(), error) { return nil, errUnsupported }

// pasteRest cannot read the rest of a paste outside Linux here: the line read is all.
func pasteRest(*os.File, time.Duration, int) (string, error) { return "", errUnsupported }

// IsTerminal reports whether f is a character device, as a terminal is (and
// /dev/null).
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Echoing is not known outside Linux here.
func Echoing(*os.File) (bool, error) { return true, errUnsupported }
