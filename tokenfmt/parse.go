package tokenfmt

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// maxExpiryUnix is 9999-12-31T23:59:59Z: later expiries cannot be written as RFC 3339
// and are not a lifetime anyone meant.
const maxExpiryUnix = 253402300799

// maxVersionDigits bounds the version number read from the prefix. A longer number is
// not a version anyone minted, and keeping it short keeps error texts free of
// arbitrary input.
const maxVersionDigits = 3

// Parse reads a token as pasted: surrounding whitespace (a trailing newline) is
// ignored, anything else must be exactly as minted. It checks, in this order, that
// the input is not empty (ErrEmpty) or too long (ErrTooLong), that it is a token of
// this kind (ErrTruncated for a cut-off prefix, ErrNotToken), its version
// (*VersionError), that it has all its fields (ErrTruncated), the checksum
// (*FieldError for the crc field, ErrTruncated, ErrChecksum), then every field in
// order (*FieldError). Non-canonical spellings (uppercase hex, leading zeros,
// uncompressed IPv6) are malformed, so Encode(Parse(x)) is Trim(x).
//
// Trim returns the token text Parse reads of s: without the white space around it,
// nor a UTF-8 byte order mark before it (a token saved by an editor that writes one
// was "not a mesh join token").
func Trim(s string) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "\uFEFF"))
}

// If the token is well formed but now is not before its expiry, Parse returns the
// token together with an *ExpiredError, so the caller can still say which node and
// mesh it was for.
func Parse(s string, now time.Time) (Token, error) {
	s = Trim(s)
	if s == "" {
		return Token{}, ErrEmpty
	}
	if len(s) > MaxEncodedLen {
		return Token{}, detail(ErrTooLong, "the input is %d bytes, more than the %d a token can be: paste only the one line that meshctl token printed", len(s), MaxEncodedLen)
	}
	head := Prefix + strconv.Itoa(Version) + "_"
	if len(s) < len(head) && strings.HasPrefix(head, s) {
		return Token{}, detail(ErrTruncated, "the token is truncated: it stops inside the %q prefix; copy the whole line again", head)
	}
	version, ok := readVersion(s)
	if !ok {
		return Token{}, notToken(s, head)
	}
	if version != Version {
		return Token{}, &VersionError{Got: version}
	}

	parts := strings.Split(s, "_")
	fields := Fields()
	switch {
	case len(parts) < numFields:
		return Token{}, detail(ErrTruncated, "the token is truncated: it stops in the %s field (field %d of %d); copy the whole line again", fields[len(parts)-1], len(parts), numFields)
	case len(parts) > numFields:
		return Token{}, &FieldError{Field: fieldCRC, Reason: fmt.Sprintf("the token has %d fields separated by '_' where %d are expected: there is text after the checksum, or an extra '_'; copy only the token line", len(parts), numFields)}
	}

	if err := checkCRC(s, parts[9]); err != nil {
		return Token{}, err
	}

	t, err := parseFields(parts)
	if err != nil {
		// The checksum matched, so the text is what was minted (or crafted): copying
		// it again will not help.
		return Token{}, &detailError{kind: err, msg: err.Error() + "; the checksum matches, so the token was made this way: mint a new one with meshctl token"}
	}
	if !now.Before(t.Expiry) {
		return t, &ExpiredError{Expiry: t.Expiry, Now: now}
	}
	return t, nil
}

// checkCRC checks the checksum field crc, the last of s, against everything before it.
func checkCRC(s, crc string) error {
	if splitCRC(crc) {
		return &FieldError{Field: fieldCRC, Reason: "the checksum has a space or line break inside: the token was split when copied; paste it as one line"}
	}
	if len(crc) < 8 && isLowerHex(crc) {
		return detail(ErrTruncated, "the token is truncated: the checksum at its end has %d of 8 digits; copy the whole line again", len(crc))
	}
	if len(crc) != 8 || !isLowerHex(crc) {
		return &FieldError{Field: fieldCRC, Reason: "the checksum must be 8 lowercase hex digits; copy only the token line"}
	}
	body := s[:len(s)-len(crc)-1]
	if checksum(body) != crc {
		if strings.ContainsFunc(body, unicode.IsSpace) {
			return detail(ErrChecksum, "the token's checksum does not match and the token contains a space or line break: it was split when copied; paste it as one line")
		}
		return ErrChecksum
	}
	return nil
}

