package declarations

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// decodeStrict decodes raw into v (a pointer to one of this package's wire
// structs) only if raw has exactly the shape of v's type.
//
// encoding/json alone is too forgiving for bytes that decide what a machine
// does: it accepts duplicate keys (the last one wins, so two readers can
// disagree about one document), matches keys case-insensitively, treats null
// as "absent", decodes base64 with ignored newlines and non-zero padding bits,
// and replaces invalid UTF-8 silently. So this scans the bytes, guided by the
// Go type, and fills v itself, refusing anything but:
//   - valid UTF-8 holding exactly one JSON value (no trailing data);
//   - object keys that are the exact json tag of a field, each at most once;
//   - every field present, unless it is a slice or tagged omitempty;
//   - no null anywhere;
//   - strings, numbers, arrays and objects where the type wants them;
//     numbers for unsigned fields as plain decimal integers; times as strict
//     RFC 3339 (what time.Time's UnmarshalText accepts); []byte fields as
//     canonical standard base64 (the one spelling encoding/json produces).
//
// Filling v in the same scan, rather than scanning and then calling
// json.Unmarshal, leaves no second parser whose reading could differ from the
// check.
//
// The scanner replaced a walker over encoding/json's Decoder.Token, which cost
// more than the signature check on every envelope. It reads the tokens in the
// same order and with the same states as that walker did, so it accepts and
// refuses the same inputs and words each refusal the same way, down to the byte
// offsets in syntax errors; the walker is kept in strict_oracle_test.go and the
// differential tests in strict_test.go hold the two together.
func decodeStrict(raw []byte, v any) error {
	if !utf8.Valid(raw) {
		return errors.New("not valid UTF-8")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("internal: decodeStrict needs a non-nil pointer")
	}
	s := scanner{data: raw}
	tok, err := s.token()
	if err != nil {
		return err
	}
	// Decode into a fresh value and copy it out only on success, so a
	// refused input leaves v untouched.
	fresh := reflect.New(rv.Elem().Type()).Elem()
	if err := s.value(tok, fresh); err != nil {
		return err
	}
	if _, more := s.peek(); more {
		return errors.New("trailing data after the JSON value")
	}
	rv.Elem().Set(fresh)
	return nil
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	bytesType = reflect.TypeFor[[]byte]()
)

// scanner reads JSON tokens from data. Its states are those of encoding/json's
// Decoder in token mode (what may come next: a value, a comma, a key...), because
// they decide which refusal an input gets.
type scanner struct {
	data  []byte
	pos   int // the next byte to read
	state tokenState
	stack []tokenState // the states to return to when an array or object closes
	// path is where the value being read is, for messages.
	path []pathElem
}

type tokenState uint8

const (
	tokenTopValue tokenState = iota
	tokenArrayStart
	tokenArrayValue
	tokenArrayComma
	tokenObjectStart
	tokenObjectKey
	tokenObjectColon
	tokenObjectValue
	tokenObjectComma
)

type tokenKind uint8

const (
	tokArray  tokenKind = iota + 1 // '['
	tokEndArr                      // ']'
	tokObject                      // '{'
	tokEndObj                      // '}'
	tokString
	tokNumber
	tokBool
	tokNull
)

// token is one JSON token. For a string, raw is what lies between the quotes,
// escapes not yet decoded (esc tells whether there are any); for a number, its
// text.
type token struct {
	kind tokenKind
	raw  []byte
	esc  bool
}

var errTruncated = errors.New("truncated JSON")

// syntaxError words a syntax error at data[at] as the walker did, where it is
// by line and column: an operator edits a body as a file of many lines, and
// "at byte 52" sent them counting (a walkthrough). (encoding/json's offset of an
// error inside a value is not its place in the input either.)
func syntaxError(data []byte, at int, msg string) error {
	line, col := lineAndColumn(data, at)
	return fmt.Errorf("not valid JSON at line %d, column %d: %s", line, col, clip(msg, maxTextShown))
}

