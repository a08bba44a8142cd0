package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
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
	// A certificate out of its time: restarting will not mend it either.
	expired := &datadir.CertificateTimeError{Path: "/d/tls.pem", NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1, 0), Now: time.Unix(2, 0)}
	if code := exitCode(io.Discard, "meshctl serve", fmt.Errorf("open: %w", errors.Join(expired))); code != exitDataDir {
		t.Errorf("an expired certificate: exit %d, want %d", code, exitDataDir)
	}
	if code := exitCode(io.Discard, "meshctl serve", errors.New("something else")); code != exitFailure {
		t.Errorf("another error: exit %d, want %d", code, exitFailure)
	}
}

// TestARefusalNamesItsCode: a refusal of the control plane is printed with its code
// (token_pending, node_exists …), which the docs' tables and scripts know it by; it
// was the message alone. A message that names its code already is not given it twice.
func TestARefusalNamesItsCode(t *testing.T) {
	var out strings.Builder
	err := fmt.Errorf("mint: %w", &api.Error{Code: api.CodeTokenPending, Message: "a token for this node is pending: web-1 has token 0f3a"})
	if code := exitCode(&out, "meshctl token", err); code != exitRefused || out.String() != "meshctl token: mint: a token for this node is pending: web-1 has token 0f3a (token_pending)\n" {
		t.Fatalf("exit %d, printed %q", code, out.String())
	}
	out.Reset()
	// internal is the control plane failing, not refusing: exit 1, not 4.
	if code := exitCode(&out, "meshctl revoke", &api.Error{Code: api.CodeInternal, Message: "raft: leadership lost"}); code != exitFailure || out.String() != "meshctl revoke: raft: leadership lost (internal)\n" {
		t.Fatalf("internal: exit %d, printed %q", code, out.String())
	}
	out.Reset()
	exitCode(&out, "meshctl token", &api.Error{Code: api.CodeNotFound, Message: "not_found: web-9"})
	if strings.Count(out.String(), "not_found") != 1 {
		t.Fatalf("printed %q: the code twice", out.String())
	}
}
