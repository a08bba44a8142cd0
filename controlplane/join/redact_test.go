package join

import (
	"encoding/json"
	"mesh/host/redact/redacttest"
	"strings"
	"testing"
)

// TestSecretsNeverPrinted (audit of secrets, finding 4): a pending join printed
// with any verb or logged with slog, itself or held in another struct, shows
// neither of its seeds. Its JSON is the pending file's layout and keeps them, so
// JSON, and slog's JSON handler over a struct holding it, are not checked.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a wire form
		public  string // shown all the same
	}{
		{"pending", pending{Node: "cp-2", TokenHash: "ab12", NkeySeed: redacttest.Marker, CurveSeed: redacttest.Marker}, false, "cp-2"},
	} {
		for name, out := range redacttest.Renderings(t, c.v, c.jsonToo) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a secret (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, c.public) {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// The pending file's layout is unchanged: the seeds are there.
	p := pending{Node: "cp-2", TokenHash: "ab12", NkeySeed: "SUSEED", CurveSeed: "SXSEED"}
	b, err := json.Marshal(p)
	if want := `{"node":"cp-2","token_hash":"ab12","nkey_seed":"SUSEED","curve_seed":"SXSEED"}`; err != nil || string(b) != want {
		t.Fatalf("the pending file's JSON = %s, want %s (%v)", b, want, err)
	}
}