// lineAndColumn is where data[at] is, both counted from 1, the column in
// characters.
func lineAndColumn(data []byte, at int) (line, col int) {
	at = min(max(at, 0), len(data))
	before := data[:at]
	line = bytes.Count(before, []byte("\n")) + 1
	col = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// peek skips white space and returns the next byte, if any.
func (s *scanner) peek() (byte, bool) {
	for ; s.pos < len(s.data); s.pos++ {
		if c := s.data[s.pos]; !isSpace(c) {
			return c, true
		}
	}
	return 0, false
}

// more reports whether the array or object being read has another element.
func (s *scanner) more() bool {
	c, ok := s.peek()
	return ok && c != ']' && c != '}'
}

func (s *scanner) valueAllowed() bool {
	switch s.state {
	case tokenTopValue, tokenArrayStart, tokenArrayValue, tokenObjectValue:
		return true
	}
	return false
}

func (s *scanner) valueEnd() {
	switch s.state {
	case tokenArrayStart, tokenArrayValue:
		s.state = tokenArrayComma
	case tokenObjectValue:
		s.state = tokenObjectComma
	}
}

func (s *scanner) push(next tokenState) {
	s.stack = append(s.stack, s.state)
	s.state = next
}

func (s *scanner) pop() {
	s.state = s.stack[len(s.stack)-1]
	s.stack = s.stack[:len(s.stack)-1]
	s.valueEnd()
}

// token reads the next token: Decoder.Token, over bytes.
func (s *scanner) token() (token, error) {
	for {
		c, ok := s.peek()
		if !ok {
			return token{}, errTruncated
		}
		switch c {
		case '[':
			if !s.valueAllowed() {
				return token{}, s.tokenError(c)
			}
			s.pos++
			s.push(tokenArrayStart)
			return token{kind: tokArray}, nil
		case ']':
			if s.state != tokenArrayStart && s.state != tokenArrayComma {
				return token{}, s.tokenError(c)
			}
			s.pos++
			s.pop()
			return token{kind: tokEndArr}, nil
		case '{':
			if !s.valueAllowed() {
				return token{}, s.tokenError(c)
			}
			s.pos++
			s.push(tokenObjectStart)
			return token{kind: tokObject}, nil
		case '}':
			if s.state != tokenObjectStart && s.state != tokenObjectComma {
				return token{}, s.tokenError(c)
			}
			s.pos++
			s.pop()
			return token{kind: tokEndObj}, nil
		case ':':
			if s.state != tokenObjectColon {
				return token{}, s.tokenError(c)
			}
			s.pos++
			s.state = tokenObjectValue
			continue
		case ',':
			switch s.state {
			case tokenArrayComma:
				s.pos++
				s.state = tokenArrayValue
				continue
			case tokenObjectComma:
				s.pos++
				s.state = tokenObjectKey
				continue
			}
			return token{}, s.tokenError(c)
		case '"':
			if s.state == tokenObjectStart || s.state == tokenObjectKey {
				tok, err := s.scalar()
				if err != nil {
					return token{}, err
				}
				s.state = tokenObjectColon
				return tok, nil
			}
		}
		if !s.valueAllowed() {
			return token{}, s.tokenError(c)
		}
		tok, err := s.scalar()
		if err != nil {
			return token{}, err
		}
		s.valueEnd()
		return tok, nil
	}
}

// tokenError refuses a byte that cannot come next in the current state; its
// offset is the byte's place in the input.
func (s *scanner) tokenError(c byte) error {
	var context string
	switch s.state {
	case tokenTopValue, tokenArrayStart, tokenArrayValue, tokenObjectValue:
		context = " looking for beginning of value"
	case tokenArrayComma:
		context = " after array element"
	case tokenObjectKey:
		context = " looking for beginning of object key string"
	case tokenObjectColon:
		context = " after object key"
	case tokenObjectComma:
		context = " after object key:value pair"
	}
	return syntaxError(s.data, s.pos, "invalid character "+quoteChar(c)+context)
}

// scalar reads the string, number or literal that starts at s.pos. A value cut
// short by the end of the input is truncated JSON.
func (s *scanner) scalar() (token, error) {
	d, start := s.data, s.pos
	bad := func(at int, context string) (token, error) {
		return token{}, syntaxError(d, at, "invalid character "+quoteChar(d[at])+" "+context)
	}
	i := start
	var tok token
	switch c := d[i]; {
	case c == '"':
		i++
		for {
			if i >= len(d) {
				return token{}, errTruncated
			}
			c := d[i]
			if c >= 0x20 && c != '"' && c != '\\' {
				i++ // the common case, first
				continue
			}
			if c == '"' {
				break
			}
			switch {
			case c == '\\':
				tok.esc = true
				i++
				if i >= len(d) {
					return token{}, errTruncated
				}
				switch d[i] {
				case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
				case 'u':
					for range 4 {
						i++
						if i >= len(d) {
							return token{}, errTruncated
						}
						if !isHex(d[i]) {
							return bad(i, `in \u hexadecimal character escape`)
						}
					}
				default:
					return bad(i, "in string escape code")
				}
			case c < 0x20:
				return bad(i, "in string literal")
			}
			i++
		}
		tok.kind, tok.raw = tokString, d[start+1:i]
		i++ // the closing quote
	case c == '-' || isDigit(c):
		if c == '-' {
			i++
			if i >= len(d) {
				return token{}, errTruncated
			}
			if !isDigit(d[i]) {
				return bad(i, "in numeric literal")
			}
		}
		if d[i] == '0' {
			i++
		} else {
			for i++; i < len(d) && isDigit(d[i]); i++ {
			}
		}
		if i < len(d) && d[i] == '.' {
			i++
			if i >= len(d) {
				return token{}, errTruncated
			}
			if !isDigit(d[i]) {
				return bad(i, "after decimal point in numeric literal")
			}
			for i++; i < len(d) && isDigit(d[i]); i++ {
			}
		}
		if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
			i++
			if i < len(d) && (d[i] == '+' || d[i] == '-') {
				i++
			}
			if i >= len(d) {
				return token{}, errTruncated
			}
			if !isDigit(d[i]) {
				return bad(i, "in exponent of numeric literal")
			}
			for i++; i < len(d) && isDigit(d[i]); i++ {
			}
		}
		tok.kind, tok.raw = tokNumber, d[start:i]
	case c == 't' || c == 'f' || c == 'n':
		word := "true"
		switch c {
		case 'f':
			word = "false"
		case 'n':
			word = "null"
		}
		for k := 1; k < len(word); k++ {
			i++
			if i >= len(d) {
				return token{}, errTruncated
			}
			if d[i] != word[k] {
				return bad(i, fmt.Sprintf("in literal %s (expecting %s)", word, quoteChar(word[k])))
			}
		}
		i++
		tok.kind, tok.raw = tokBool, d[start:i]
		if c == 'n' {
			tok.kind = tokNull
		}
	default:
		return bad(i, "looking for beginning of value")
	}
	s.pos = i
	return tok, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// quoteChar formats c for a syntax error, as encoding/json does.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	q := strconv.Quote(string(rune(c)))
	return "'" + q[1:len(q)-1] + "'"
}

