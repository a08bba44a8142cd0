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
// JSON is refused with an error that is neither; callers decode first, and the
// decoder's error says more.
//
// Check reads data once, byte by byte, and allocates nothing for a member or an
// element in the usual case (a name without escapes, an object of a few members):
// the control plane checks every operator request with it, and a `declare --wait`
// on a fleet asks about thousands of nodes a request.
func Check(data []byte, v any) error {
	if !utf8.Valid(data) {
		return fmt.Errorf("%w (at byte %d)", ErrUTF8, firstInvalid(data))
	}
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	c := checker{data: data}
	c.space()
	if err := c.value(t); err != nil {
		return err
	}
	if c.space(); c.pos != len(c.data) {
		return c.syntax("after the top-level value")
	}
	return nil
}

// errSyntax: the document is not JSON. Callers decode first, so that the
// decoder's own error, which says more, is the one a person sees.
var errSyntax = errors.New("not valid JSON")

// checker walks one document. path holds the members and elements from the top
// to the value being read, from which an error's Where is made: only then, so
// that a document that passes costs no string per member.
type checker struct {
	data  []byte
	pos   int
	depth int
	path  []step
	// names are the member names of the objects being read, innermost last: each
	// object's start in it is on the Go stack of object.
	names [][]byte
	types map[reflect.Type]*typeInfo
}

// step is one element of the path to a value: a member's name, or an index.
type step struct {
	key   []byte
	index int // -1 for a member
}

// typeInfo is what the checker needs of a type, worked out once a Check.
type typeInfo struct {
	kind   reflect.Kind // reflect.Invalid: judged as any JSON
	elem   reflect.Type // a slice's, an array's or a map's
	fields map[string]reflect.Type
	folded map[string]string
}

func (c *checker) info(t reflect.Type) *typeInfo {
	if ti, ok := c.types[t]; ok {
		return ti
	}
	ti := &typeInfo{}
	if !reflect.PointerTo(t).Implements(unmarshalerType) && !reflect.PointerTo(t).Implements(textUnmarshalerType) {
		switch ti.kind = t.Kind(); ti.kind {
		case reflect.Slice, reflect.Array, reflect.Map:
			ti.elem = t.Elem()
		case reflect.Struct:
			ti.fields, ti.folded = structFields(t)
		}
	}
	if c.types == nil {
		c.types = map[reflect.Type]*typeInfo{}
	}
	c.types[t] = ti
	return ti
}

