package identity

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

// TestSecretsNeverPrinted (audit of secrets, finding 4): Identity and Pending
// redacted their seed under %v, %s, %q, %x and %#v only: they cannot be
// fmt.Formatter (their Format field takes the name), and %d printed every field,
// the seed included. Their seed is a Secret now. Each type that holds a seed,
// printed with any verb, logged with slog or marshalled to JSON, itself or held
// in another struct, shows no seed. A bare Secret's JSON is the seed, as the
// files hold it, so it is not marshalled here.
func TestSecretsNeverPrinted(t *testing.T) {
	id := validIdentity(t)
	id.Seed = leakMarker
	p := validPending(t)
	p.Seed = leakMarker
	kp := KeyPair{seed: []byte(leakMarker), pub: "UPUBLIC", priv: []byte(leakMarker)}
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a file's
		public  string // shown all the same
	}{
		{"Identity", id, true, "web-1"},
		{"Pending", p, true, "web-1"},
		{"KeyPair", kp, true, "UPUBLIC"},
		{"Secret", Secret(leakMarker), false, "redacted"},
	} {
		for name, out := range renderings(t, c.v, c.jsonToo) {
			for _, form := range markerForms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a seed (%q): %s", c.name, name, form, out)
				}
			}
			// %x and %X print an Identity's and a Pending's other fields in hex.
			if !strings.Contains(out, c.public) && !strings.Contains(strings.ToLower(out), hex.EncodeToString([]byte(c.public))) {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// The files still hold the seed.
	for _, b := range [][]byte{fileBytes(t, id), must(json.Marshal(filePending(p)))} {
		if !bytes.Contains(b, []byte(`"nkey_seed": "`+leakMarker+`"`)) && !bytes.Contains(b, []byte(`"nkey_seed":"`+leakMarker+`"`)) {
			t.Errorf("the file form lost its seed: %s", b)
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
