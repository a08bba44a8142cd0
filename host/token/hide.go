package token

import (
	"strings"
	"unicode"
)

// HiddenToken stands in for a token's text in messages.
const HiddenToken = "<a token: not shown>"

// hideMinLen is the shortest text after the "mesh<version>_" head that HideTokens
// hides: shorter, it is a word in a message ("starts with mesh1_"), not a token.
const hideMinLen = 16

// separators end the runs of text HideTokens looks at: a token has none of them,
// and the messages that echo one quote it or set it apart with them.
const separators = " \t\r\n\"'`"

// HideTokens returns s with every run that looks like a token, or like the end of
// one, replaced, for messages that echo what a person typed: a token pasted as an
// argument must not reach a terminal's scrollback or a journal, its secret with it.
// A run is text up to a space, a line break or a quote. It looks like a token from
// its head (Prefix, a version, '_', and at least hideMinLen more characters), and
// like the end of one when it holds the secret and the checksum that end every
// token ('_', 64 lowercase hex digits, '_', then up to 8 of them): the message of a
// parser that cut the token at a ':' or a ',' (net/netip's, quoting the port) holds
// that end without the head, and the whole run is hidden.
func HideTokens(s string) string {
	return hideTails(hideHeads(s))
}

// Contains reports whether HideTokens would hide part of s: s holds a token, or
// the end of one that carries its secret. A command line refuses such an argument
// instead of echoing it.
func Contains(s string) bool { return HideTokens(s) != s }

// InArgument reports whether a command-line argument holds a token or the end of
// one with its secret: a run Contains finds, and 64 hex digits in a row beside a
// '_', as a token's pin, signing key and secret each are (the field after each is
// '_'-separated). Contains alone refused paths, context names and labels that begin
// "mesh1_" (a review); without the '_', a path with a SHA-256 in it below such a
// directory (a second review). Hiding in a message may take more than a token; a
// refused argument stops an operator's command.
//
// The argument is read as argumentText says, and in lower case: a token a
// terminal or a mail client wrapped, given quoted, had each field split by a line
// break and passed, and a file-name error printed its lines (a review); one
// upper-cased holds the same secret. A token's end is the secret and the start of
// its checksum ('_', 64 hex digits, '_', a hex digit), whatever follows it.
func InArgument(arg string) bool {
	s := strings.ToLower(argumentText(arg))
	head := Contains(s)
	isHex := func(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' }
	for i := 0; i < len(s); {
		if !isHex(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isHex(s[j]) {
			j++
		}
		before, after := i > 0 && s[i-1] == '_', j < len(s) && s[j] == '_'
		if j-i >= 64 && (head && (before || after) || j-i == 64 && before && after && j+1 < len(s) && isHex(s[j+1])) {
			return true
		}
		i = j
	}
	return false
}

// argumentText is arg without what a copy puts inside a token: white space, the
// marks a mail reply or a chat quotes lines with ('>', '|', '#'), the characters
// that show as nothing (zero-width spaces and joiners, a soft hyphen, a byte order
// mark), and a line break's escape (a backslash or a quoted-printable '=' before
// it): a token wrapped and quoted so passed, each field split (two reviews).
func argumentText(arg string) string {
	var b strings.Builder
	for i, r := range arg {
		switch {
		case unicode.IsSpace(r), r == '>', r == '|', r == '#', r == '\u200b', r == '\u200c', r == '\u200d', r == '\u00ad', r == '\ufeff', r == '\u2060':
		case (r == '\\' || r == '=') && i+1 < len(arg) && (arg[i+1] == '\n' || arg[i+1] == '\r'):
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hideHeads hides the runs that start as a token does.
func hideHeads(s string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, Prefix)
		if i < 0 {
			if b.Len() == 0 {
				return s
			}
			b.WriteString(rest)
			return b.String()
		}
		j := i + len(Prefix)
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j == i+len(Prefix) || j >= len(rest) || rest[j] != '_' {
			b.WriteString(rest[:j])
			rest = rest[j:]
			continue
		}
		end := j + 1
		for end < len(rest) && !strings.ContainsRune(separators, rune(rest[end])) {
			end++
		}
		b.WriteString(rest[:i])
		if end-(j+1) >= hideMinLen {
			b.WriteString(HiddenToken)
		} else {
			b.WriteString(rest[i:end])
		}
		rest = rest[end:]
	}
}

// hideTails hides the runs that hold a token's secret and checksum.
func hideTails(s string) string {
	if !strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	changed := false
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && !strings.ContainsRune(separators, rune(s[i])) {
			continue
		}
		if run := s[start:i]; hasTail(run) {
			b.WriteString(HiddenToken)
			changed = true
		} else {
			b.WriteString(run)
		}
		if i < len(s) {
			b.WriteByte(s[i])
		}
		start = i + 1
	}
	if !changed {
		return s
	}
	return b.String()
}

// hasTail reports whether run holds '_', 64 lowercase hex digits, '_' and up to 8
// more (the secret and the checksum, which may be cut short), followed by no other
// letter, digit or '_': the end of a token, whatever was cut from its start.
func hasTail(run string) bool {
	for i := strings.IndexByte(run, '_'); i >= 0; {
		rest := run[i+1:]
		n := hexRun(rest)
		if n == 2*SecretSize && len(rest) > n && rest[n] == '_' {
			crc := hexRun(rest[n+1:])
			after := rest[n+1+crc:]
			if crc <= 8 && (after == "" || !isWordByte(after[0])) {
				return true
			}
		}
		next := strings.IndexByte(rest, '_')
		if next < 0 {
			return false
		}
		i += 1 + next
	}
	return false
}

// hexRun is how many lowercase hex digits s starts with.
func hexRun(s string) int {
	n := 0
	for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] >= 'a' && s[n] <= 'f') {
		n++
	}
	return n
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
