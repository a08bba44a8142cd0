package hooks

import (
	"errors"
	"strings"
	"testing"

	"mesh/host/jsonkeys"
)

// TestLoadReadsOneWayOnly: encoding/json alone reads a hooks file with a member
// twice (the last one winning: the command run would be one a reader of the file
// may have missed), a name in another case ("Run" for "run"), or bytes that are
// not UTF-8 (read as U+FFFD: a command other than the one written). Each is
// refused with ErrConfig (and jsonkeys.ErrDuplicate, ErrCase or ErrUTF8).
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
		// encoding/json would run "/bin/tr\ufffdue", which is not what the file says.
		{"a command that is not UTF-8", "{\"hooks\":[{\"name\":\"a\",\"paths\":[\"x\"],\"run\":[\"/bin/tr\xffue\"],\"timeout\":\"5s\"}]}",
			"not valid UTF-8 (at byte", jsonkeys.ErrUTF8},
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
