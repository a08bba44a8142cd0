package token

import (
	"crypto/ed25519"
	"errors"
	"hash/crc32"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// lastExpiry is 9999-12-31T23:59:59Z, the latest expiry the format allows.
const lastExpiry = 253402300799

// Parse reads a pasted token. Leading and trailing whitespace is dropped; the rest must
// be exactly what meshctl minted. Checks run in this order, and the first failure is
// returned: empty (ErrEmpty); over MaxEncodedLen (ErrTooLong); a cut-off "mesh1_"
// (ErrTruncated); not "mesh<digits>_" (ErrNotToken); another version (*VersionError);
// fewer than ten fields (ErrTruncated) or more (*FieldError, crc); the checksum field
// cut short (ErrTruncated), not eight lowercase hex digits (*FieldError, crc), or not
// matching (ErrChecksum); then each field in order (*FieldError). When everything is
// well formed but now is not before the expiry, Parse returns the token together with
// an *ExpiredError.
//
// Parsing is offline: a bad token fails here, before any network call.
//
// The text read is Trim(s).
func Parse(s string, now time.Time) (Token, error) {
	s = Trim(s)
	if len(s) == 0 {
		return Token{}, ErrEmpty
	}
	if len(s) > MaxEncodedLen {
		return Token{}, &wrapped{cause: ErrTooLong, msg: "the input is " + strconv.Itoa(len(s)) + " bytes, over the " +
			strconv.Itoa(MaxEncodedLen) + " a join token can be: paste only the token line"}
	}
	if err := checkHead(s); err != nil {
		return Token{}, err
	}

	var f [nFields]string
	n := 0
	for rest, more := s, true; more; n++ {
		if n == nFields {
			return Token{}, &FieldError{Field: fieldName(iCRC), Reason: "the token has " + strconv.Itoa(strings.Count(s, "_")+1) +
				" fields separated by '_' instead of 10: there is text after the checksum, or an extra '_'; paste only the token line"}
		}
		f[n], rest, more = strings.Cut(rest, "_")
	}
	if n < nFields {
		return Token{}, &wrapped{cause: ErrTruncated, msg: "the token is truncated: it ends in the " + fieldName(n-1) +
			" field (field " + strconv.Itoa(n) + " of 10); copy the whole line again"}
	}

	if err := checkCRC(s, f[iCRC]); err != nil {
		return Token{}, err
	}

	var t Token
	for i := iMesh; i < iCRC; i++ {
		if reason := t.set(i, f[i]); reason != "" {
			fe := &FieldError{Field: fieldName(i), Reason: reason}
			// The checksum matched: the text is as it was made, and copying it
			// again will not change it.
			return Token{}, &wrapped{cause: fe, msg: fe.Error() + "; the checksum matches, so the token was made this way: ask the operator for a new one (meshctl token)"}
		}
	}
	if !now.Before(t.Expiry) {
		return t, &ExpiredError{Expiry: t.Expiry, Now: now}
	}
	return t, nil
}

// checkHead checks the "mesh<version>_" that starts every token.
func checkHead(s string) error {
	want := Prefix + strconv.Itoa(Version) + "_"
	if len(s) < len(want) && want[:len(s)] == s {
		return &wrapped{cause: ErrTruncated, msg: "the token is truncated: it ends inside its " + strconv.Quote(want) + " prefix; copy the whole line again"}
	}
	if !strings.HasPrefix(s, Prefix) {
		return notToken(s, want)
	}
	digits := s[len(Prefix):]
	end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
	// One to three digits, no leading zero, then '_'.
	if end < 1 || end > 3 || digits[end] != '_' || (end > 1 && digits[0] == '0') {
		return notToken(s, want)
	}
	v, _ := strconv.Atoi(digits[:end])
	if v != Version {
		return &VersionError{Got: v}
	}
	return nil
}

// notToken is ErrNotToken for s, which does not start with head. When head comes
// later in s, a whole token may have been pasted with what was around it (quotes or
// backticks, MESH_TOKEN=, a shell prompt's line, a zero-width space copied from a
// web page), which "a join token starts with mesh1_" does not explain: the person
// sees a token that starts so. It is still refused (a token has one way of being
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
	what := strconv.Itoa(n) + " characters come"
	switch {
	case n == 1 && hidden == 1:
		what = "1 invisible character comes"
	case n == 1:
		what = "1 character comes"
	case hidden == n:
		what = strconv.Itoa(n) + " invisible characters come"
	case hidden > 0:
		what = strconv.Itoa(n) + " characters, " + strconv.Itoa(hidden) + " of them invisible, come"
	}
	return &wrapped{cause: ErrNotToken, msg: "this is not a mesh join token as given: " + what + " before " + head +
		", where a join token starts; paste the token alone, without what was copied with it (a quote, a shell prompt, MESH_TOKEN=, an invisible character)"}
}

