package hooks

import (
	"errors"
	"strings"
	"testing"

	"mesh/host/jsonkeys"
)

// TestLoadReadsOneWayOnly: encoding/json alone reads a hooks file with a member
// twice (the last one winning: the command run would be one a reader of the file
// may have missed) or a name in another case ("Run" for "run"). Both are refused
// with ErrConfig (and jsonkeys.ErrDuplicate or ErrCase), naming the member.
func TestLoadReadsOneWayOnly(t *testing.T) {
	for _, tc := range []struct {
		name, content, says string
		kind                error
	}{
		{"run twice", `{"hooks":[{"name":"a","paths":["x"],"run":["/bin/true"],"timeout":"5s","run":["/bin/sh","-c","id"]}]}`,
			`in "hooks[0]": member "run" appears twice`, jsonkeys.ErrDuplicate},
		{"hooks twice", `{"hooks":[],"hooks":[{"name":"a","paths":["x"],"run":["/bin/true"],"timeout":"5s"}]}`,
			`member "hooks" appears twice`, jsonkeys.ErrDuplicate},
		{"run in another case", `{"hooks":[{"name":"a","paths":["x"],"Run":["/bin/true"],"timeout":"5s"}]}`,
			`member "Run" is field "run"`, jsonkeys.ErrCase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(write(t, tc.content))
			if !errors.Is(err, ErrConfig) || !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want ErrConfig saying %q", err, tc.says)
			}
			if errors.Is(err, ErrTruncated) || errors.Is(err, ErrTooLarge) {
				t.Fatalf("%v: not cut short, not too large", err)
			}
		})
	}
}
