package seal

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

// TestSecretsNeverPrinted (audit of secrets, finding 4): a ControlIdentity
// printed with any verb or logged with slog, itself or held in another struct,
// shows neither its TLS key nor its operator credentials. Its JSON is what
// Identity seals and keeps them, so JSON, and slog's JSON handler over a struct
// holding it, are not checked.
func TestSecretsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       any
		jsonToo bool   // its JSON is not a wire form
		public  string // shown all the same
	}{
		{"ControlIdentity", ControlIdentity{CertPEM: []byte("-----BEGIN CERTIFICATE-----\n"), KeyPEM: []byte(leakMarker), Creds: []byte(leakMarker)}, false, "CertPEM:(28 bytes)"},
	} {
		for name, out := range renderings(t, c.v, c.jsonToo) {
			for _, form := range markerForms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a secret (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, c.public) && !strings.HasPrefix(name, "slog") {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
	// What Identity seals is unchanged: the secrets are there.
	type plain ControlIdentity
	id := ControlIdentity{CertPEM: []byte("cert"), KeyPEM: []byte(leakMarker), Creds: []byte("creds")}
	got, err1 := json.Marshal(id)
	want, err2 := json.Marshal(plain(id))
	if err1 != nil || err2 != nil || !bytes.Equal(got, want) {
		t.Fatalf("the identity's JSON changed: %s, want %s", got, want)
	}
	var secret [32]byte
	secret[0] = 1
	blob, err := Identity(secret, "m", "n", id)
	if err != nil {
		t.Fatal(err)
	}
	back, err := OpenIdentity(secret, "m", "n", blob)
	if err != nil || string(back.KeyPEM) != leakMarker {
		t.Fatalf("the sealed identity lost its key: %v", err)
	}
}