// splitCRC reports whether the checksum field crc has white space inside and is
// otherwise up to 8 lowercase hex digits: a line break that a terminal or a mail
// client put in the token's last characters, which deserves the advice a break in
// any other field gets, not "paste only the token line" (text after the token).
func splitCRC(crc string) bool {
	if !strings.ContainsFunc(crc, unicode.IsSpace) {
		return false
	}
	joined := strings.Join(strings.Fields(crc), "")
	return len(joined) > 0 && len(joined) <= 8 && allLowerHex(joined)
}

// checkCRC checks the last field against the CRC-32C of everything before it.
func checkCRC(s, crc string) error {
	if splitCRC(crc) {
		return &FieldError{Field: fieldName(iCRC), Reason: "the checksum has a space or line break inside: the token was split when copied; paste it as one line"}
	}
	if len(crc) < 8 && allLowerHex(crc) {
		return &wrapped{cause: ErrTruncated, msg: "the token is truncated: its checksum has " + strconv.Itoa(len(crc)) + " of 8 digits; copy the whole line again"}
	}
	if len(crc) != 8 || !allLowerHex(crc) {
		return &FieldError{Field: fieldName(iCRC), Reason: "the checksum must be 8 lowercase hex digits; paste only the token line"}
	}
	signed := s[:len(s)-9]
	sum := crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli))
	got, _ := strconv.ParseUint(crc, 16, 32)
	if uint32(got) == sum {
		return nil
	}
	if strings.IndexFunc(signed, unicode.IsSpace) >= 0 {
		return &wrapped{cause: ErrChecksum, msg: "the token does not match its checksum and has a space or line break inside: it was split when copied; paste it as one line"}
	}
	return ErrChecksum
}

// set parses field i from text into t and returns what is wrong with it, or "".
func (t *Token) set(i int, text string) string {
	switch i {
	case iMesh:
		t.Mesh = text
		return idFault("mesh", text)
	case iBrokers:
		var reason string
		t.Brokers, reason = readBrokers(text)
		return reason
	case iCAPin:
		return read32(&t.CAPin, text)
	case iSigningKey:
		var k [32]byte
		if reason := read32(&k, text); reason != "" {
			return reason
		}
		t.SigningKey = ed25519.PublicKey(k[:])
	case iNode:
		t.Node = text
		return idFault("node", text)
	case iRole:
		t.Role = Role(text)
		return roleFault(t.Role)
	case iExpiry:
		var reason string
		t.Expiry, reason = readExpiry(text)
		return reason
	case iSecret:
		return read32(&t.Secret, text)
	}
	return ""
}

// idFault says what keeps s from being a mesh or node id: 1 to 63 of a-z, 0-9, '-',
// starting and ending with a letter or digit.
func idFault(what, s string) string {
	const rule = "; ids are 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
	if s == "" {
		return "the " + what + " id is empty" + rule
	}
	if len(s) > 63 {
		return "the " + what + " id is longer than 63 characters" + rule
	}
	for i, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(s)-1 {
				return "the " + what + " id starts or ends with '-'" + rule
			}
		default:
			return "the " + what + " id has a character other than a-z, 0-9 or '-' at position " + strconv.Itoa(i+1) + rule
		}
	}
	return ""
}

func roleFault(r Role) string {
	if r == RoleWorker || r == RoleControl {
		return ""
	}
	return `the role must be "worker" or "control" (lowercase)`
}

// readBrokers reads the comma-separated ip:port list.
func readBrokers(s string) ([]netip.AddrPort, string) {
	if s == "" {
		return nil, "there is no broker address"
	}
	count := strings.Count(s, ",") + 1
	if count > MaxBrokers {
		return nil, "there are " + strconv.Itoa(count) + " broker addresses, more than " + strconv.Itoa(MaxBrokers)
	}
	list := make([]netip.AddrPort, 0, count)
	for n, item := range strings.Split(s, ",") {
		at := "broker address " + strconv.Itoa(n+1)
		if item == "" {
			return nil, at + " is empty (a stray comma)"
		}
		ap, fault := parseBroker(item)
		if fault != "" {
			return nil, at + " " + fault
		}
		if ap.String() != item {
			return nil, at + " is not written in canonical form (lowercase, shortest IPv6 form, no leading zeros in the port)"
		}
		for k, seen := range list {
			if seen == ap {
				return nil, at + " repeats broker address " + strconv.Itoa(k+1)
			}
		}
		list = append(list, ap)
	}
	return list, ""
}

