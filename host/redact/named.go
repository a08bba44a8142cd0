package redact

import (
	"slices"
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
		"error", "exception", "expired", "invalid", "missing", "required", "stdin", ".service", ".socket", ".timer", ".mount", ".target", // a failure's name
		".java", ".go", ".py", ".rb", ".js", ".ts", ".kt", ".rs", ".c", ".h", ".cpp", ".cs", ".php", ".sh"} // a stack frame's file: line
)

// isNameByte reports whether c may be part of a name.
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// namesSecret reports whether name, a run of isNameByte, names a secret.
func namesSecret(name string) bool {
	lower := strings.ToLower(strings.TrimLeft(name, "-."))
	if strings.HasSuffix(lower, "secret_id") || strings.HasSuffix(lower, "secret-id") {
		return true // Vault's AppRole login, not a secret's id
	}
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
	if lower == "sshpass" {
		return true // the password sshpass -e reads
	}
	// A key's (ENCRYPTION_KEY, tls.key); "key" alone is a pair's name (pairMark),
	// as ParameterKey is; and a key that is none of a secret's (a database's, a
	// cache's, a public one) is not one.
	for _, e := range []string{"_key", "-key", ".key"} {
		if strings.HasSuffix(lower, e) && len(lower) > len(e) {
			return !slices.ContainsFunc(notSecretKeys, func(k string) bool { return strings.HasSuffix(lower, k) })
		}
	}
	return false
}

