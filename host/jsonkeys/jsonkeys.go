// Package jsonkeys refuses the JSON documents encoding/json reads one way and
// another reader may read another: an object with two members of one name (the
// decoder keeps the last, another reader the first or both), and a member whose
// name matches a field only when case is ignored (the decoder fills the field, a
// reader that compares names exactly sees an unknown member), and bytes that are
// not UTF-8 (the decoder reads each as U+FFFD). None ever comes from this
// program's own encoder, so a file or a request holding one was written by
// something else, and it is refused rather than read one way among two.
//
// Check runs beside json.Unmarshal (after it, on the same bytes), guided by the
// type decoded into. The signed envelopes need no such second look: package
// declarations decodes them with a scanner of its own that refuses all three already.
//
// It uses the standard library only, so that the host agent may import it.
package jsonkeys

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors callers branch on with errors.Is; the first two are also a *KeyError.
var (
	// ErrDuplicate: an object holds two members of one name.
	ErrDuplicate = errors.New("a JSON member name appears twice")
	// ErrCase: a member's name matches a field only when case is ignored.
	ErrCase = errors.New("a JSON member name differs in case from its field's")
	// ErrUTF8: the document is not valid UTF-8. encoding/json reads each bad
	// byte of a string as U+FFFD, so that what it reads is not what the file
	// holds, and another reader refuses it or keeps the bytes.
	ErrUTF8 = errors.New("not valid UTF-8")
)

// KeyError is a member name refused: where (the path of the object holding it,
// "" at the top), the name (capped), and Kind, ErrDuplicate or ErrCase. Field,
// with ErrCase, is the field's own spelling. Member values are never quoted: they
// may be secrets.
type KeyError struct {
	Where string
	Key   string
	Field string
	Kind  error
}

func (e *KeyError) Error() string {
	in := ""
	if e.Where != "" {
		in = "in " + strconv.Quote(clip(e.Where)) + ": "
	}
	if e.Kind == ErrCase {
		return fmt.Sprintf("%smember %q is field %q in another case: write it %q", in, clip(e.Key), e.Field, e.Field)
	}
	return fmt.Sprintf("%smember %q appears twice", in, clip(e.Key))
}

// Is reports whether target is e's kind.
func (e *KeyError) Is(target error) bool { return target == e.Kind }

// Check refuses data that is not valid UTF-8 (ErrUTF8), and returns a *KeyError
// for the first member name of data that is refused:
// in any object, a name already seen in it (ErrDuplicate); in an object decoded
// into a struct, a name that is not exactly one of its fields' but equals one when
// case is ignored (ErrCase). Objects decoded otherwise (a map, whose keys Go
// compares exactly; a json.RawMessage or anything with its own decoding, whose
// shape Check does not know) are held to the first rule only: what a RawMessage
// holds is judged again by whatever decodes it. v is what data is or will be
// decoded into: a pointer, or a value of that type. A document that is not valid
// JSON gives the decoder's error; callers decode first.
func Check(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w (at byte %d)", ErrUTF8, firstInvalid(data))
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	c := checker{dec: dec}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	return c.value(tok, t, "")
}

type checker struct {
	dec   *json.Decoder
	depth int
}

// maxDepth bounds the nesting followed, as encoding/json's own decoder does
// (10000): Check is called after the decoder accepted the document, and the
// bound keeps a document given to it first from growing the stack without end.
const maxDepth = 10000

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// value checks the value that starts with tok, to be decoded into t (nil: any).
func (c *checker) value(tok json.Token, t reflect.Type, where string) error {
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

func (c *checker) object(t reflect.Type, where string) error {
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

// structFields lists the JSON member names encoding/json decodes into t, with
// the types they decode into, and the same names by their folded form. Fields of
// embedded structs without a name of their own are t's, as the decoder has them.
func structFields(t reflect.Type) (map[string]reflect.Type, map[string]string) {
	fields := map[string]reflect.Type{}
	folded := map[string]string{}
	var walk func(t reflect.Type, depth int)
	walk = func(t reflect.Type, depth int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct && depth < 8 {
					walk(et, depth+1)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if _, dup := fields[name]; dup {
				continue // the shallower field wins, as in the decoder
			}
			fields[name] = ft
			folded[fold(name)] = name
		}
	}
	walk(t, 0)
	return fields, folded
}

// fold is the form of a name that two names share exactly when encoding/json
// matches them ignoring case (bytes.EqualFold: Unicode simple folding, so the
// Kelvin sign is a k and the micro sign a mu): each rune becomes the smallest of
// the runes it folds to.
func fold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// firstInvalid is the offset of the first byte of data that is not valid UTF-8.
func firstInvalid(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// clip caps a name for messages, on a rune boundary.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
