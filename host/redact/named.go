package redact

import (
	"strings"

	"mesh/host/token"
)

// The value given to a name that says it is a secret, as a shell, an environment,
// a configuration file (INI, YAML, JSON, XML), a connection string, a command's
// flag or an HTTP header writes it, and the password in a URL, are hidden by a
// scanner rather than by a regular expression: one, case-folded and unanchored,
// cost the control plane a millisecond for each of a host's 8 KiB reports, and
// missed values that run to the end of a line or onto the next (a review). A
// service's failing start that prints its configuration reached every operator,
// the replicated state and every backup (a walkthrough: DB_PASSWORD=hunter2).
//
// The name's words mark a secret, not the value's form: what follows a name in
// prose is hidden too when it reads as a value ("token:expired"), the safe side;
// "token: expired" in a sentence, a name in a path ("/srv/app/secrets.yaml: no
// space left") and names that say something else of a secret (a count, a file, a
// path, "passwordless") are left.

// secretWords are the words a secret's name holds, in lower case; passEnds the
// endings a name holds one by (DB_PASS, MYSQL_PWD).
var (
	secretWords = []string{"password", "passwd", "passphrase", "secret", "token", "credential", "authorization", "cookie",
		"apikey", "api_key", "api-key", "accesskey", "access_key", "access-key", "privatekey", "private_key", "private-key"}
	passEnds = []string{"pass", "pwd"}
	// notSecretEnds are endings of a name that says something else of a secret.
	notSecretEnds = []string{"less", "count", "file", "path", "length", "len", "izer", "expiry", "ttl", "id", "type", "name",
		"error", "exception", "expired", "invalid", "missing", "required", ".service", ".socket", ".timer", ".mount", ".target", // a failure's name
		".java", ".go", ".py", ".rb", ".js", ".ts", ".kt", ".rs", ".c", ".h", ".cpp", ".cs", ".php", ".sh"} // a stack frame's file: line
)

// isNameByte reports whether c may be part of a name.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// namesSecret reports whether name, a run of isNameByte, names a secret.
func namesSecret(name string) bool {
	lower := strings.ToLower(strings.TrimLeft(name, "-."))
	for _, e := range notSecretEnds {
		if strings.HasSuffix(lower, e) && len(lower) > len(e) {
			return false
		}
	}
	for _, w := range secretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	for _, e := range passEnds {
		if lower == e || strings.HasSuffix(lower, "_"+e) || strings.HasSuffix(lower, "-"+e) {
			return true
		}
	}
	return false
}