// notSecretKeys are names of keys that are not secrets, as their last words.
var notSecretKeys = []string{"public_key", "public-key", "public.key", "pubkey", "foreign_key", "primary_key", "sort_key", "partition_key", "hash_key",
	"range_key", "row_key", "cache_key", "cache-key", "idempotency_key", "idempotency-key", "routing_key", "routing-key", "group_key", "map_key", "dedup_key",
	"s3_key", "object_key", "unknown_key", "recv-key", "keyserver_key"}

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
//
// open says the text goes on past its end (SecretsOfStart): a value whose end
// cannot be told within it is hidden to its end.
func hideNamed(s string, open bool) string {
	if !mayHoldNames(s) {
		return s
	}
	var b strings.Builder
	last := 0 // s[last:] is not written yet
	// The start of the line being read, its first character that is not a
	// blank, and how far s was looked at for line breaks: found once, not by a
	// scan back from each name (quadratic on one long line of names, a second
	// review: 44 ms for 32 KiB; on leading blanks, a third).
	line, text, looked := 0, 0, 0
	// Until where a value named by a pair is looked for (pairMark), -1 when
	// none is.
	pairUntil := -1
	// An element's text to hide once the scan, reading its tag's attributes as
	// everywhere (the pair's own value="…" among them), reaches it; -1 when none.
	elemStart, elemEnd := -1, -1
	hideElement := func() {
		if from := max(last, elemStart); from < elemEnd {
			b.WriteString(s[last:from])
			b.WriteString(Hidden)
			last = elemEnd
		}
		elemStart = -1
	}
	for i := 0; i < len(s); {
		if elemStart >= 0 && i >= elemStart {
			hideElement()
			i = max(i, last)
			continue
		}
		if !isNameByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isNameByte(s[j]) {
			j++
		}
		if k := strings.LastIndexAny(s[looked:i], "\r\n"); k >= 0 || looked == 0 {
			line = looked + k + 1
			text = skipBlanks(s, line)
		}
		looked = i
		pairName := hasSuffixFold(s[i:j], "name") || hasSuffixFold(s[i:j], "key")
		markPair := func() {
			// Another pair's name ends the window of the one before.
			var at int
			if pairUntil, at = pairMark(s, j); at > 0 {
				// An element's text: <property name="db.password">VALUE</property>,
				// hidden once the rest of the tag is read (a fifth review: read
				// apart, the tag's value="…" was left).
				if es, ee, closed := elementText(s, at); closed && ee > es && elemStart < 0 {
					// The first element pending stays (a third review: a later
					// pair's name replaced it, hidden on a second pass).
					elemStart, elemEnd = es, ee
				}
			}
		}
		start, end, ok := namedValue(s, line, text, i, j, open)
		if !ok && elemStart < 0 && j < len(s) && (s[j] == ' ' || s[j] == '\t') && i > 0 &&
			(s[i-1] == '<' || s[i-1] == ':' && openedTag(s, i-1)) && namesSecret(s[i:j]) {
			// <password encrypted="false">VALUE</password>: the element's text,
			// hidden once its attributes are read as everywhere (FuzzSecrets:
			// read past, an attribute's value was hidden on a second pass).
			if es, ee, closed := elementText(s, j); closed && ee > es {
				elemStart, elemEnd = es, ee
			}
		}
		switch {
		case ok && pairName:
			// A secret's name that may be a pair's too (parameter_key:
			// db_password, then parameter_value): its value hidden, and the
			// pair's (a second review: the pair's value was kept).
			markPair()
		case ok:
		case i < pairUntil && hasSuffixFold(s[i:j], "value"):
			// The pair's value, hidden here or already.
			start, end, ok = valueOf(s, line, text, i, j, open)
			pairUntil = -1
		case pairName:
			markPair()
		}
		if !ok {
			i = j
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(Hidden)
		last, i = end, end
	}
	if elemStart >= 0 {
		hideElement()
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// operators are what may come between a name and its value.
var operators = []string{":=", "=>", "?=", "+=", "=", ":"}

// placeholders are what a usage or a help line gives a flag for its value.
var placeholders = []string{"string", "value", "int", "duration", "file", "path"}

// namedValue returns where the value given to the name s[i:j], on the line that
// starts at s[line] (its text at s[text], after its blanks), starts and ends, when
// it names a secret and is given one.
func namedValue(s string, line, text, i, j int, open bool) (start, end int, ok bool) {
	if !namesSecret(s[i:j]) {
		return 0, 0, false
	}
	return valueOf(s, line, text, i, j, open)
}

// valueOf returns where the value given to the name s[i:j] starts and ends, if
// it is given one.
func valueOf(s string, line, text, i, j int, open bool) (start, end int, ok bool) {
	name := s[i:j]
	before := byte(0)
	if i > 0 {
		before = s[i-1]
	}
	if before == '/' || before == '\\' && (i < 2 || !isQuote(s[i-2])) {
		return 0, 0, false // a path's component
	}
	if before == '\\' {
		before = s[i-2] // in JSON written into a string: {\"password\":\"…\"}
	}
	// What comes before the name on its line, when it is short enough to be a
	// list's '-', a quote, "export " or curl -v's '>' or '<'; an indent as long.
	lineStart := i-text <= 16 && atLineStart(s[text:i])
	k := j
	if k+1 < len(s) && s[k] == '\\' && isQuote(s[k+1]) {
		k++
	}
	quoted := isQuote(before) && k < len(s) && s[k] == before
	if quoted {
		k++
	}
	if (before == '<' || before == ':' && openedTag(s, i-1)) && k < len(s) {
		// XML: <password>value</password>, to the text's end with no tag after it;
		// with attributes, or a namespace's prefix (<wsse:Password Type="…">, a
		// SOAP request's), after them.
		switch s[k] {
		case '>':
			return elementValue(s, k+1)
		case ' ', '\t':
			// Its attributes first (hideNamed: the element's text waits for
			// them, as a pair's does).
			return 0, 0, false
		}
	}
	spaced := skipBlanks(s, k)
	sep := ""
	for _, op := range operators {
		if strings.HasPrefix(s[spaced:], op) {
			sep = op
			break
		}
	}
	if sep == "" {
		// A command's flag: --password VALUE (not a help line's -token string).
		if strings.HasPrefix(name, "-") && spaced > k && spaced < len(s) && s[spaced] != '-' && s[spaced] != '\n' && s[spaced] != '\r' && !hiddenAt(s, spaced) {
			if isQuote(s[spaced]) {
				return spaced, quotedEnd(s, spaced), true
			}
			e := wordEnd(s, spaced)
			if w := s[spaced:e]; slices.Contains(placeholders, w) || w == strings.ToUpper(strings.ReplaceAll(strings.TrimLeft(name, "-"), "-", "_")) {
				return 0, 0, false // a help line's -token string, a usage's [--api-key API_KEY]
			}
			return spaced, e, e > spaced
		}
		return 0, 0, false
	}
	v := skipBlanks(s, spaced+len(sep))
	if hiddenAt(s, v) {
		return 0, 0, false
	}
	scheme := 0
	if v < len(s) && (s[v] == 'b' || s[v] == 'B' || s[v] == 't' || s[v] == 'T') {
		scheme = schemeWord(s[v:]) // Authorization: Bearer VALUE
	}
	head := strings.TrimRight(s[line:i], " \t")
	inMap := strings.HasSuffix(head, "{") || strings.HasSuffix(head, ",")
	if sep == ":" && v > spaced+1 && !lineStart && !quoted && !inMap && !isQuote(before) && scheme == 0 && v < len(s) && !isQuote(s[v]) {
		return 0, 0, false // "the token: expired", a sentence
	}
	if scheme > 0 {
		v = skipBlanks(s, v+scheme)
	}
	switch {
	case v >= len(s) || s[v] == '\n' || s[v] == '\r' || lineStart && isBlockIndicator(s[v:lineEnd(s, v)]):
		// YAML: the value on the lines below, more indented than the name (a
		// list item's key by its column), hidden from its first character: the
		// lines' breaks before it kept, a text hidden again is read the same.
		from := lineEnd(s, v)
		first := skipSpace(s, from)
		if first >= len(s) || hiddenAt(s, first) {
			return 0, 0, false
		}
		indent, listed := text-line, strings.HasPrefix(s[text:i], "- ")
		if listed {
			indent = i - line - 1 // at the key's column or past it
		}
		e := indentedBelow(s, indent, !listed, from)
		return first, e, e > first
	case s[v] == '\\' && v+1 < len(s) && isQuote(s[v+1]):
		return v, escapedQuotedEnd(s, v), true
	case s[v] == '$' && v+1 < len(s) && s[v+1] == '\'':
		return v, ansiQuotedEnd(s, v+1), true // a shell's $'…', as set -x writes a control character
	case isQuote(s[v]):
		return v, quotedEnd(s, v), true
	case s[v] == '<':
		return v, closing(s, v, '>'), true
	case s[v] == '[':
		return v, closing(s, v, ']'), true
	case isQuote(before) && !quoted && (sep != ":" || hasSuffixFold(name, "cookie") || hasSuffixFold(name, "authorization")):
		// The quote opens before the name and wraps the pair: 'DB_PASSWORD=a b'
		// (set -x), "DB_PASSWORD=a b" (a unit's Environment=, docker run -e,
		// docker inspect's Env), "--password=a b", a header's "Cookie: a=b;
		// sid=c": to its closing quote (a security review: to the first blank, the
		// rest was kept). Not a message's "token: signature is invalid" (a second
		// review: the diagnostic was lost), nor a quote that does not close near.
		esc := i >= 2 && s[i-1] == before && s[i-2] == '\\'
		ansi := before == '\'' && i >= 2 && s[i-2] == '$'
		// A header's value runs on past any bound (a third review: a Cookie
		// header's session past 256 bytes was kept).
		header := hasSuffixFold(name, "cookie") || hasSuffixFold(name, "authorization")
		if e := wrappedEnd(s, v, before, esc, ansi, header); e >= 0 {
			return v, e, e > v
		}
	case before == ';' || strings.Contains(s[max(line, i-64):i], ";"):
		return v, connEnd(s, v), connEnd(s, v) > v // a connection string: Password=VALUE;
	case lineStart && !quoted:
		return v, lineEnd(s, v), true // INI, YAML, an environment: the whole line
	case connFollows(s, v, open):
		return v, connEnd(s, v), connEnd(s, v) > v // one whose secret comes first: Password=a b;Server=x
	}
	return v, wordEnd(s, v), wordEnd(s, v) > v
}

// connEnd is the end of a connection string's value starting at s[v]: its ';', or
// its line's end.
func connEnd(s string, v int) int {
	e := v
	for e < len(s) && s[e] != ';' && s[e] != '\n' && s[e] != '\r' {
		e++
	}
	return e
}

// connFollows reports whether the value at s[v] is a connection string's: a ';'
// follows on its line within connLook bytes, then a name and '='; or, in a text
// that goes on past its end (open), the text ends before that can be told (a
// second review found the first part redactKept hides hiding less than the
// whole).
func connFollows(s string, v int, open bool) bool {
	e := v
	for e < len(s) && e < v+connLook && s[e] != ';' && s[e] != '\n' && s[e] != '\r' {
		e++
	}
	switch {
	case e >= len(s):
		return open
	case s[e] != ';':
		return false
	}
	n := skipBlanks(s, e+1)
	k := n
	for k < len(s) && k < n+64 && (isNameByte(s[k]) || s[k] == ' ') {
		k++
	}
	return k >= len(s) && open || k > n && k < len(s) && s[k] == '='
}

// connLook bounds the look for a connection string's ';' after a value (looked
// for at every name, to the line's end, it would be quadratic on a long line).
const connLook = 256

// wrappedEnd is the end of a value starting at s[v] inside a quote q that opened
// before its name: that quote's close (escaped as \q when the quote before the name
// was; a backslash escapes one inside double quotes, or inside a shell's $'…'
// (ansi); two single quotes, and a shell's quote-backslash-quote-quote, go on
// inside single quotes, as YAML and a shell write a quote), or its line's end, or the text's (the safe side for a text cut short:
// redactKept). -1 when the quote does not close within wrapLook bytes (unless
// unbounded): an apostrophe, not a wrapper.
func wrappedEnd(s string, v int, q byte, escaped, ansi, unbounded bool) int {
	for k := v; k < len(s); k++ {
		switch {
		case k-v > wrapLook && !unbounded:
			return -1
		case s[k] == '\n' || s[k] == '\r':
			return k
		case escaped && s[k] == '\\' && k+1 < len(s) && s[k+1] == q:
			return k
		case escaped:
		case s[k] == '\\' && (q == '"' || ansi) && k+1 < len(s) && s[k+1] != '\n':
			k++
		case s[k] == q && q == '\'' && !ansi && k+1 < len(s) && s[k+1] == '\'':
			k++
		case s[k] == q && q == '\'' && !ansi && strings.HasPrefix(s[k+1:], `\''`):
			k += 3
		case s[k] == q:
			return k
		}
	}
	return len(s)
}

// wrapLook bounds how far a wrapping quote's close is looked for (wrappedEnd).
const wrapLook = 256

// ansiQuotedEnd is the end of a shell's $'…' value whose quote is at s[i]: its
// closing quote included (a backslash escapes any byte, \' among them), or its
// line's.
func ansiQuotedEnd(s string, i int) int {
	for k := i + 1; k < len(s); k++ {
		switch {
		case s[k] == '\\' && k+1 < len(s) && s[k+1] != '\n':
			k++
		case s[k] == '\'':
			return k + 1
		case s[k] == '\n' || s[k] == '\r':
			return k
		}
	}
	return len(s)
}

// openedTag reports whether the name ending at s[c], a ':', is a tag's namespace
// prefix: '<' and a name before it.
func openedTag(s string, c int) bool {
	k := c
	for k > 0 && c-k < 32 && isNameByte(s[k-1]) {
		k--
	}
	return k < c && k > 0 && s[k-1] == '<'
}

// elementValue returns where the text of an element that starts at s[v] starts
// and ends: to the next tag, or inside a CDATA section (after blanks and line
// breaks, as pretty-printed XML writes it) to its end, within cdataLook, else
// its line's end, or the text's when that comes first (the safe side for a text
// cut short: redactKept).
func elementValue(s string, v int) (start, end int, ok bool) {
	if c := skipSpace(s, v); strings.HasPrefix(s[c:], cdataOpen) {
		v = c + len(cdataOpen)
		if hiddenAt(s, v) {
			return 0, 0, false
		}
		look := min(len(s), v+cdataLook)
		e := strings.Index(s[v:look], "]]>")
		switch {
		case e >= 0:
		case look == len(s):
			e = len(s) - v
		default:
			e = lineEnd(s, v) - v
		}
		return v, v + e, e > 0
	}
	if hiddenAt(s, skipSpace(s, v)) {
		return 0, 0, false
	}
	e := strings.IndexByte(s[v:], '<')
	if e < 0 {
		e = len(s) - v
	}
	return v, v + e, e > 0
}

// cdataOpen starts an XML CDATA section; cdataLook bounds the look for its end
// (an unbounded one for each of many opened, never closed, is quadratic).
const (
	cdataOpen = "<![CDATA["
	cdataLook = 1024
)

// pairMark returns until where the value a pair names a secret by is looked
// for, when the name or key ending at s[j] is given a secret's name: Kubernetes
// (`- name: DB_PASSWORD` then `value: …`), .NET and Java configuration (`<add
// key="Password" value="…"/>`), JSON and AWS listings (`{"Name":
// "/app/db/password", "Value": …}`, CloudFormation's ParameterKey and
// ParameterValue) write it so (a third review). The scan goes on from the name's
// value: what lies between is read as everywhere (a fourth review: jumping to the
// value skipped a secret written before it). -1 when there is none.
func pairMark(s string, j int) (until, at int) {
	k := j
	if k+1 < len(s) && s[k] == '\\' && isQuote(s[k+1]) {
		k++
	}
	if k < len(s) && isQuote(s[k]) {
		k++
	}
	k = skipBlanks(s, k)
	if k >= len(s) || s[k] != '=' && s[k] != ':' {
		return -1, 0
	}
	v := skipBlanks(s, k+1)
	if v < len(s) && s[v] == '\\' {
		v++
	}
	quote := byte(0)
	if v < len(s) && isQuote(s[v]) {
		quote = s[v]
		v++
	}
	if hiddenAt(s, v) {
		// A value hidden, not a pair's name: "[secret hidden]" read as one on a
		// second pass hid what followed (api_key:x>y, found by FuzzSecrets).
		return -1, 0
	}
	// The name given, up to its quote or the word's end, at most 256 bytes.
	e := v
	for e < len(s) && e < v+256 && s[e] != '\n' && s[e] != '\r' && s[e] != '\\' && (quote != 0 && s[e] != quote || quote == 0 && !strings.ContainsRune(" \t,;}]=:", rune(s[e]))) {
		e++
	}
	for w := v; w < e; {
		if n := hiddenLen(s, w); n > 0 {
			w += n // a value hidden names nothing (FuzzSecrets: 0.key=>0>0)
			continue
		}
		if !isNameByte(s[w]) {
			w++
			continue
		}
		x := w
		for x < e && isNameByte(s[x]) {
			x++
		}
		if namesSecret(s[w:x]) {
			if quote != 0 && e < len(s) && s[e] == quote {
				e++ // the tag goes on past the name's closing quote
			}
			return e + 200, e
		}
		w = x
	}
	return -1, 0
}

// elementText returns where the text of the XML element whose tag goes on at
// s[at] starts and ends: after the tag's '>' (within 200 bytes, on its line, not
// a tag that closes itself; an attribute's quoted value read past), up to the
// next '<'. closed says the tag closed there, whether its text is one to hide
// (start < end) or not (hidden already, or none).
func elementText(s string, at int) (start, end int, closed bool) {
	for k := at; k < len(s) && k < at+200; k++ {
		if s[k] == '"' || s[k] == '\'' {
			// An attribute's value, read past whole: a '<' or '>' in it is
			// not the tag's (a fifth review: so it read once hidden).
			if q := strings.IndexByte(s[k+1:min(len(s), at+200)], s[k]); q >= 0 {
				k += q + 1
				continue
			}
		}
		switch s[k] {
		case '<', '\n', '\r':
			return 0, 0, false
		case '>':
			if s[k-1] == '/' || k+1 >= len(s) {
				return 0, 0, false
			}
			// Its text, or a CDATA section's (a second review: a tag's
			// attributes then CDATA, <wsse:Password Type="…"><![CDATA[…]]>,
			// was read as an element without text).
			start, end, _ := elementValue(s, k+1)
			return start, end, true
		}
	}
	return 0, 0, false
}

// hasSuffixFold reports whether s ends with suffix, in any case.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// hiddenAt reports whether s[i:] starts with what stands in for a hidden secret:
// hiding again what was hidden changes nothing (the control plane hides again
// what an agent hid).
func hiddenAt(s string, i int) bool { return hiddenLen(s, i) > 0 }

// hiddenLen is the length of what stands in for a hidden secret at s[i], or 0.
func hiddenLen(s string, i int) int {
	switch {
	case strings.HasPrefix(s[i:], Hidden):
		return len(Hidden)
	case strings.HasPrefix(s[i:], token.HiddenToken):
		return len(token.HiddenToken)
	}
	return 0
}

// atLineStart reports whether head, what comes before a name on its line after
// its blanks, is only a list's '-', a quote, "export ", or the '>' or '<' curl -v
// marks a header it sends or receives with.
func atLineStart(head string) bool {
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
// A tag's '<' and '>' (and "/>") end it too: hidden with the value, the tag read
// another way once hidden (a fifth review).
func wordEnd(s string, i int) int {
	for i < len(s) && !strings.ContainsRune(" \t\r\n;\"'`})]<>", rune(s[i])) && !strings.HasPrefix(s[i:], "/>") {
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
		case s[k] == q && q == '\'' && k+1 < len(s) && s[k+1] == '\'':
			k++ // YAML's '' in single quotes, a shell's '…''…': one value
		case s[k] == q && q == '\'' && strings.HasPrefix(s[k+1:], `\''`):
			k += 3 // a shell's '\'' (set -x writes a quote in a value so)
		case s[k] == q:
			return k + 1
		case s[k] == '\n':
			return k
		}
	}
	return len(s)
}

// closing is the end of the value s[i:] written up to c, included, or its line's:
// read only as far as that (to its line's end for every value, it was quadratic
// on a line of `token=<>`, a third review).
func closing(s string, i int, c byte) int {
	for k := i + 1; k < len(s); k++ {
		switch s[k] {
		case c:
			return k + 1
		case '\n', '\r':
			return k
		}
	}
	return len(s)
}

// skipSpace is the index of the first character at or after s[i] that is not a
// blank or a line break.
func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// escapedQuotedEnd is the end of a value written in escaped quotes (\"…\", JSON
// inside a string), its closing pair included, or of its line.
func escapedQuotedEnd(s string, i int) int {
	q := s[i+1]
	for k := i + 2; k+1 < len(s); k++ {
		switch {
		case s[k] == '\\' && s[k+1] == q:
			return k + 2
		case s[k] == '\n' || s[k] == '\r':
			return k
		}
	}
	return len(s)
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

// indentedBelow is the end of the lines after from that are indented past
// indent, or from when there is none: a YAML value under its name. A blank line
// inside it is looked past, and, when list is set, a list at indent itself (YAML
// lets a key's list sit at the key's indentation); a line ends at "\r\n", '\n'
// or '\r'.
func indentedBelow(s string, indent int, list bool, from int) int {
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
		case at > indent, list && at == indent && strings.HasPrefix(trimmed, "- "):
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
