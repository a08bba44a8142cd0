//go:build !linux

package main

import (
	"errors"
	"os"
)

// hideInput cannot turn a terminal's echo off outside Linux here: the token is read
// as typed, shown.
func hideInput(*os.File) (func(), error) {
	return nil, errors.New("turning a terminal's echo off is not supported on this system")
}