// pathElem is one step of the path to the value being read: a field, or an
// element of an array. The path is only spelled out when a message needs it.
type pathElem struct {
	key   string // a field's name, or
	index int    // an element's index when isIdx
	isIdx bool
}

// where names the value being read, as the messages do: "body.files[0].path",
// or "" at the top level.
func (s *scanner) where() string {
	w := ""
	for _, e := range s.path {
		if e.isIdx {
			w = fmt.Sprintf("%s[%d]", w, e.index)
		} else {
			w = join(w, e.key)
		}
	}
	return w
}

// value checks the value that starts with tok against dst's type and stores
// it in dst.
func (s *scanner) value(tok token, dst reflect.Value) error {
	if tok.kind == tokNull {
		return fmt.Errorf("%s is null", describe(s.where()))
	}
	t := dst.Type()
	switch {
	case t == timeType:
		if tok.kind != tokString {
			return fmt.Errorf("%s must be an RFC 3339 time string", describe(s.where()))
		}
		if err := dst.Addr().Interface().(*time.Time).UnmarshalText(s.bytes(tok)); err != nil {
			return fmt.Errorf("%s is not an RFC 3339 time: %s", describe(s.where()), clip(err.Error(), maxTextShown))
		}
		return nil
	case t == bytesType:
		if tok.kind != tokString {
			return fmt.Errorf("%s must be a base64 string", describe(s.where()))
		}
		b, ok := canonicalBase64(s.bytes(tok))
		if !ok {
			return fmt.Errorf("%s is not canonical standard base64 (padded, no line breaks, zero padding bits)", describe(s.where()))
		}
		dst.SetBytes(b)
		return nil
	}
	switch t.Kind() {
	case reflect.String:
		if tok.kind != tokString {
			return fmt.Errorf("%s must be a string", describe(s.where()))
		}
		dst.SetString(string(s.bytes(tok)))
		return nil
	case reflect.Uint64:
		if tok.kind != tokNumber {
			return fmt.Errorf("%s must be a number", describe(s.where()))
		}
		u, ok := parseUint64(tok.raw)
		if !ok {
			return fmt.Errorf("%s must be an unsigned 64-bit integer, got %s", describe(s.where()), clip(string(tok.raw), maxIDShown))
		}
		dst.SetUint(u)
		return nil
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := s.value(tok, p.Elem()); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	case reflect.Slice:
		if tok.kind != tokArray {
			return fmt.Errorf("%s must be an array", describe(s.where()))
		}
		out := reflect.MakeSlice(t, 0, 0)
		for i := 0; s.more(); i++ {
			el, err := s.token()
			if err != nil {
				return err
			}
			out = reflect.Append(out, reflect.Zero(t.Elem()))
			s.path = append(s.path, pathElem{index: i, isIdx: true})
			if err := s.value(el, out.Index(i)); err != nil {
				return err
			}
			s.path = s.path[:len(s.path)-1]
		}
		if _, err := s.token(); err != nil { // the closing ']'; the state machine checks it matches
			return err
		}
		dst.Set(out)
		return nil
	case reflect.Struct:
		return s.object(tok, dst)
	}
	return fmt.Errorf("internal: no strict decoding for %s", t)
}

