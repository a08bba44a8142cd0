package main

import (
	"io"
	"testing"

	"mesh/host/enrol"
	"mesh/host/wire"
)

// TestARefusedLoginExits7: a broker's refusal of the enrolment's login may pass
// within a minute (a token or an address over its budget, no room for another
// host), so it exits 7, "retrying may help", as unavailable and internal do; the
// mesh's own refusals for good still exit 3. Before, it exited 3 as token_unknown.
func TestARefusedLoginExits7(t *testing.T) {
	for code, want := range map[string]int{
		enrol.CodeLoginRefused:  exitUnreachable,
		wire.CodeUnavailable:    exitUnreachable,
		wire.CodeTokenUnknown:   exitToken,
		wire.CodeTokenUsed:      exitToken,
		wire.CodeTokenCancelled: exitToken,
	} {
		if got := exitCode(io.Discard, "enrol", &enrol.RefusedError{Code: code, Message: "m"}); got != want {
			t.Errorf("%s: exit %d, want %d", code, got, want)
		}
	}
}
