package declarations

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// File is one managed file. Its path is relative to the host's managed root;
// exactly one of Content (text) and ContentBase64 (any bytes) is set.
type File struct {
	Path          string  `json:"path"`
	Content       *string `json:"content,omitempty"`
	ContentBase64 *string `json:"content_base64,omitempty"`
	// Mode is octal text such as "0640"; empty means 0644. Only permission
	// bits: setuid, setgid and sticky are refused.
	Mode string `json:"mode,omitempty"`
	// Owner and Group are a user or group name or a numeric id. The host
	// applies them only when it runs as root.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
}

// DefaultFileMode is the mode of a file that declares none.
const DefaultFileMode fs.FileMode = 0o644

// Data returns the file's content: Content as bytes, or ContentBase64
// decoded. The error is a *BodyError (with Index -1).
func (f File) Data() ([]byte, error) {
	data, reason := f.data()
	if reason != "" {
		return nil, &BodyError{Index: -1, Path: f.Path, Reason: reason}
	}
	return data, nil
}

func (f File) data() ([]byte, string) {
	switch {
	case f.Content != nil && f.ContentBase64 != nil:
		return nil, "both content and content_base64 are set; give exactly one"
	case f.Content != nil:
		if !utf8.ValidString(*f.Content) {
			// JSON would silently turn invalid UTF-8 into U+FFFD, so the
			// host would write other bytes than were declared.
			return nil, "content is not valid UTF-8; use content_base64 for binary data"
		}
		if len(*f.Content) > MaxFileSize {
			return nil, fmt.Sprintf("content is %d bytes, at most %d are allowed", len(*f.Content), MaxFileSize)
		}
		return []byte(*f.Content), ""
	case f.ContentBase64 != nil:
		s := *f.ContentBase64
		if base64.StdEncoding.DecodedLen(len(s)) > MaxFileSize+2 {
			return nil, fmt.Sprintf("content_base64 decodes to more than %d bytes", MaxFileSize)
		}
		b, ok := decodeCanonicalBase64(s)
		if !ok {
			return nil, "content_base64 is not valid standard base64 (padded, no line breaks)"
		}
		if len(b) > MaxFileSize {
			return nil, fmt.Sprintf("content_base64 decodes to %d bytes, at most %d are allowed", len(b), MaxFileSize)
		}
		return b, ""
	default:
		return nil, "neither content nor content_base64 is set; give exactly one (an empty content \"\" makes an empty file)"
	}
}

// FileMode returns the file's permission bits: DefaultFileMode when Mode is
// empty. Mode is 1 to 4 octal digits (a fourth digit must be a leading 0) and
// at most 0777; setuid, setgid and sticky bits are refused.
func (f File) FileMode() (fs.FileMode, error) {
	m, reason := parseMode(f.Mode)
	if reason != "" {
		return 0, &BodyError{Index: -1, Path: f.Path, Reason: reason}
	}
	return m, nil
}

func parseMode(s string) (fs.FileMode, string) {
	if s == "" {
		return DefaultFileMode, ""
	}
	bad := func() string { // formatted only for a bad mode, as checkID's
		return fmt.Sprintf("mode %q is not octal permission bits such as \"0640\" (at most 0777)", clip(s, maxIDShown))
	}
	if len(s) > 4 {
		return 0, bad()
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '7' {
			return 0, bad()
		}
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err == nil && len(s) == 4 && v > 0o777 {
		// Octal, of four digits, the first not 0: setuid, setgid or sticky bits,
		// which a declaration never sets ("not octal" was false: a walkthrough).
		return 0, fmt.Sprintf("mode %q sets the setuid, setgid or sticky bit, which declarations refuse: they write ordinary files, none that runs as its owner or group; write %q",
			s, "0"+s[1:])
	}
	if err != nil || v > 0o777 {
		return 0, bad()
	}
	return fs.FileMode(v), ""
}

// checkAccount returns why s is not an acceptable owner or group, or "".
func checkAccount(field, s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 32 {
		return fmt.Sprintf("%s is %d characters, at most 32 are allowed", field, len(s))
	}
	digits := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
		case 'a' <= c && c <= 'z', c == '_', c == '.', c == '-':
			digits = false
		default:
			return fmt.Sprintf("%s %q holds a character other than a-z, 0-9, '_', '.', '-'", field, clip(s, maxIDShown))
		}
	}
	// An all-digit value is a numeric id; 4294967295 means "unchanged" to
	// chown, so it cannot name an account.
	if digits {
		if v, err := strconv.ParseUint(s, 10, 32); err != nil || v == 1<<32-1 {
			return fmt.Sprintf("%s %q is not a valid numeric id", field, s)
		}
	}
	return ""
}