func (s *scanner) object(tok token, dst reflect.Value) error {
	if tok.kind != tokObject {
		return fmt.Errorf("%s must be an object", describe(s.where()))
	}
	fields := s.fieldsOf(dst.Type())
	var seen uint64 // wireFields has at most 64 fields
	for s.more() {
		kt, err := s.token() // always a string: the states refuse anything else as a key
		if err != nil {
			return err
		}
		i := -1
		for j := range fields {
			if s.equal(kt, fields[j].name) {
				i = j
				break
			}
		}
		if i < 0 {
			return fmt.Errorf("%sunknown field %q", in(s.where()), clip(string(s.bytes(kt)), maxIDShown))
		}
		if seen&(1<<i) != 0 {
			return fmt.Errorf("%sfield %q appears twice", in(s.where()), fields[i].name)
		}
		seen |= 1 << i
		vt, err := s.token()
		if err != nil {
			return err
		}
		s.path = append(s.path, pathElem{key: fields[i].name})
		if err := s.value(vt, dst.Field(fields[i].index)); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
	}
	if _, err := s.token(); err != nil { // the closing '}'
		return err
	}
	for i, f := range fields {
		if seen&(1<<i) == 0 && f.required {
			return fmt.Errorf("%sfield %q is missing", in(s.where()), f.name)
		}
	}
	return nil
}

// bytes returns a string token's content, escapes decoded.
func (s *scanner) bytes(tok token) []byte {
	if !tok.esc {
		return tok.raw
	}
	return unescape(tok.raw)
}

// equal reports whether a string token's content is name.
func (s *scanner) equal(tok token, name string) bool {
	if !tok.esc {
		return string(tok.raw) == name
	}
	return string(unescape(tok.raw)) == name
}