// splitCRC reports whether the checksum field crc has white space inside and is
// otherwise up to 8 lowercase hex digits: a line break that a terminal or a mail
// client put in the token's last characters, which deserves the advice a break in
// any other field gets, not "copy only the token line" (text after the token).
func splitCRC(crc string) bool {
	if !strings.ContainsFunc(crc, unicode.IsSpace) {
		return false
	}
	joined := strings.Join(strings.Fields(crc), "")
	return joined != "" && len(joined) <= 8 && isLowerHex(joined)
}

// notToken is ErrNotToken for s, which does not start with head. When head comes
// later in s, a whole token may have been pasted with what was around it (quotes or
// backticks, MESH_TOKEN=, a shell prompt's line, a zero-width space copied from a
// web page), which "a token starts with mesh1_" does not explain: the person sees
// a token that starts so. It is still refused (a token has one way of being
// written, and cutting it out of the text around it would be a guess), but the
// message says how many characters come first, and how many of them cannot be seen.
// Nothing of s is quoted: it may hold the secret.
func notToken(s, head string) error {
	i := strings.Index(s, head)
	if i <= 0 {
		return ErrNotToken
	}
	n, hidden := 0, 0
	for _, r := range s[:i] {
		n++
		if !unicode.IsGraphic(r) && !unicode.IsSpace(r) {
			hidden++
		}
	}
	var what string
	switch {
	case n == 1 && hidden == 1:
		what = "1 invisible character comes"
	case n == 1:
		what = "1 character comes"
	case hidden == n:
		what = fmt.Sprintf("%d invisible characters come", n)
	case hidden > 0:
		what = fmt.Sprintf("%d characters, %d of them invisible, come", n, hidden)
	default:
		what = fmt.Sprintf("%d characters come", n)
	}
	return detail(ErrNotToken, "this is not a mesh join token as given: %s before %s, where a token starts; paste the token alone, without what was copied with it (a quote, a shell prompt, MESH_TOKEN=, an invisible character)", what, head)
}

// readVersion reads "mesh<digits>_" at the start of s.
func readVersion(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return 0, false
	}
	n := 0
	for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
		n++
	}
	if n == 0 || n > maxVersionDigits || n == len(rest) || rest[n] != '_' || (n > 1 && rest[0] == '0') {
		return 0, false
	}
	v, err := strconv.Atoi(rest[:n])
	return v, err == nil
}

// parseFields parses fields 1 to 8 (the version and crc are already checked).
func parseFields(p []string) (Token, error) {
	var t Token
	var err error
	t.Mesh = p[1]
	if err = ValidateMeshID(t.Mesh); err != nil {
		return Token{}, err
	}
	if t.Brokers, err = parseBrokers(p[2]); err != nil {
		return Token{}, err
	}
	if t.CAPin, err = parseKey(fieldCAPin, p[3]); err != nil {
		return Token{}, err
	}
	key, err := parseKey(fieldSigningKey, p[4])
	if err != nil {
		return Token{}, err
	}
	t.SigningKey = ed25519.PublicKey(key[:])
	t.Node = p[5]
	if err = ValidateNodeID(t.Node); err != nil {
		return Token{}, err
	}
	if t.Role, err = ParseRole(p[6]); err != nil {
		return Token{}, err
	}
	if t.Expiry, err = parseExpiry(p[7]); err != nil {
		return Token{}, err
	}
	if t.Secret, err = parseKey(fieldSecret, p[8]); err != nil {
		return Token{}, err
	}
	return t, nil
}

func parseBrokers(s string) ([]netip.AddrPort, error) {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: fieldBrokers, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return nil, bad("there is no broker address")
	}
	if n := strings.Count(s, ",") + 1; n > MaxBrokers {
		return nil, bad("there are %d broker addresses, more than %d", n, MaxBrokers)
	}
	list := strings.Split(s, ",")
	out := make([]netip.AddrPort, 0, len(list))
	for i, text := range list {
		if text == "" {
			return nil, bad("broker address %d is empty (a stray comma)", i+1)
		}
		ap, reason := addressProblem(text)
		if reason != "" {
			return nil, bad("broker address %d %s", i+1, reason)
		}
		for j, prev := range out {
			if prev == ap {
				return nil, bad("broker address %d repeats address %d", i+1, j+1)
			}
		}
		out = append(out, ap)
	}
	return out, nil
}

