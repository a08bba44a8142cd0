package jsonkeys

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"`
}

type Embedded struct {
	Extra string `json:"extra"`
}

type doc struct {
	Embedded
	Format  int               `json:"format"`
	Version uint64            `json:"version"`
	Seed    string            `json:"seed"`
	Files   []inner           `json:"files"`
	One     *inner            `json:"one,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Nested  map[string]inner  `json:"nested,omitempty"`
	Raw     json.RawMessage   `json:"raw,omitempty"`
	Any     any               `json:"any,omitempty"`
	At      time.Time         `json:"at"`
	Plain   string            // no tag: its Go name
	skipped string            //nolint:unused // unexported: never decoded
	Ignored string            `json:"-"`
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		kind  error // nil: accepted
		where string
	}{
		{"plain", `{"format":1,"version":2,"seed":"s","files":[{"path":"a"}],"extra":"e","Plain":"p"}`, nil, ""},
		{"unknown member", `{"format":1,"whatever":{"a":1,"B":2}}`, nil, ""},
		{"map keys differing in case", `{"labels":{"Env":"a","env":"b"}}`, nil, ""},
		{"the same name in two objects", `{"files":[{"path":"a"},{"path":"b"}],"one":{"path":"c"}}`, nil, ""},
		{"empty objects", `{"labels":{},"files":[],"one":{}}`, nil, ""},

		{"duplicate", `{"version":1,"version":2}`, ErrDuplicate, ""},
		{"case variant", `{"Version":1}`, ErrCase, ""},
		{"case variant and exact", `{"Version":1,"version":2}`, ErrCase, ""},
		{"exact and case variant", `{"version":2,"VERSION":1}`, ErrCase, ""},
		{"Kelvin sign", `{"seed":"a","\u212aey":1,"format":1,"labels":{}}`, nil, ""},
		{"long s folds to seed", `{"ſeed":"x"}`, ErrCase, ""},
		{"escaped duplicate", `{"seed":"a","\u0073eed":"b"}`, ErrDuplicate, ""},
		{"embedded field case", `{"Extra":"e"}`, ErrCase, ""},
		{"untagged field case", `{"plain":"p"}`, ErrCase, ""},
		{"duplicate in a slice element", `{"files":[{"path":"a"},{"path":"a","path":"b"}]}`, ErrDuplicate, "files[1]"},
		{"case in a slice element", `{"files":[{"PATH":"a"}]}`, ErrCase, "files[0]"},
		{"case in a pointer", `{"one":{"Path":"a"}}`, ErrCase, "one"},
		{"duplicate map key", `{"labels":{"env":"a","env":"b"}}`, ErrDuplicate, "labels"},
		{"case in a map's value", `{"nested":{"x":{"Path":"a"}}}`, ErrCase, "nested.x"},
		{"duplicate in raw", `{"raw":{"a":1,"a":2}}`, ErrDuplicate, "raw"},
		{"case-folded names in raw", `{"raw":{"payload":1,"Payload":2}}`, nil, ""},
		{"deep in raw", `{"raw":[[{"x":{"k":1,"k":1}}]]}`, ErrDuplicate, "raw[0][0].x"},
		{"duplicate in any", `{"any":{"a":1,"a":2}}`, ErrDuplicate, "any"},
		{"duplicate in an unknown member", `{"zzz":{"a":1,"a":2}}`, ErrDuplicate, "zzz"},
		{"ignored field named", `{"Ignored":"x","ignored":"y"}`, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d doc
			if err := json.Unmarshal([]byte(tc.in), &d); err != nil {
				t.Fatalf("the decoder refuses the input itself: %v", err)
			}
			err := Check([]byte(tc.in), &d)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ke *KeyError
			if !errors.Is(err, tc.kind) || !errors.As(err, &ke) || ke.Where != tc.where {
				t.Fatalf("got %v (%#v), want %v in %q", err, ke, tc.kind, tc.where)
			}
		})
	}
}

// The values are never quoted: a seed in a refused identity file stays out of
// the message.
func TestCheckQuotesNoValue(t *testing.T) {
	in := `{"seed":"SUAOWNSECRET","seed":"SUAOTHERSECRET"}`
	err := Check([]byte(in), &doc{})
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), `"seed" appears twice`) {
		t.Fatalf("got %v", err)
	}
	err = Check([]byte(`{"Seed":"SUAOWNSECRET"}`), &doc{})
	if err == nil || strings.Contains(err.Error(), "SECRET") || !strings.Contains(err.Error(), `write it "seed"`) {
		t.Fatalf("got %v", err)
	}
}

// Nesting is bounded as the decoder bounds it, and deep input does not exhaust
// the stack.
func TestCheckDeep(t *testing.T) {
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	if err := Check([]byte(`{"raw":`+deep+`}`), &doc{}); err == nil || !strings.Contains(err.Error(), "deeper") {
		t.Fatalf("20000 levels: %v", err)
	}
	ok := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	if err := Check([]byte(`{"raw":`+ok+`}`), &doc{}); err != nil {
		t.Fatalf("1000 levels: %v", err)
	}
}

// Bytes that are not UTF-8, which encoding/json reads as U+FFFD, are refused
// wherever they are, with the offset of the first.
func TestCheckUTF8(t *testing.T) {
	for _, in := range []string{"{\"seed\":\"a\xffb\"}", "{\"labels\":{\"\xc3\":\"x\"}}", "{\"zzz\":\"\xed\xa0\x80\"}"} {
		var d doc
		if err := json.Unmarshal([]byte(in), &d); err != nil {
			t.Fatalf("%q: the decoder refuses it itself: %v", in, err)
		}
		if err := Check([]byte(in), &d); !errors.Is(err, ErrUTF8) || !strings.Contains(err.Error(), "at byte") {
			t.Errorf("%q: %v, want ErrUTF8", in, err)
		}
	}
	if err := Check([]byte(`{"seed":"é☃𝄞"}`), &doc{}); err != nil {
		t.Fatalf("valid UTF-8 refused: %v", err)
	}
}

func TestCheckInvalid(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":`, `{"a" 1}`, `[1,`} {
		if err := Check([]byte(in), &doc{}); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
}