// mayHoldNames reports whether s may hold a secret's name: a text with none of the
// words is not scanned.
func mayHoldNames(s string) bool {
	lower := strings.ToLower(s)
	for _, w := range []string{"pass", "pwd", "secret", "token", "key", "credential", "authorization", "cookie"} {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// hideNamed returns s with the value given to each secret's name hidden.
func hideNamed(s string) string {
	if !mayHoldNames(s) {
		return s
	}
	var b strings.Builder
	last := 0 // s[last:] is not written yet
	// The start of the line being read, and how far s was looked at for line
	// breaks: found once, not by a scan back from each name (quadratic on one
	// long line of names, a second review: 44 ms for 32 KiB).
	line, looked := 0, 0
	for i := 0; i < len(s); {
		if !isNameByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isNameByte(s[j]) {
			j++
		}
		if k := strings.LastIndexAny(s[looked:i], "\r\n"); k >= 0 {
			line = looked + k + 1
		}
		looked = i
		start, end, ok := namedValue(s, line, i, j)
		if !ok {
			i = j
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(Hidden)
		last, i = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// namedValue returns where the value given to the name s[i:j], on the line that
// starts at s[line], starts and ends, when it names a secret and is given one.
func namedValue(s string, line, i, j int) (start, end int, ok bool) {
	name := s[i:j]
	if !namesSecret(name) {
		return 0, 0, false
	}
	before := byte(0)
	if i > 0 {
		before = s[i-1]
	}
	if before == '/' || before == '\\' {
		return 0, 0, false // a path's component
	}
	lineStart := atLineStart(s[line:i])
	k := j
	quoted := (before == '"' || before == '\'') && k < len(s) && s[k] == before
	if quoted {
		k++
	}
	if before == '<' && k < len(s) && s[k] == '>' {
		// XML: <password>value</password>.
		end := strings.IndexByte(s[k+1:], '<')
		if end < 0 {
			end = lineEnd(s, k+1) - (k + 1)
		}
		return k + 1, k + 1 + end, end > 0
	}
	spaced := skipBlanks(s, k)
	sep := ""
	for _, op := range []string{":=", "=>", "=", ":"} {
		if strings.HasPrefix(s[spaced:], op) {
			sep = op
			break
		}
	}
	if sep == "" {
		// A command's flag: --password VALUE.
		if strings.HasPrefix(name, "-") && spaced > k && spaced < len(s) && s[spaced] != '-' && s[spaced] != '\n' && s[spaced] != '\r' && !hiddenAt(s, spaced) {
			if isQuote(s[spaced]) {
				return spaced, quotedEnd(s, spaced), true
			}
			return spaced, wordEnd(s, spaced), wordEnd(s, spaced) > spaced
		}
		return 0, 0, false
	}
	v := skipBlanks(s, spaced+len(sep))
	inMap := strings.HasSuffix(strings.TrimRight(s[line:i], " \t"), "{") || strings.HasSuffix(strings.TrimRight(s[line:i], " \t"), ",")
	if sep == ":" && v > spaced+1 && !lineStart && !quoted && !inMap && v < len(s) && !isQuote(s[v]) {
		return 0, 0, false // "the token: expired", a sentence
	}
	if hiddenAt(s, v) {
		return 0, 0, false
	}
	if v < len(s) {
		if (s[v] == 'b' || s[v] == 'B' || s[v] == 't' || s[v] == 'T') && schemeWord(s[v:]) > 0 {
			v = skipBlanks(s, v+schemeWord(s[v:])) // Authorization: Bearer VALUE
		}
	}
	switch {
	case v >= len(s) || s[v] == '\n' || s[v] == '\r' || lineStart && isBlockIndicator(s[v:lineEnd(s, v)]):
		// YAML: the value on the lines below, more indented than the name's,
		// hidden from its first character: the lines' breaks before it kept,
		// a text hidden again is read the same.
		from := lineEnd(s, v)
		e := indentedBelow(s, s[line:i], from)
		first := from
		for first < e && (s[first] == '\r' || s[first] == '\n' || s[first] == ' ' || s[first] == '\t') {
			first++
		}
		return first, e, e > first && !hiddenAt(s, first)
	case isQuote(s[v]):
		return v, quotedEnd(s, v), true
	case s[v] == '<':
		return v, closing(s, v, '>'), true
	case s[v] == '[':
		return v, closing(s, v, ']'), true
	case before == ';' || strings.Contains(s[max(0, i-64):i], ";"):
		// A connection string: Password=VALUE;
		e := strings.IndexByte(s[v:lineEnd(s, v)], ';')
		if e < 0 {
			return v, lineEnd(s, v), true
		}
		return v, v + e, e > 0
	case lineStart && !quoted:
		return v, lineEnd(s, v), true // INI, YAML, an environment: the whole line
	}
	return v, wordEnd(s, v), wordEnd(s, v) > v
}

// hiddenAt reports whether s[i:] starts with what stands in for a hidden secret:
// hiding again what was hidden changes nothing (the control plane hides again
// what an agent hid).
func hiddenAt(s string, i int) bool {
	return strings.HasPrefix(s[i:], Hidden) || strings.HasPrefix(s[i:], token.HiddenToken)
}

// atLineStart reports whether head, what comes before a name on its line, is
// only blanks, a list's '-', a quote, "export ", or the '>' or '<' curl -v marks
// a header it sends or receives with.
func atLineStart(head string) bool {
	head = strings.TrimLeft(head, " \t")
	for _, p := range []string{"export ", "- ", "> ", "< "} {
		head = strings.TrimPrefix(head, p)
	}
	return head == "" || head == `"` || head == "'"
}

func skipBlanks(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

func isQuote(c byte) bool { return c == '"' || c == '\'' || c == '`' }

// lineEnd is the index of the end of the line s[i] is on.
func lineEnd(s string, i int) int {
	if e := strings.IndexAny(s[i:], "\r\n"); e >= 0 {
		return i + e
	}
	return len(s)
}

// wordEnd is where a value starting at s[i] and written without quotes ends.
func wordEnd(s string, i int) int {
	for i < len(s) && !strings.ContainsRune(" \t\r\n;\"'`})]", rune(s[i])) {
		i++
	}
	return i
}

// quotedEnd is the end of the quoted value starting at s[i], its closing quote
// included (a backslash escapes one inside double quotes), or of its line; a
// value in triple quotes (Python, TOML) ends at the next three.
func quotedEnd(s string, i int) int {
	q := s[i]
	if triple := strings.Repeat(string(q), 3); strings.HasPrefix(s[i:], triple) {
		if k := strings.Index(s[i+3:], triple); k >= 0 {
			return i + 3 + k + 3
		}
		return len(s)
	}
	for k := i + 1; k < len(s); k++ {
		switch {
		case s[k] == '\\' && q == '"' && k+1 < len(s) && s[k+1] != '\n':
			k++
		case s[k] == q:
			return k + 1
		case s[k] == '\n':
			return k
		}
	}
	return len(s)
}

// closing is the end of the value s[i:] written up to c, included, or its line's.
func closing(s string, i int, c byte) int {
	e := lineEnd(s, i)
	if k := strings.IndexByte(s[i:e], c); k >= 0 {
		return i + k + 1
	}
	return e
}

// schemeWord is the length of an HTTP authentication scheme and the blank after it
// at the start of s ("Bearer "), or 0.
func schemeWord(s string) int {
	for _, w := range []string{"bearer", "basic", "token"} {
		if len(s) > len(w) && strings.EqualFold(s[:len(w)], w) && (s[len(w)] == ' ' || s[len(w)] == '\t') {
			return len(w)
		}
	}
	return 0
}

// isBlockIndicator reports whether rest is a YAML block scalar's indicator (|, >,
// with a chomping sign or an indentation digit), the value following on the lines
// below.
func isBlockIndicator(rest string) bool {
	rest = strings.TrimRight(rest, " \t")
	if rest == "" || rest[0] != '|' && rest[0] != '>' {
		return false
	}
	return len(strings.Trim(rest[1:], "+-0123456789")) == 0
}

// indentedBelow is the end of the lines after from that are more indented than
// the name's line, whose text before the name is head, or from when there is
// none: a YAML value under its name. A blank line inside it is looked past, and a
// list may sit at the name's own indentation; a line ends at "\r\n", '\n' or
// '\r'.
func indentedBelow(s, head string, from int) int {
	indent := len(head) - len(strings.TrimLeft(head, " \t"))
	end := from
	for k := from; k < len(s) && (s[k] == '\n' || s[k] == '\r'); {
		next := k + 1
		if s[k] == '\r' && next < len(s) && s[next] == '\n' {
			next++
		}
		e := lineEnd(s, next)
		line := s[next:e]
		trimmed := strings.TrimLeft(line, " \t")
		switch at := len(line) - len(trimmed); {
		case trimmed == "":
			k = e // blank: the value may go on below it
			continue
		case at > indent, at == indent && strings.HasPrefix(trimmed, "- "):
			end, k = e, e
			continue
		}
		break
	}
	return end
}

// hideURLPasswords returns s with the password of each URL's user information
// hidden (postgres://app:PASSWORD@db/x): the text up to the last '@' before the
// URL ends, which a password written raw may hold ('@', '/').
func hideURLPasswords(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	last := 0
	// The run a URL is in, and its last '@', found once for every URL in it: for
	// each, they were a scan to its end (quadratic in a run of "x://" a review
	// wrote, 54 ms for 8 KiB).
	runEnd, runAt := -1, -1
	for i := 0; ; {
		k := strings.Index(s[i:], "://")
		if k < 0 {
			break
		}
		at := i + k + 3
		i = at
		if !isScheme(s[:at-3]) {
			continue
		}
		if at > runEnd {
			runEnd = at
			for runEnd < len(s) && !strings.ContainsRune(" \t\r\n\"'`<>", rune(s[runEnd])) {
				runEnd++
			}
			runAt = strings.LastIndexByte(s[at:runEnd], '@')
			if runAt >= 0 {
				runAt += at
			}
		}
		if runAt < at {
			continue
		}
		a := runAt - at
		c := strings.IndexByte(s[at:runAt], ':')
		if c < 0 || strings.ContainsAny(s[at:at+c], "/?#[") || c+1 == a {
			continue
		}
		u := s[at:runEnd]
		if strings.HasPrefix(u[c+1:], Hidden) {
			continue
		}
		b.WriteString(s[last : at+c+1])
		b.WriteString(Hidden)
		last, i = at+a, at+a
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// isScheme reports whether s ends with a URL's scheme (a letter, then letters,
// digits, '+', '-' or '.').
func isScheme(s string) bool {
	k := len(s)
	for k > 0 {
		c := s[k-1]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.' {
			k--
			continue
		}
		break
	}
	if k == len(s) {
		return false
	}
	c := s[k]
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