// checkPath returns why p is not an acceptable managed path, or "".
func checkPath(p string) string {
	switch {
	case p == "":
		return "path is empty"
	case len(p) > MaxPathLen:
		return fmt.Sprintf("path is %d bytes, at most %d are allowed", len(p), MaxPathLen)
	case !utf8.ValidString(p):
		return "path is not valid UTF-8"
	case strings.IndexByte(p, 0) >= 0:
		return "path contains a NUL byte"
	case strings.IndexFunc(p, isControl) >= 0:
		return "path contains a control character (a newline, tab or other); hooks and logs read paths line by line"
	case strings.IndexFunc(p, isFormat) >= 0:
		r := []rune(p)[slices.IndexFunc([]rune(p), isFormat)]
		return fmt.Sprintf("path contains the invisible character U+%04X (one that reorders text, such as U+202E, or takes no room, such as U+200B): a person reading the declaration, its dry run or a log would read another path than the one written", r)
	case strings.HasPrefix(p, "/"):
		return "path is absolute; paths are relative to the managed root"
	case p == ".":
		return "path names the managed root itself"
	}
	// Before cleanliness: the clean form of a path with ".." is no advice to
	// follow ("a/.." would be written as ".", "a/../../x" as "../x").
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "path contains \"..\"; it could escape the managed root"
		}
	}
	for _, el := range strings.Split(p, "/") {
		if strings.HasPrefix(el, "-") {
			// Hooks get the changed paths (MESH_CHANGED), and the tools they hand
			// them to (xargs, tar, rm) take such a name for an option:
			// "--checkpoint-action=exec=…" would have the control plane run a
			// command on the host, which it may never do.
			return fmt.Sprintf("path element %q begins with \"-\": a hook's tools would take it for an option", clip(el, maxPathShown))
		}
	}
	if path.Clean(p) != p {
		return fmt.Sprintf("path is not clean (write it as %q: no \"./\", \"//\" or trailing \"/\")", clip(path.Clean(p), maxPathShown))
	}
	for _, el := range strings.Split(p, "/") {
		if len(el) > MaxPathElementLen {
			return fmt.Sprintf("path element %q is %d bytes, at most %d are allowed (the longest file name a host's file system takes)", clip(el, maxPathShown), len(el), MaxPathElementLen)
		}
	}
	return ""
}

// Body is what a declaration asks of a node: the complete set of managed
// files. A file the host manages that is no longer listed is removed. An
// empty body means "manage nothing".
type Body struct {
	Files []File `json:"files"`
}

// MarshalJSON encodes an empty body as {"files":[]} whether Files is nil or
// empty, so both spellings have one canonical encoding (and one Digest).
func (b Body) MarshalJSON() ([]byte, error) { return json.Marshal(b.plain()) }

// plainBody is Body without its MarshalJSON method.
type plainBody Body

func (b Body) plain() plainBody {
	if b.Files == nil {
		b.Files = []File{}
	}
	return plainBody(b)
}

// Digest is SHA-256 of the body's canonical encoding (json.Marshal of b). Two
// bodies with equal digests declare the same files in the same spelling; it
// is how a host tells a re-signed refresh from a different declaration.
func (b Body) Digest() [32]byte {
	// Marshalling the plain form gives the same bytes as json.Marshal(b)
	// without encoding/json re-compacting MarshalJSON's output.
	enc, err := json.Marshal(b.plain())
	if err != nil {
		// Body holds only strings; encoding/json cannot fail on it.
		panic("declarations: encoding a body: " + err.Error())
	}
	return sha256.Sum256(enc)
}