// FuzzCheck: Check never panics; what it accepts holds no object with two members
// of one name (found by a plain scan that knows nothing of types), and no member
// at the top that the decoder would take for a field of another spelling.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"format":1,"version":2,"seed":"s","files":[{"path":"a"}],"extra":"e","Plain":"p"}`,
		`{"Version":1,"version":2}`, `{"labels":{"Env":"a","env":"b"}}`, `{"raw":{"a":1,"A":2}}`,
		`{"files":[{"path":"a","Path":"b"}]}`, `{"nested":{"x":{"mode":"1"}}}`, `{"any":[{"k":{}}]}`,
	} {
		f.Add([]byte(s))
	}
	fieldNames := []string{"extra", "format", "version", "seed", "files", "one", "labels", "nested", "raw", "any", "at", "Plain"}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d doc
		if json.Unmarshal(data, &d) != nil {
			_ = Check(data, &d) // must not panic either
			return
		}
		if Check(data, &d) != nil {
			return
		}
		if hasDuplicate(t, data) {
			t.Fatalf("accepted with two members of one name: %q", data)
		}
		var top map[string]json.RawMessage
		if json.Unmarshal(data, &top) == nil {
			for k := range top {
				for _, name := range fieldNames {
					if k != name && bytes.EqualFold([]byte(k), []byte(name)) {
						t.Fatalf("accepted member %q for field %q: %q", k, name, data)
					}
				}
			}
		}
	})
}

// hasDuplicate reports whether any object of data has two members of one name.
func hasDuplicate(t *testing.T, data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		obj   bool
		keys  map[string]bool
		isKey bool // the next string in this object is a member name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.isKey {
			if k, ok := tok.(string); ok {
				if top.keys[k] {
					return true
				}
				top.keys[k] = true
				top.isKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.obj {
				top.isKey = true
			}
			stack = append(stack, &frame{obj: true, keys: map[string]bool{}, isKey: true})
			continue
		case json.Delim('['):
			if top != nil && top.obj {
				top.isKey = true
			}
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.obj {
			top.isKey = true // a scalar value ends the member
		}
	}
}
