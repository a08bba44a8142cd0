package tokenfmt

import "strings"

// hiddenToken stands in for a token's text in messages.
const hiddenToken = "<a token: not shown>"

// hideMinLen is the shortest text after the "mesh<version>_" head that HideTokens
// hides: shorter, it is a word in a message ("starts with mesh1_"), not a token.
const hideMinLen = 16

// HideTokens returns s with every run that looks like a token (Prefix, a version,
// '_', and at least hideMinLen more characters up to a space or a quote) replaced,
// for messages that echo what a person typed: a token pasted as an argument must
// not reach a terminal's scrollback or a journal, its secret with it.
func HideTokens(s string) string {
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
		for end < len(rest) && !strings.ContainsRune(" \t\r\n\"'`", rune(rest[end])) {
			end++
		}
		b.WriteString(rest[:i])
		if end-(j+1) >= hideMinLen {
			b.WriteString(hiddenToken)
		} else {
			b.WriteString(rest[i:end])
		}
		rest = rest[end:]
	}
}
