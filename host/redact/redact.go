// Package redact hides the secrets a free text may hold before it leaves the
// machine: a failing hook's output, reported in the node's status, is kept in the
// control plane's replicated state and shown to every operator. Tokens, nkey seeds,
// PEM private keys, the value given to a name of a password, secret, token or key
// (DB_PASSWORD=…, "api_key": "…", secret: …) and the password in a URL are
// recognised; a secret of another form a hook prints is not (security.md says so).
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

// assignment is a value given to a name that says it is a secret, as a shell, an
// environment, a configuration file (INI, YAML, JSON) or a log line writes it: the
// name (its quote, if any), '=' or ':', then the value (after an HTTP scheme:
// "Authorization: Bearer …"), quoted or up to white space or punctuation that ends a
// value (a ',' may be a password's, and is hidden with it); one already hidden
// ("[secret hidden]", token.HiddenToken) is left. A service's failing start
// that prints its configuration reached every operator, the replicated state and
// every backup (a walkthrough: DB_PASSWORD=hunter2). The name's words, not the
// value's form, mark it: a word of a message followed by ':' ("token: expired")
// loses its next word, the safe side.
var assignment = regexp.MustCompile(`(?i)([a-z0-9_.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credentials?|authorization)[a-z0-9_.-]*["']?[ \t]*[=:][ \t]*)((?:bearer|basic|token)[ \t]+)?("[^"\n]*"|'[^'\n]*'|[^\s;"'}\]<\[][^\s;"'}\]]*)`)

// urlPassword is the password of a URL's user information (postgres://app:PW@db/x).
var urlPassword = regexp.MustCompile(`(?i)(\b[a-z][a-z0-9+.-]*://[^\s:/@]*:)([^\s@/]+)(@)`)

// Secrets returns s with every token (token.HideTokens), nkey seed, PEM private
// key, value given to a secret's name and password of a URL in it hidden.
//
// The order matters: a key's BEGIN line taken as a value would leave its body for
// no pattern. A token hidden reads token.HiddenToken, whose "token:" is a name: it
// is set apart while values are (the control plane hides again what an agent hid).
func Secrets(s string) string {
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = privateKey.ReplaceAllLiteralString(s, Hidden)
	}
	s = seed.ReplaceAllLiteralString(s, Hidden)
	s = token.HideTokens(s)
	const apart = "<\x01\x02>" // no name's word, and no value starts with '<'
	s = strings.ReplaceAll(s, token.HiddenToken, apart)
	s = assignment.ReplaceAllString(s, "${1}"+Hidden)
	s = strings.ReplaceAll(s, apart, token.HiddenToken)
	return urlPassword.ReplaceAllString(s, "${1}"+Hidden+"${3}")
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
