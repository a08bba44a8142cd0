package join

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

// leakMarker fills every credential of the values the redaction test prints.
const leakMarker = "LEAKMARKER-7f3a"

// markerForms are the ways the marker shows where a printer reaches it: as
// itself (%v, %s, %q), as %x and %X print it, as JSON writes a []byte (base64) and
// as %v and %d print a []byte (decimal bytes).
func markerForms() []string {
	b := []byte(leakMarker)
	return []string{leakMarker, hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		base64.StdEncoding.EncodeToString(b), strings.Trim(fmt.Sprint(b), "[]")}
}

// renderings prints v, a pointer to it and a struct holding both with every verb,
// and logs them with slog's text and JSON handlers; with jsonToo (v's JSON is not
// a wire form, so it is redacted) it also marshals them to JSON.
func renderings(t *testing.T, v any, jsonToo bool) map[string]string {
	t.Helper()
	pv := reflect.New(reflect.TypeOf(v))
	pv.Elem().Set(reflect.ValueOf(v))
	p := pv.Interface()
	type holder struct{ V, P any }
	h := holder{v, p}
	out := map[string]string{}
	for _, verb := range []string{"%v", "%d", "%s", "%q", "%x", "%X", "%+v", "%#v"} {
		out[verb] = fmt.Sprintf(verb, v)
		out["pointer "+verb] = fmt.Sprintf(verb, p)
		out["held "+verb] = fmt.Sprintf(verb, h)
	}
	for name, mk := range map[string]func(io.Writer) slog.Handler{
		"slog text": func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, nil) },
		"slog json": func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, nil) },
	} {
		var b bytes.Buffer
		slog.New(mk(&b)).Info("m", "value", v, "pointer", p, slog.Any("any", v))
		out[name] = b.String()
		// slog's JSON handler encodes a struct holding v with encoding/json.
		if name == "slog text" || jsonToo {
			b.Reset()
			slog.New(mk(&b)).Info("m", "held", h)
			out[name+" held"] = b.String()
		}
	}
	if jsonToo {
		for name, x := range map[string]any{"json": v, "json pointer": p, "json held": h} {
			b, err := json.Marshal(x)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out[name] = string(b)
		}
	}
	return out
}

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
		{"pending", pending{Node: "cp-2", TokenHash: "ab12", NkeySeed: leakMarker, CurveSeed: leakMarker}, false, "cp-2"},
	} {
		for name, out := range renderings(t, c.v, c.jsonToo) {
			for _, form := range markerForms() {
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
