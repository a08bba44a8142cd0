package main

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"mesh/controlplane/datadir"
)

// TestDataDirFileErrorsExit7: a file of the data directory that is missing, cut
// short or corrupt exits 7 (meshctl.service does not restart it: running again will
// not mend it), as docs/operations.md says; a missing one exited 1.
func TestDataDirFileErrorsExit7(t *testing.T) {
	for _, kind := range []error{datadir.ErrMissing, datadir.ErrTruncated, datadir.ErrCorrupt} {
		err := fmt.Errorf("start: %w", &datadir.FileError{Path: "/d/tls.pem", Err: fmt.Errorf("%w: detail", kind)})
		if code := exitCode(io.Discard, "meshctl serve", err); code != exitDataDir {
			t.Errorf("%v: exit %d, want %d", kind, code, exitDataDir)
		}
	}
	if code := exitCode(io.Discard, "meshctl serve", errors.New("something else")); code != exitFailure {
		t.Errorf("another error: exit %d, want %d", code, exitFailure)
	}
}
