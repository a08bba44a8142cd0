// Package redact hides the secrets a free text may hold before it leaves the
// machine: a failing hook's output, reported in the node's status, is kept in the
// control plane's replicated state and shown to every operator. Tokens, nkey seeds
// and PEM private keys are recognised; a secret of another form a hook prints is
// not (security.md says so).
package redact

import (
	"regexp"
	"strings"

	"mesh/host/token"
)

// Hidden replaces each secret Secrets hides.
const Hidden = "[secret hidden]"

// seed is an nkey seed: 'S', the key's type, and 56 more base32 characters
// (nkeys' encoding of a prefix, the 32-byte seed and a checksum).
var seed = regexp.MustCompile(`\bS[ACNOPUX][A-Z2-7]{56}\b`)

// privateKey is a PEM private key block, whatever its algorithm; one cut short
// (the end of a hook's output is kept, or its start) is hidden to where it stops.
var privateKey = regexp.MustCompile(`(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)`)

// Secrets returns s with every token (token.HideTokens), nkey seed and PEM private
// key in it hidden.
func Secrets(s string) string {
	s = token.HideTokens(s)
	if strings.Contains(s, "PRIVATE KEY-----") {
		s = privateKey.ReplaceAllLiteralString(s, Hidden)
	}
	return seed.ReplaceAllLiteralString(s, Hidden)
}