// ParseBody parses a body strictly (unknown or repeated fields, null and
// trailing data refused) and then validates it. Errors are *BodyError.
func ParseBody(raw []byte) (Body, error) {
	if len(raw) > MaxEnvelopeSize {
		return Body{}, &BodyError{Index: -1, Reason: fmt.Sprintf("%d bytes, more than a declaration can carry (%d)", len(raw), MaxEnvelopeSize)}
	}
	var b Body
	if err := decodeStrict(raw, &b); err != nil {
		return Body{}, &BodyError{Index: -1, Reason: err.Error()}
	}
	if at := loneSurrogate(raw); at >= 0 {
		line, col := lineAndColumn(raw, at)
		return Body{}, &BodyError{Index: -1, Reason: fmt.Sprintf("the \\u escape at line %d, column %d is half a UTF-16 surrogate pair, which is no character: it would be read as U+FFFD and the text changed; write the character itself", line, col)}
	}
	if err := b.Validate(); err != nil {
		return Body{}, err
	}
	return b, nil
}

// loneSurrogate returns the offset in raw, JSON the strict decoder accepted, of
// the first \u escape in a string that is half a UTF-16 surrogate pair without its
// other half, or -1. The decoders read one as U+FFFD, as encoding/json does (decision
// 0024: one reading); an operator's body is refused rather than changed.
func loneSurrogate(raw []byte) int {
	inString := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && raw[i+1] == 'u':
			if r := hex4(raw[i+2 : i+6]); utf16.IsSurrogate(r) {
				if r >= 0xdc00 || i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' ||
					utf16.DecodeRune(r, hex4(raw[i+8:i+12])) == unicode.ReplacementChar {
					return i
				}
				i += 6
			}
			i += 5
		case c == '\\':
			i++ // the escaped character, a quote or a backslash among them
		}
	}
	return -1
}

// Validate checks the body rules and returns a *BodyError naming the first
// file at fault:
//   - at most MaxFiles files;
//   - a path is non-empty, at most MaxPathLen bytes, valid UTF-8 without NUL,
//     control or format (Cf) characters, relative, already clean (path.Clean(p) == p), without a ".." element
//     and not ".", and none of its elements over MaxPathElementLen bytes;
//   - no path is declared twice, and no file lies inside another file's path;
//   - exactly one of content and content_base64; content is valid UTF-8,
//     content_base64 canonical standard base64; at most MaxFileSize bytes;
//   - mode as accepted by File.FileMode;
//   - owner and group, when present, are 1 to 32 characters of [a-z0-9_.-]
//     or a decimal id.
func (b Body) Validate() error {
	if len(b.Files) > MaxFiles {
		return &BodyError{Index: -1, Reason: fmt.Sprintf("%d files, at most %d are allowed", len(b.Files), MaxFiles)}
	}
	index := make(map[string]int, len(b.Files))
	for i, f := range b.Files {
		fail := func(reason string) error { return &BodyError{Index: i, Path: f.Path, Reason: reason} }
		if r := checkPath(f.Path); r != "" {
			return fail(r)
		}
		if j, dup := index[f.Path]; dup {
			return fail(fmt.Sprintf("the same path is declared by file %d", j))
		}
		index[f.Path] = i
		if _, r := f.data(); r != "" {
			return fail(r)
		}
		if _, r := parseMode(f.Mode); r != "" {
			return fail(r)
		}
		if r := checkAccount("owner", f.Owner); r != "" {
			return fail(r)
		}
		if r := checkAccount("group", f.Group); r != "" {
			return fail(r)
		}
	}
	for i, f := range b.Files {
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			if j, ok := index[d]; ok {
				return &BodyError{Index: i, Path: f.Path, Reason: fmt.Sprintf("it lies inside %q, which file %d declares as a file", clip(d, maxPathShown), j)}
			}
		}
	}
	return nil
}

// isFormat reports whether r is a format character (Unicode's Cf: the marks and
// overrides of text direction, zero-width spaces and joiners, the byte order mark).
func isFormat(r rune) bool { return unicode.Is(unicode.Cf, r) }

// isControl reports whether r is a C0 or C1 control character or DEL.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }
