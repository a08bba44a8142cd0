package main

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// shown returns s as a terminal shows it, as it is: line breaks and tabs are kept (a
// hook's output has lines); other control characters (an escape sequence's ESC, a
// carriage return that writes over the line), the characters that reorder text or
// separate lines, and invalid UTF-8 are written as Go escapes (\x1b, \r, \u202e,
// \ufffd). A failed hook's output, and whatever the commands it ran printed, reach
// meshhost status and meshhost's errors: none of it may drive the operator's
// terminal or hide what stands before it.
func shown(s string) string {
	if !strings.ContainsFunc(s, hidden) && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\ufffd`)
		case hidden(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// hidden reports whether r acts on a terminal instead of showing itself, line breaks
// and tabs apart.
func hidden(r rune) bool {
	if r == '\n' || r == '\t' {
		return false
	}
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
