package jsonfile

import (
	"errors"
	"io/fs"
	"reflect"
	"testing"
)

// file is a small state file of the kind Decode reads.
type file struct {
	Format int               `json:"format"`
	Name   string            `json:"name"`
	Tags   []string          `json:"tags,omitempty"`
	Extra  map[string]string `json:"extra,omitempty"`
}

// decodeBytes is Decode of a file holding data.
func decodeBytes(data []byte) (file, error) {
	var f file
	err := Decode("f.json", func(string, int64) ([]byte, error) { return data, nil }, 1<<20, 1, &f, &f.Format)
	return f, err
}

// examineBytes is the slow path alone, the reference.
func examineBytes(data []byte) (file, error) {
	var f file
	err := examine(data, 1, &f)
	return f, err
}

// sameOutcome fails t unless the one pass and the slow path agree on data: both
// accept it with the same value, or both refuse it with the same reason.
func sameOutcome(t *testing.T, data []byte) {
	t.Helper()
	got, gerr := decodeBytes(data)
	want, werr := examineBytes(data)
	switch {
	case (gerr == nil) != (werr == nil):
		t.Fatalf("%q: Decode says %v, the slow path %v", data, gerr, werr)
	case gerr != nil && gerr.Error() != werr.Error():
		t.Fatalf("%q: Decode says %q, the slow path %q", data, gerr, werr)
	case gerr == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%q: Decode gives %+v, the slow path %+v", data, got, want)
	}
}

var cases = []string{
	`{"format":1,"name":"a"}`,
	"  {\"format\":1,\"name\":\"a\",\"tags\":[\"x\"]}\n\n",
	"\t\r\n{\"format\":1}\r\n",
	`{"format":1,"name":"a"}` + "\x00\x00",
	`{"format":1,"name":"a"}` + "\v",
	`{"format":1,"name":"a"}` + "\u00a0",
	`{"format":1,"name":"a"} {"format":1}`,
	`{"format":1,"name":"a"}x`,
	`{"format":1,"name":"a","color":"red"}`,
	`{"format":2,"name":"a"}`,
	`{"format":2,"name":"a","color":"red"}`,
	`{"name":"a"}`,
	`{"format":"1","name":"a"}`,
	`{"format":1.5}`,
	`{"format":1,"format":2}`,
	`{"format":2,"format":1}`,
	`{"FORMAT":1,"Name":"a"}`,
	`{"format":1,"name":7}`,
	`{"format":1,"name":"a"`,
	`{"format":1,"na`,
	``,
	`   `,
	"\x00\x00\x00",
	`{"format":1}` + "\x00" + `}`,
	`null`,
	`[]`,
	`"format"`,
	`1`,
	`{}`,
	`{"format":1,"name":"\xff"}`,
	`{"format":1,"tags":null,"extra":{"k":"v"}}`,
}

func TestOnePassAgreesWithTheSlowPath(t *testing.T) {
	for _, c := range cases {
		sameOutcome(t, []byte(c))
	}
}

// The one pass must not swallow the distinctions the slow path draws: a few of them,
// spelled out.
func TestDecodeTellsFaultsApart(t *testing.T) {
	for _, c := range []struct {
		data string
		want string // "" accepted, "truncated", or the start of the corrupt reason
	}{
		{`{"format":1,"name":"a"}` + "\n", ""},
		{`{"format":1,"name":"a"`, "truncated"},
		{`{"format":1}` + "\x00\x00", "corrupt: NUL bytes follow"},
		{`{"format":2,"color":"red"}`, "corrupt: it has format version 2"},
		{`{"format":1,"color":"red"}`, "corrupt: it cannot be decoded"},
		{`null`, "corrupt: it holds a JSON value that is not an object"},
		{`{"format":1} {}`, "corrupt: unexpected data after the JSON object"},
		// encoding/json reads these (the last member wins, names match whatever
		// their case); another reader would not read them the same way.
		{`{"format":2,"format":1,"name":"a"}`, `corrupt: it cannot be decoded one way only: member "format" appears twice`},
		{`{"format":1,"name":"a","name":"b"}`, `corrupt: it cannot be decoded one way only: member "name" appears twice`},
		{`{"format":1,"Name":"a"}`, `corrupt: it cannot be decoded one way only: member "Name" is field "name"`},
		{`{"Format":1,"name":"a"}`, `corrupt: it cannot be decoded one way only: member "Format" is field "format"`},
		{`{"format":1,"extra":{"k":"a","k":"b"}}`, `corrupt: it cannot be decoded one way only: in "extra": member "k" appears twice`},
		{`{"format":1,"extra":{"K":"a","k":"b"}}`, ""},
		// encoding/json reads a byte that is not UTF-8 as U+FFFD: not what the
		// file holds.
		{"{\"format\":1,\"name\":\"a\xffb\"}", `corrupt: it cannot be decoded one way only: not valid UTF-8 (at byte 21)`},
	} {
		_, err := decodeBytes([]byte(c.data))
		var f *Fault
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: refused: %v", c.data, err)
		case c.want == "":
		case !errors.As(err, &f):
			t.Errorf("%q: %v, not a *Fault", c.data, err)
		case c.want == "truncated" && !f.Truncated:
			t.Errorf("%q: %v, not truncated", c.data, err)
		case c.want != "truncated" && (len(err.Error()) < len(c.want) || err.Error()[:len(c.want)] != c.want):
			t.Errorf("%q: %q, want it to start with %q", c.data, err, c.want)
		}
	}
}

func TestDecodeAbsent(t *testing.T) {
	var f file
	err := Decode("f.json", func(string, int64) ([]byte, error) { return nil, fs.ErrNotExist }, 1<<20, 1, &f, &f.Format)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("absent file: %v", err)
	}
}

// FuzzOnePass checks that the one pass accepts exactly what the slow path accepts,
// with the same value, and that a refusal gives the slow path's reason.
//
//	go test -run='^$' -fuzz=FuzzOnePass -fuzztime=60s ./host/internal/jsonfile/
func FuzzOnePass(f *testing.F) {
	for _, c := range cases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sameOutcome(t, data)
	})
}
