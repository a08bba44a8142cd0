// Package redacttest is what the redaction tests of the types that hold secrets
// share: a marker to fill their credentials with, the forms it takes in print, and
// every way a value is printed or logged by mistake.
package redacttest

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

// Marker fills every credential of the values a redaction test prints.
const Marker = "LEAKMARKER-7f3a"

// Forms are the ways the marker shows where a printer reaches it: as
// itself (%v, %s, %q), as %x and %X print it, as JSON writes a []byte (base64) and
// as %v and %d print a []byte (decimal bytes).
func Forms() []string {
	b := []byte(Marker)
	return []string{Marker, hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		base64.StdEncoding.EncodeToString(b), strings.Trim(fmt.Sprint(b), "[]")}
}

// Renderings prints v, a pointer to it and a struct holding both with every verb,
// and logs them with slog's text and JSON handlers; with jsonToo (v's JSON is not
// a wire form, so it is redacted) it also marshals them to JSON.
func Renderings(t testing.TB, v any, jsonToo bool) map[string]string {
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