// where is the path to the value being read, as KeyError.Where has it:
// "files[1].path".
func (c *checker) where() string {
	var b strings.Builder
	for _, s := range c.path {
		if s.index >= 0 {
			fmt.Fprintf(&b, "[%d]", s.index)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(unquote(s.key))
	}
	return b.String()
}

func (c *checker) syntax(what string) error {
	if c.pos >= len(c.data) {
		return fmt.Errorf("%w: the document ends %s", errSyntax, what)
	}
	// The byte itself is not quoted: it may be part of a secret.
	return fmt.Errorf("%w: unexpected byte at offset %d, %s", errSyntax, c.pos, what)
}

func (c *checker) space() {
	for c.pos < len(c.data) {
		switch c.data[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// value checks the value at pos, to be decoded into t (nil: any), and leaves pos
// after it.
func (c *checker) value(t reflect.Type) error {
	if c.pos >= len(c.data) {
		return c.syntax("where a value belongs")
	}
	switch c.data[c.pos] {
	case '{', '[':
	case '"':
		_, err := c.str()
		return err
	case 't':
		return c.literal("true")
	case 'f':
		return c.literal("false")
	case 'n':
		return c.literal("null")
	default:
		return c.number()
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxDepth {
		return fmt.Errorf("JSON nested deeper than %d levels", maxDepth)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var ti *typeInfo
	if t != nil {
		ti = c.info(t)
	}
	if c.data[c.pos] == '[' {
		var elem reflect.Type
		if ti != nil && (ti.kind == reflect.Slice || ti.kind == reflect.Array) {
			elem = ti.elem
		}
		return c.array(elem)
	}
	return c.object(ti)
}

func (c *checker) array(elem reflect.Type) error {
	c.pos++ // '['
	if c.space(); c.pos < len(c.data) && c.data[c.pos] == ']' {
		c.pos++
		return nil
	}
	c.path = append(c.path, step{index: 0})
	at := len(c.path) - 1
	for i := 0; ; i++ {
		c.path[at].index = i
		c.space()
		if err := c.value(elem); err != nil {
			return err
		}
		more, err := c.after(']', "an array")
		if err != nil || !more {
			c.path = c.path[:at]
			return err
		}
	}
}

// after reads what follows an element or a member: a comma (more follow) or close
// (the array or object ends).
func (c *checker) after(close byte, in string) (more bool, err error) {
	c.space()
	if c.pos >= len(c.data) {
		return false, c.syntax("inside " + in)
	}
	switch c.data[c.pos] {
	case ',':
		c.pos++
		return true, nil
	case close:
		c.pos++
		return false, nil
	}
	return false, c.syntax(fmt.Sprintf("where ',' or '%c' belongs", close))
}

// manyNames is the member count past which an object's names are looked up in a
// map rather than compared one by one.
const manyNames = 16

func (c *checker) object(ti *typeInfo) error {
	c.pos++ // '{'
	if c.space(); c.pos < len(c.data) && c.data[c.pos] == '}' {
		c.pos++
		return nil
	}
	var fields map[string]reflect.Type
	var folded map[string]string
	isMap := false
	var elem reflect.Type
	if ti != nil {
		switch ti.kind {
		case reflect.Struct:
			fields, folded = ti.fields, ti.folded
		case reflect.Map:
			isMap, elem = true, ti.elem
		}
	}
	first := len(c.names)
	defer func() { c.names = c.names[:first] }()
	var seen map[string]bool // once the object has many members
	c.path = append(c.path, step{index: -1})
	at := len(c.path) - 1
	for {
		c.space()
		if c.pos >= len(c.data) || c.data[c.pos] != '"' {
			return c.syntax("where a member name belongs")
		}
		raw, err := c.str()
		if err != nil {
			return err
		}
		name := raw[1 : len(raw)-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			name = []byte(unquote(raw))
		}
		c.path[at].key = raw
		if seen != nil {
			if seen[string(name)] {
				return c.keyError(name, "", ErrDuplicate)
			}
			seen[string(name)] = true
		} else {
			for _, n := range c.names[first:] {
				if bytes.Equal(n, name) {
					return c.keyError(name, "", ErrDuplicate)
				}
			}
			c.names = append(c.names, name)
			if len(c.names)-first > manyNames {
				seen = make(map[string]bool, 2*manyNames)
				for _, n := range c.names[first:] {
					seen[string(n)] = true
				}
			}
		}
		var next reflect.Type
		switch {
		case fields != nil:
			ft, exact := fields[string(name)]
			if !exact {
				if f, ok := folded[fold(string(name))]; ok {
					return c.keyError(name, f, ErrCase)
				}
			}
			next = ft // nil for a member no field takes: the decoder's to refuse or skip
		case isMap:
			next = elem
		}
		if c.space(); c.pos >= len(c.data) || c.data[c.pos] != ':' {
			return c.syntax("where ':' belongs")
		}
		c.pos++
		c.space()
		if err := c.value(next); err != nil {
			return err
		}
		more, err := c.after('}', "an object")
		if err != nil || !more {
			c.path = c.path[:at]
			return err
		}
	}
}

// keyError is name refused, where the path up to its object says.
func (c *checker) keyError(name []byte, field string, kind error) error {
	c.path = c.path[:len(c.path)-1]
	return &KeyError{Where: c.where(), Key: string(name), Field: field, Kind: kind}
}

// str reads a string at pos (its opening quote) and returns it with its quotes,
// as written.
func (c *checker) str() ([]byte, error) {
	start := c.pos
	c.pos++
	for c.pos < len(c.data) {
		switch b := c.data[c.pos]; {
		case b == '"':
			c.pos++
			return c.data[start:c.pos], nil
		case b == '\\':
			if c.pos+1 >= len(c.data) {
				return nil, c.syntax("inside a string")
			}
			c.pos++
			switch c.data[c.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.pos++
			case 'u':
				c.pos++
				for range 4 {
					if c.pos >= len(c.data) || !isHex(c.data[c.pos]) {
						return nil, c.syntax("in a \\u escape")
					}
					c.pos++
				}
			default:
				return nil, c.syntax("after a backslash")
			}
		case b < 0x20:
			return nil, c.syntax("inside a string")
		default:
			c.pos++
		}
	}
	return nil, c.syntax("inside a string")
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

func (c *checker) literal(word string) error {
	if !bytes.HasPrefix(c.data[c.pos:], []byte(word)) {
		return c.syntax("where a value belongs")
	}
	c.pos += len(word)
	return nil
}

// number reads a number as JSON writes one: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *checker) number() error {
	digits := func() int {
		n := 0
		for c.pos < len(c.data) && '0' <= c.data[c.pos] && c.data[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	if c.data[c.pos] == '-' {
		c.pos++
	}
	if c.pos < len(c.data) && c.data[c.pos] == '0' {
		c.pos++
	} else if digits() == 0 {
		return c.syntax("where a value belongs")
	}
	if c.pos < len(c.data) && c.data[c.pos] == '.' {
		c.pos++
		if digits() == 0 {
			return c.syntax("in a number's fraction")
		}
	}
	if c.pos < len(c.data) && (c.data[c.pos] == 'e' || c.data[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.data) && (c.data[c.pos] == '+' || c.data[c.pos] == '-') {
			c.pos++
		}
		if digits() == 0 {
			return c.syntax("in a number's exponent")
		}
	}
	return nil
}

// unquote is the string raw (quotes included, checked by str) as encoding/json
// reads it: escapes resolved, and a lone surrogate read as U+FFFD as it reads one.
func unquote(raw []byte) string {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return string(raw) // str checked it: not reached
	}
	return s
}

// maxDepth bounds the nesting followed, as encoding/json's own decoder does
// (10000): Check is called after the decoder accepted the document, and the
// bound keeps a document given to it first from growing the stack without end.
const maxDepth = 10000

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

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