// CheckAddress refuses an address that a token could not carry as a broker's: not
// a numeric ip:port, or not written in canonical form, or one that means nothing
// to another machine (a zone, port 0, a wildcard or multicast address). The
// control plane holds a control token's addresses to it, as written by meshctl:
// they are listed to hosts as brokers, and compared with its members' as text.
//
// It refuses an IPv6 link-local address too, which no machine dials without the
// zone of its interface (hosts were told "unreachable, retrying may help"); tokens
// and identities that carry one, from before, are still read, since their other
// brokers work (a review: refused there, the agents of such a mesh did not start).
func CheckAddress(s string) error {
	ap, reason := addressProblem(s)
	if reason == "" && ap.Addr().Is6() && ap.Addr().IsLinkLocalUnicast() {
		reason = "is an IPv6 link-local address (fe80::/10), which no other machine dials without the zone of its interface, and a token carries none: give a global or unique local (fd00::/8) address"
	}
	if reason != "" {
		return fmt.Errorf("address %q %s", s, reason)
	}
	return nil
}

// addressProblem parses text as a broker address and describes why it cannot be
// one, or returns "".
func addressProblem(text string) (netip.AddrPort, string) {
	ap, err := netip.ParseAddrPort(text)
	if err != nil {
		return ap, "is not ip:port (a numeric IPv4 address, or an IPv6 address in brackets, then a port); host names are not accepted"
	}
	if reason := brokerProblem(ap); reason != "" {
		return ap, reason
	}
	if ap.String() != text {
		return ap, "is not written in canonical form (lowercase, shortest IPv6 form, no leading zeros in the port)"
	}
	return ap, ""
}

// CheckBroker says why ap cannot be a broker address a token names (one given
// beside a token, meshctl join --broker), as Parse refuses it in a token.
func CheckBroker(ap netip.AddrPort) error {
	if reason := brokerProblem(ap); reason != "" {
		return fmt.Errorf("the broker address %s %s", ap, reason)
	}
	return nil
}

// brokerProblem describes why ap cannot be a broker address, or returns "".
func brokerProblem(ap netip.AddrPort) string {
	a := ap.Addr()
	switch {
	case !a.IsValid():
		return "is not set"
	case a.Zone() != "":
		return "has an IPv6 zone, which means nothing on another machine"
	case ap.Port() == 0:
		return "has port 0"
	case a.Is4In6():
		return "is an IPv4-mapped IPv6 address: write it as plain IPv4"
	case a.IsUnspecified():
		return "is an unspecified address (0.0.0.0 or ::), which is where a server listens, not where to connect"
	case a.IsMulticast():
		return "is a multicast address"
	}
	return ""
}

// parseKey reads 64 lowercase hex digits into 32 bytes; an all-zero value is never
// one that was set on purpose.
func parseKey(field, s string) ([32]byte, error) {
	var out [32]byte
	if len(s) != 64 {
		return out, &FieldError{Field: field, Reason: fmt.Sprintf("it has %d characters; it must be 64 lowercase hex digits", len(s))}
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'F' {
			return out, &FieldError{Field: field, Reason: "it has uppercase hex digits; tokens are written in lowercase"}
		}
	}
	if _, err := hex.Decode(out[:], []byte(s)); err != nil {
		return [32]byte{}, &FieldError{Field: field, Reason: "it has a character that is not a hex digit; it must be 64 lowercase hex digits"}
	}
	if out == ([32]byte{}) {
		return out, &FieldError{Field: field, Reason: "it is all zeros, which is never a real value"}
	}
	return out, nil
}

func parseExpiry(s string) (time.Time, error) {
	bad := func(reason string) (time.Time, error) {
		return time.Time{}, &FieldError{Field: fieldExpiry, Reason: reason}
	}
	if s == "" {
		return bad("it is empty; it must be a time in unix seconds")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return bad("it must be a time in unix seconds, written with the digits 0-9 only")
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return bad("it has a leading zero")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxExpiryUnix {
		return bad("it is after the year 9999")
	}
	return time.Unix(n, 0).UTC(), nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checksum is the crc field for body: CRC-32 (Castagnoli) as 8 lowercase hex digits.
func checksum(body string) string {
	return fmt.Sprintf("%08x", crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
}

// CutShort reports whether s is the start of a token, cut short (ErrTruncated):
// the first line of a wrapped token whose next line is still to come, to a
// reader of a paste.
func CutShort(s string) bool {
	_, err := Parse(s, time.Time{})
	return errors.Is(err, ErrTruncated)
}
