package jsonkeys

// The implementation of Check before it read bytes itself: encoding/json's
// Decoder.Token, one token at a time. It is the oracle the differential tests and
// FuzzCheckMatchesTheDecoder hold Check to.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// oracleCheck is Check as it was, with the same rules.
func oracleCheck(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w (at byte %d)", ErrUTF8, firstInvalid(data))
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	c := oracleChecker{dec: dec}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return c.value(tok, t, "")
}

type oracleChecker struct {
	dec   *json.Decoder
	depth int
}

// value checks the value that starts with tok, to be decoded into t (nil: any).
func (c *oracleChecker) value(tok json.Token, t reflect.Type, where string) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar holds no member names
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(unmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)) {
		t = nil // its own decoding: judged as any JSON
	}
	switch d {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; c.dec.More(); i++ {
			tok, err := c.dec.Token()
			if err != nil {
				return err
			}
			if err := c.value(tok, elem, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		_, err := c.dec.Token() // ']'
		return err
	case '{':
		return c.object(t, where)
	}
	return fmt.Errorf("unexpected %v", d)
}

func (c *oracleChecker) object(t reflect.Type, where string) error {
	var fields map[string]reflect.Type // a struct's, by exact name
	var folded map[string]string       // a struct's names, by their folded form
	isMap := false
	var elem reflect.Type // a map's values
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields, folded = structFields(t)
		case reflect.Map:
			isMap, elem = true, t.Elem()
		}
	}
	seen := map[string]bool{}
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return fmt.Errorf("unexpected %v where a member name belongs", tok)
		}
		if seen[key] {
			return &KeyError{Where: where, Key: key, Kind: ErrDuplicate}
		}
		seen[key] = true
		var next reflect.Type
		switch {
		case fields != nil:
			ft, exact := fields[key]
			if !exact {
				if name, ok := folded[fold(key)]; ok {
					return &KeyError{Where: where, Key: key, Field: name, Kind: ErrCase}
				}
			}
			next = ft // nil for a member no field takes: the decoder's to refuse or skip
		case isMap:
			next = elem
		}
		tok, err = c.dec.Token()
		if err != nil {
			return err
		}
		if err := c.value(tok, next, join(where, key)); err != nil {
			return err
		}
	}
	_, err := c.dec.Token() // '}'
	return err
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// targets are the types the differential tests check documents against.
var targets = []struct {
	name string
	v    func() any
}{
	{"struct", func() any { return &doc{} }},
	{"any", func() any { return nil }},
	{"slice of structs", func() any { return &[]inner{} }},
	{"map of structs", func() any { return &map[string]doc{} }},
}

// sameVerdict fails t unless Check and the oracle agree on data: a valid
// document gets the same answer from both (nothing, or the same refusal at the
// same place), and a document that is not JSON is refused by Check (the
// oracle read only the first value and let trailing bytes pass).
func sameVerdict(t *testing.T, data []byte) {
	t.Helper()
	for _, tg := range targets {
		got, want := Check(data, tg.v()), oracleCheck(data, tg.v())
		if !json.Valid(data) {
			if got == nil {
				t.Fatalf("%s: %q is not JSON and was accepted", tg.name, data)
			}
			continue
		}
		if (got == nil) != (want == nil) {
			t.Fatalf("%s: %q: Check says %v, the decoder's tokens %v", tg.name, data, got, want)
		}
		if got == nil {
			continue
		}
		var gk, wk *KeyError
		if errors.As(got, &gk) != errors.As(want, &wk) {
			t.Fatalf("%s: %q: Check says %v, the decoder's tokens %v", tg.name, data, got, want)
		}
		if gk != nil && *gk != *wk {
			t.Fatalf("%s: %q: Check says %#v, the decoder's tokens %#v", tg.name, data, gk, wk)
		}
		if gk == nil && got.Error() != want.Error() {
			t.Fatalf("%s: %q: Check says %v, the decoder's tokens %v", tg.name, data, got, want)
		}
	}
}

var differentialCases = []string{
	`{"format":1,"version":2,"seed":"s","files":[{"path":"a"}],"extra":"e","Plain":"p"}`,
	`{"Version":1,"version":2}`, `{"labels":{"Env":"a","env":"b"}}`, `{"raw":{"a":1,"A":2}}`,
	`{"files":[{"path":"a","Path":"b"}]}`, `{"nested":{"x":{"mode":"1"}}}`, `{"any":[{"k":{}}]}`,
	`{"seed":"a","\u0073eed":"b"}`, `{"\ud800":1,"\udc00":2}`, `{"a\"b":1,"a\u0022b":2}`,
	`{"":1,"":2}`, `{"x":{"":{"":[{"y":1,"y":2}]}}}`, `[{"path":"a"},{"path":"b","path":"c"}]`,
	`{"a":{"b":[1,2,{"c":{"d":1,"D":2,"d":3}}]}}`, `{"files":[[],{},null,1,"s",{"PATH":1}]}`,
	` {"format" : 1 , "version" : 2 } `, `{"raw":-0.5e+10,"any":[true,false,null,-1,0,1.5E-3]}`,
	`{"one":{"path":"x","mode":"y","Mode":"z"}}`, `{"labels":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9","j":"10","k":"11","l":"12","m":"13","n":"14","o":"15","p":"16","q":"17","a":"dup"}}`,
	`{"ſeed":"x"}`, `{"\u212aey":1}`, `{"PLAIN":1}`, `{"Ignored":1,"ignored":2}`,
	`{"a":1} x`, `{"a":1}}`, `{"a":1,}`, `{"a" 1}`, `[1,]`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	`{"a":tru}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", `"\u00e9"`, `1`, `null`, ``, ` `,
}

// TestCheckMatchesTheDecoder: Check, reading bytes, refuses what the
// token-by-token reader it replaced refuses, at the same member, and nothing else.
func TestCheckMatchesTheDecoder(t *testing.T) {
	for _, s := range differentialCases {
		sameVerdict(t, []byte(s))
	}
	deep := strings.Repeat(`{"a":[`, maxDepth/2) + "1" + strings.Repeat("]}", maxDepth/2)
	sameVerdict(t, []byte(deep))
	deeper := strings.Repeat(`{"a":[`, maxDepth/2+1) + "1" + strings.Repeat("]}", maxDepth/2+1)
	sameVerdict(t, []byte(deeper))
}

// FuzzCheckMatchesTheDecoder holds Check to the oracle on any input.
func FuzzCheckMatchesTheDecoder(f *testing.F) {
	for _, s := range differentialCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameVerdict(t, data)
	})
}

// progressLike is a document as `declare --wait` sends for a fleet: n nodes'
// assignments.
func progressLike(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"targets":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"node":"h-%05d","version":%d}`, i, 1000+i)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

type assignment struct {
	Node    string `json:"node"`
	Version uint64 `json:"version"`
}

type progressRequest struct {
	Targets []assignment `json:"targets"`
}

// BenchmarkCheck: a request about 5,000 nodes, checked by Check and, as the
// baseline of the same run, by the token-by-token reader it replaced.
func BenchmarkCheck(b *testing.B) {
	data := progressLike(5000)
	for _, bc := range []struct {
		name  string
		check func([]byte, any) error
	}{{"bytes", Check}, {"tokens", oracleCheck}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := bc.check(data, &progressRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
