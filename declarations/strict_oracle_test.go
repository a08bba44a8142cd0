package declarations

// This file keeps the strict decoder as it was before the byte-level scanner of
// strict.go replaced it: a walker over encoding/json's Decoder.Token. It is the
// oracle of the differential tests (strict_test.go): the scanner must accept and
// refuse exactly the inputs the walker accepts and refuses, decode the same values,
// and say the same thing about each refusal. Only the names differ from the
// original (an "oracle" prefix); the code is as it was.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// oracleDecodeStrict decodes raw into v (a pointer to one of this package's wire
// structs) only if raw has exactly the shape of v's type.
//
// encoding/json alone is too forgiving for bytes that decide what a machine
// does: it accepts duplicate keys (the last one wins, so two readers can
// disagree about one document), matches keys case-insensitively, treats null
// as "absent", decodes base64 with ignored newlines and non-zero padding bits,
// and replaces invalid UTF-8 silently. So this walks the tokens, guided by
// the Go type, and fills v itself, refusing anything but:
//   - valid UTF-8 holding exactly one JSON value (no trailing data);
//   - object keys that are the exact json tag of a field, each at most once;
//   - every field present, unless it is a slice or tagged omitempty;
//   - no null anywhere;
//   - strings, numbers, arrays and objects where the type wants them;
//     numbers for unsigned fields as plain decimal integers; times as strict
//     RFC 3339 (what time.Time's UnmarshalText accepts); []byte fields as
//     canonical standard base64 (the one spelling encoding/json produces).
//
// Filling v in the same walk, rather than walking and then calling
// json.Unmarshal, halves the work on large bodies and leaves no second
// parser whose reading could differ from the check.
func oracleDecodeStrict(raw []byte, v any) error {
	if !utf8.Valid(raw) {
		return errors.New("not valid UTF-8")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("internal: oracleDecodeStrict needs a non-nil pointer")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	w := oracleWalker{dec: dec}
	tok, err := w.token()
	if err != nil {
		return err
	}
	// Decode into a fresh value and copy it out only on success, so a
	// refused input leaves v untouched.
	fresh := reflect.New(rv.Elem().Type()).Elem()
	if err := w.value(tok, fresh, ""); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	rv.Elem().Set(fresh)
	return nil
}

var (
	oracleTimeType  = reflect.TypeFor[time.Time]()
	oracleBytesType = reflect.TypeFor[[]byte]()
)

type oracleWalker struct {
	dec *json.Decoder
}

// token reads the next token, turning the decoder's errors into reasons a
// person can read (a cut-off paste is "truncated", not a syntax riddle).
func (w oracleWalker) token() (json.Token, error) {
	tok, err := w.dec.Token()
	if err == nil {
		return tok, nil
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, errors.New("truncated JSON")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return nil, fmt.Errorf("not valid JSON at byte %d: %s", se.Offset, clip(se.Error(), maxTextShown))
	}
	return nil, fmt.Errorf("not valid JSON: %s", clip(err.Error(), maxTextShown))
}

// value checks the value that starts with tok against dst's type and stores
// it in dst. where names the value for messages ("" for the top level).
func (w oracleWalker) value(tok json.Token, dst reflect.Value, where string) error {
	if tok == nil {
		return fmt.Errorf("%s is null", oracleDescribe(where))
	}
	t := dst.Type()
	switch {
	case t == oracleTimeType:
		s, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%s must be an RFC 3339 time string", oracleDescribe(where))
		}
		var tm time.Time
		if err := tm.UnmarshalText([]byte(s)); err != nil {
			return fmt.Errorf("%s is not an RFC 3339 time: %s", oracleDescribe(where), clip(err.Error(), maxTextShown))
		}
		dst.Set(reflect.ValueOf(tm))
		return nil
	case t == oracleBytesType:
		s, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%s must be a base64 string", oracleDescribe(where))
		}
		b, ok := oracleCanonicalBase64(s)
		if !ok {
			return fmt.Errorf("%s is not canonical standard base64 (padded, no line breaks, zero padding bits)", oracleDescribe(where))
		}
		dst.SetBytes(b)
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		s, ok := tok.(string)
		if !ok {
			return fmt.Errorf("%s must be a string", oracleDescribe(where))
		}
		dst.SetString(s)
		return nil
	case reflect.Uint64:
		n, ok := tok.(json.Number)
		if !ok {
			return fmt.Errorf("%s must be a number", oracleDescribe(where))
		}
		u, err := strconv.ParseUint(string(n), 10, 64)
		if err != nil {
			return fmt.Errorf("%s must be an unsigned 64-bit integer, got %s", oracleDescribe(where), clip(string(n), maxIDShown))
		}
		dst.SetUint(u)
		return nil
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := w.value(tok, p.Elem(), where); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	case reflect.Slice:
		if tok != json.Delim('[') {
			return fmt.Errorf("%s must be an array", oracleDescribe(where))
		}
		s := reflect.MakeSlice(t, 0, 0)
		for i := 0; w.dec.More(); i++ {
			el, err := w.token()
			if err != nil {
				return err
			}
			s = reflect.Append(s, reflect.Zero(t.Elem()))
			if err := w.value(el, s.Index(i), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		if _, err := w.token(); err != nil { // the closing ']'; the decoder checks it matches
			return err
		}
		dst.Set(s)
		return nil
	case reflect.Struct:
		return w.object(tok, dst, where)
	}
	return fmt.Errorf("internal: no strict decoding for %s", t)
}

func (w oracleWalker) object(tok json.Token, dst reflect.Value, where string) error {
	if tok != json.Delim('{') {
		return fmt.Errorf("%s must be an object", oracleDescribe(where))
	}
	fields := oracleWireFields(dst.Type())
	seen := make([]bool, len(fields))
	for w.dec.More() {
		kt, err := w.token()
		if err != nil {
			return err
		}
		key, ok := kt.(string)
		if !ok {
			return fmt.Errorf("%sobject key is not a string", oracleIn(where))
		}
		i := -1
		for j, f := range fields {
			if f.name == key {
				i = j
				break
			}
		}
		if i < 0 {
			return fmt.Errorf("%sunknown field %q", oracleIn(where), clip(key, maxIDShown))
		}
		if seen[i] {
			return fmt.Errorf("%sfield %q appears twice", oracleIn(where), key)
		}
		seen[i] = true
		vt, err := w.token()
		if err != nil {
			return err
		}
		if err := w.value(vt, dst.Field(fields[i].index), oracleJoin(where, key)); err != nil {
			return err
		}
	}
	if _, err := w.token(); err != nil { // the closing '}'
		return err
	}
	for i, f := range fields {
		if !seen[i] && f.required {
			return fmt.Errorf("%sfield %q is missing", oracleIn(where), f.name)
		}
	}
	return nil
}

type oracleWireField struct {
	name     string
	index    int // in the struct
	required bool
}

// oracleWireFields lists the JSON fields of a wire struct. It is recomputed per
// object rather than cached: the structs have a handful of fields, and a
// cache would be package-level mutable state.
func oracleWireFields(t reflect.Type) []oracleWireField {
	out := make([]oracleWireField, 0, t.NumField())
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = sf.Name
		}
		omitempty := strings.Contains(","+opts+",", ",omitempty,")
		out = append(out, oracleWireField{
			name:     name,
			index:    i,
			required: !omitempty && (sf.Type.Kind() != reflect.Slice || sf.Type == oracleBytesType),
		})
	}
	return out
}

// oracleCanonicalBase64 decodes s only if it is the one spelling
// encoding/json would produce for some byte string: standard alphabet,
// padded, no line breaks (which even the strict decoder skips), zero padding
// bits. One spelling per byte string leaves no room for two readers to
// disagree, or for an envelope to be re-encoded unnoticed.
func oracleCanonicalBase64(s string) ([]byte, bool) {
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || base64.StdEncoding.EncodeToString(b) != s {
		return nil, false
	}
	return b, true
}

func oracleJoin(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// oracleDescribe names a value for messages: `field "files[0].path"`.
func oracleDescribe(where string) string {
	if where == "" {
		return "the JSON value"
	}
	return "field " + strconv.Quote(clip(where, maxPathShown))
}

// in prefixes a message about an object's keys with the object's place,
// or nothing at the top level.
func oracleIn(where string) string {
	if where == "" {
		return ""
	}
	return "in " + strconv.Quote(clip(where, maxPathShown)) + ": "
}
