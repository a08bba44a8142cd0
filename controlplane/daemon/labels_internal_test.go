package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"mesh/controlplane/api"
)

// TestLabelsAdmitNoControlCharacters (security.md: "node ids, labels and declared
// paths admit no control characters"): a label key or value with a control
// character, an escape sequence, a format character that reorders text, a space,
// a quote or anything past 63 bytes, and a 65th label, are refused as bad_request
// before anything is committed, by token.create and label alike (both validate
// with validateLabels); plain labels pass.
func TestLabelsAdmitNoControlCharacters(t *testing.T) {
	for _, ok := range []map[string]string{
		nil,
		{"tier": "web"},
		{"k8s.io/zone": "eu-west-1a", "Team_A": ""},
	} {
		if err := validateLabels(ok); err != nil {
			t.Errorf("labels %q refused: %v", ok, err)
		}
	}
	bad := []string{"a\nb", "a\rb", "\x1b[2J", "\x1b]0;pwned\x07", "a\tb", "a\x00b", "a\x7fb", "a\u0085b",
		"\u202egnp", "a\u200bb", "a b", `a"b`, "a=b", "a,b", "é", strings.Repeat("a", 64)}
	for _, s := range bad {
		for _, l := range []map[string]string{{s: "v"}, {"k": s}} {
			err := validateLabels(l)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
				t.Errorf("labels %q: %v, want bad_request", l, err)
			}
		}
	}
	if err := validateLabels(map[string]string{"": "v"}); err == nil {
		t.Error("an empty label key accepted")
	}
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	if err := validateLabels(many); err == nil {
		t.Error("65 labels accepted")
	}
}
