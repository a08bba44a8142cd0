// Package redact hides the secrets a free text may hold before it leaves the
// machine: a failing hook's output, reported in the node's status, is kept in the
// control plane's replicated state and shown to every operator. Tokens, nkey seeds,
// PEM private keys, the value given to a name of a password, secret, token or key
// (DB_PASSWORD=…, "api_key": "…", secret: …), a password given to a command's
// flag that names none (mysql -p…, curl -u user:…: commands.go) and the password
// in a URL are recognised; a secret of another form a hook prints is not
// (security.md says so).
package redact

import (
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"mesh/host/token"
)

// Hidden replaces each secret Secrets hides.
const Hidden = "[secret hidden]"

// seed is an nkey seed: 'S', the key's type, and 56 more base32 characters
// (nkeys' encoding of a prefix, the 32-byte seed and a checksum).
var seed = regexp.MustCompile(`\bS[ACNOPUX][A-Z2-7]{56}\b`)

// privateKey is a PEM private key block, whatever its algorithm; one whose end is
// cut off (a text that stops inside it) is hidden from its BEGIN line to the end.
// One whose start is cut off has no BEGIN line: CutSecrets.
var privateKey = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`)

// privateKeyEnd is the END line of a PEM private key block.
var privateKeyEnd = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)

// Secrets returns s with every token (token.HideTokens), nkey seed, PEM private
// key, value given to a secret's name and password of a URL in it hidden (see
// named.go). A key's BEGIN line is hidden first: taken as a value, its body would
// be left for no pattern.
func Secrets(s string) string { return secrets(s, false) }

// SecretsOfStart is Secrets for the start of a longer text, cut at a blank: a
// value whose end cannot be told before the cut (a connection string's, whose ';'
// may come after it) is hidden to the cut, so that what it hides of the start is
// at least what Secrets hides of the whole there (the control plane's redactKept).
func SecretsOfStart(s string) string { return secrets(s, true) }

func secrets(s string, open bool) string {
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = privateKey.ReplaceAllLiteralString(s, Hidden)
	}
	s = seed.ReplaceAllLiteralString(s, Hidden)
	s = hideNamed(s, open)
	s = hideCommandPasswords(s)
	s = token.HideTokens(s)
	return hideURLPasswords(s)
}

// CutSecrets is Secrets for a text whose start was cut off (the end of a long
// output, as a failing hook's is kept): a private key whose BEGIN line was cut off
// is known only by its END line, so everything from the text's start to the first
// END PRIVATE KEY line is hidden, with it. Before, only a BEGIN line was looked
// for: a key longer than about 4 KiB (RSA of 6,144 bits or more) whose BEGIN line
// fell before what a hook's output keeps, and whose END line within the last
// 4 KiB of it, was reported in the clear (a reviewer's audit, 2026-12). What comes
// before that END line in the text may be words of the output's, not the key's:
// they are hidden too, the safe side. A key whose BEGIN and END lines were both
// cut off (one longer than the whole text, 8 KiB for a hook's output: an RSA key
// of 16,384 bits) is not recognised.
func CutSecrets(s string) string {
	if strings.Contains(s, "PRIVATE KEY-----") {
		if end := privateKeyEnd.FindStringIndex(s); end != nil {
			s = Hidden + s[end[1]:]
		}
	}
	return Secrets(s)
}

// Redacted stands in for a secret wherever a value that holds one is printed.
const Redacted = "<redacted>"

// IfSet is what a printed value shows for one of its secrets: Redacted when it is
// set, nothing when it is not.
func IfSet[S ~string | ~[]byte](s S) string {
	if len(s) == 0 {
		return ""
	}
	return Redacted
}

// Format is the fmt.Formatter of a type that holds a secret, given its redacted
// String and GoString and its name as %!verb(name=…) says it: every verb prints
// the redacted form. Without a Formatter, %d or %x print the fields, the secret
// included, even of a value held in another struct.
func Format(f fmt.State, verb rune, name, str, goStr string) {
	var s string
	switch {
	case verb == 'v' && f.Flag('#'):
		s = goStr
	case verb == 'v' || verb == 's':
		s = str
	case verb == 'q':
		s = strconv.Quote(str)
	default:
		s = "%!" + string(verb) + "(" + name + "=" + str + ")"
	}
	io.WriteString(f, s)
}