// ParseBroker reads one broker address as a token lists it, ip:port, and refuses
// what a token refuses: a host name, an IPv6 zone, port 0, an IPv4-mapped IPv6, an
// unspecified or a multicast address (none is an address to dial a broker at).
// Unlike a token, it takes any form netip reads and returns it canonical. Its error
// matches ErrBadBroker and never quotes s, which may hold a token pasted there.
func ParseBroker(s string) (netip.AddrPort, error) {
	ap, fault := parseBroker(s)
	if fault != "" {
		return netip.AddrPort{}, &wrapped{cause: ErrBadBroker, msg: "the broker address " + fault}
	}
	return ap, nil
}

// parseBroker reads ip:port and says why it is not a broker address, or returns "".
func parseBroker(s string) (netip.AddrPort, string) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, "is not ip:port (a numeric IPv4 address, or an IPv6 address in brackets, then a port); host names are not accepted"
	}
	return ap, addrFault(ap)
}

// addrFault says why ap is not an address to dial a broker at, or returns "".
func addrFault(ap netip.AddrPort) string {
	ip := ap.Addr()
	if !ip.IsValid() {
		return "is not set"
	}
	if ip.Zone() != "" {
		return "has an IPv6 zone, which means nothing on another machine"
	}
	if ap.Port() == 0 {
		return "has port 0"
	}
	if ip.Is4In6() {
		return "is an IPv4-mapped IPv6 address: it must be written as plain IPv4"
	}
	if ip.IsUnspecified() {
		return "is an unspecified address (0.0.0.0 or ::), where a server listens, not where to connect"
	}
	if ip.IsMulticast() {
		return "is a multicast address"
	}
	return ""
}

// read32 reads 64 lowercase hex digits into dst. All zeros is refused: no real pin,
// key or secret is zero, and a zero value means something was never set.
func read32(dst *[32]byte, s string) string {
	if len(s) != 64 {
		return "it has " + strconv.Itoa(len(s)) + " characters; it must be 64 lowercase hex digits"
	}
	var out [32]byte
	var or byte
	for i := 0; i < 64; i++ {
		v, fault := nibble(s[i])
		if fault != "" {
			return fault
		}
		out[i/2] |= v << (4 * (1 - i%2))
		or |= v
	}
	if or == 0 {
		return "it is all zeros, which is never a real value"
	}
	*dst = out
	return ""
}

func nibble(c byte) (byte, string) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', ""
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, ""
	case c >= 'A' && c <= 'F':
		return 0, "it has uppercase hex digits; tokens are written in lowercase"
	}
	return 0, "it has a character that is not a hex digit; it must be 64 lowercase hex digits"
}

func allLowerHex(s string) bool {
	for _, c := range []byte(s) {
		if _, fault := nibble(c); fault != "" {
			return false
		}
	}
	return true
}

// readExpiry reads unix seconds written as plain decimal digits.
func readExpiry(s string) (time.Time, string) {
	if s == "" {
		return time.Time{}, "it is empty; it must be a time in unix seconds"
	}
	if strings.Trim(s, "0123456789") != "" {
		return time.Time{}, "it must be a time in unix seconds, written with the digits 0-9 only"
	}
	if s[0] == '0' && len(s) > 1 {
		return time.Time{}, "it has a leading zero"
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec > lastExpiry {
		return time.Time{}, "it is after the year 9999"
	}
	return time.Unix(sec, 0).UTC(), ""
}

// Trim returns the token text Parse reads of s: without the white space around it,
// nor a UTF-8 byte order mark before it (a token saved by an editor that writes one
// was "not a mesh join token").
func Trim(s string) string {
	return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "\uFEFF"))
}

// CutShort reports whether s is the start of a token, cut short (ErrTruncated):
// the first line of a wrapped token whose next line is still to come, to a
// reader of a paste.
func CutShort(s string) bool {
	_, err := Parse(s, time.Time{})
	return errors.Is(err, ErrTruncated)
}