// unescape decodes the escapes of a string the scanner accepted, as
// encoding/json does: a \u escape of a lone or mismatched surrogate becomes
// U+FFFD.
func unescape(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		if n := bytes.IndexByte(raw[i:], '\\'); n != 0 {
			if n < 0 {
				n = len(raw) - i
			}
			out = append(out, raw[i:i+n]...)
			i += n
			continue
		}
		switch raw[i+1] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(raw[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(raw[i+2:i+6])); dec != unicode.ReplacementChar {
						out = utf8.AppendRune(out, dec)
						i += 6
						continue
					}
				}
				r = unicode.ReplacementChar
			}
			out = utf8.AppendRune(out, r)
			continue
		default: // '"', '\\', '/'
			out = append(out, raw[i+1])
		}
		i += 2
	}
	return out
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case isDigit(c):
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r*16 + rune(c)
	}
	return r
}

// parseUint64 accepts what strconv.ParseUint(s, 10, 64) accepts of a JSON
// number: decimal digits only, at most 2^64-1.
func parseUint64(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if !isDigit(c) {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

type wireField struct {
	name     string
	index    int // in the struct
	required bool
}

// fieldsOf returns wireFields(t). The wire types' tables are computed once, when
// the package is initialised, and only read after: computing them for each object
// cost a fifth of a decode.
func (s *scanner) fieldsOf(t reflect.Type) []wireField {
	if f, ok := wireTables[t]; ok {
		return f
	}
	return wireFields(t)
}

// wireTables holds wireFields of every wire struct; it is never written after
// initialisation.
var wireTables = func() map[reflect.Type][]wireField {
	m := map[reflect.Type][]wireField{}
	for _, t := range []reflect.Type{
		reflect.TypeFor[Envelope](), reflect.TypeFor[Signature](), reflect.TypeFor[Batch](),
		reflect.TypeFor[Declaration](), reflect.TypeFor[Body](), reflect.TypeFor[File](),
		reflect.TypeFor[Keyring](), reflect.TypeFor[Revocation](), reflect.TypeFor[Membership](),
	} {
		m[t] = wireFields(t)
	}
	return m
}()

// wireFields lists the JSON fields of a wire struct; object tracks which it saw
// in a 64-bit mask, so a wire struct has at most 64.
func wireFields(t reflect.Type) []wireField {
	if t.NumField() > 64 {
		panic("declarations: a wire struct has more than 64 fields")
	}
	out := make([]wireField, 0, t.NumField())
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
		out = append(out, wireField{
			name:     name,
			index:    i,
			required: !omitempty && (sf.Type.Kind() != reflect.Slice || sf.Type == bytesType),
		})
	}
	return out
}

// decodeCanonicalBase64 decodes s only if it is the one spelling
// encoding/json would produce for some byte string: standard alphabet,
// padded, no line breaks (which even the strict decoder skips), zero padding
// bits. One spelling per byte string leaves no room for two readers to
// disagree, or for an envelope to be re-encoded unnoticed.
func decodeCanonicalBase64(s string) ([]byte, bool) { return canonicalBase64([]byte(s)) }

// canonicalBase64 is decodeCanonicalBase64 of bytes. The strict decoder refuses
// every other spelling but the line breaks it skips, so refusing those too leaves
// only the canonical one, with no encoding back to compare.
func canonicalBase64(s []byte) ([]byte, bool) {
	for _, c := range s {
		if c == '\r' || c == '\n' {
			return nil, false
		}
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Strict().Decode(b, s)
	if err != nil {
		return nil, false
	}
	return b[:n], true
}

func join(where, key string) string {
	if where == "" {
		return key
	}
	return where + "." + key
}

// describe names a value for messages: `field "files[0].path"`.
func describe(where string) string {
	if where == "" {
		return "the JSON value"
	}
	return "field " + strconv.Quote(clip(where, maxPathShown))
}

// in prefixes a message about an object's keys with the object's place,
// or nothing at the top level.
func in(where string) string {
	if where == "" {
		return ""
	}
	return "in " + strconv.Quote(clip(where, maxPathShown)) + ": "
}
