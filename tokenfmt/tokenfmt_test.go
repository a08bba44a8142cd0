package tokenfmt

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustAddrPort(t testing.TB, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// testOptions are valid mint options with a deterministic random source.
func testOptions(t testing.TB) MintOptions {
	pub, _, err := ed25519.GenerateKey(mrand.NewChaCha8([32]byte{1}))
	if err != nil {
		t.Fatal(err)
	}
	return MintOptions{
		Mesh:       "demo",
		Brokers:    []netip.AddrPort{mustAddrPort(t, "192.0.2.10:7300")},
		CAPin:      sha256.Sum256([]byte("ca")),
		SigningKey: pub,
		Node:       "web-1",
		TTL:        DefaultTTL,
		Now:        time.Unix(goldenNow, 0),
		Rand:       mrand.NewChaCha8([32]byte{2}),
	}
}

func mustMint(t testing.TB, o MintOptions) Token {
	t.Helper()
	tok, err := Mint(o)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestFieldOrder(t *testing.T) {
	want := []string{"version", "mesh", "brokers", "ca_pin", "signing_key", "node", "role", "expiry", "secret", "crc"}
	got := Fields()
	if !slices.Equal(got, want) {
		t.Fatalf("Fields() = %q; want %q", got, want)
	}
	got[0] = "changed"
	if Fields()[0] != "version" {
		t.Fatal("Fields() returns a shared slice")
	}
	// The encoded token has exactly one text field per name.
	if n := len(strings.Split(mustMint(t, testOptions(t)).Encode(), "_")); n != len(want) {
		t.Fatalf("an encoded token has %d fields; want %d", n, len(want))
	}
}

func TestValidateIDs(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"a", true}, {"0", true}, {"web-1", true}, {"a-b-c", true}, {strings.Repeat("x", 63), true},
		{"", false}, {strings.Repeat("x", 64), false}, {"-a", false}, {"a-", false}, {"-", false},
		{"A", false}, {"a_b", false}, {"a.b", false}, {"a b", false}, {"a*", false}, {"a>", false},
		{"é", false}, {"a\x00", false},
	} {
		for _, v := range []struct {
			name  string
			fn    func(string) error
			field string
		}{{"mesh", ValidateMeshID, "mesh"}, {"node", ValidateNodeID, "node"}} {
			err := v.fn(tc.id)
			if (err == nil) != tc.ok {
				t.Errorf("Validate%sID(%q) = %v; want ok=%v", v.name, tc.id, err, tc.ok)
				continue
			}
			if err != nil {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != v.field || !errors.Is(err, ErrMalformed) {
					t.Errorf("Validate%sID(%q) = %#v; want a *FieldError for %s", v.name, tc.id, err, v.field)
				}
			}
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"worker", "control"} {
		if r, err := ParseRole(s); err != nil || string(r) != s {
			t.Errorf("ParseRole(%q) = %q, %v", s, r, err)
		}
	}
	for _, s := range []string{"", "Worker", "CONTROL", "admin", " worker", "worker\n"} {
		var fe *FieldError
		if _, err := ParseRole(s); !errors.As(err, &fe) || fe.Field != "role" {
			t.Errorf("ParseRole(%q) error = %v; want a *FieldError for role", s, err)
		}
	}
}

func TestPinOf(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mesh CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := PinOf(cert), sha256.Sum256(spki); got != want {
		t.Errorf("PinOf = %x; want SHA-256 of the SPKI %x", got, want)
	}
	if got := PinOf(nil); got != ([32]byte{}) {
		t.Errorf("PinOf(nil) = %x; want zero", got)
	}
}

func TestMint(t *testing.T) {
	o := testOptions(t)
	secret := bytes.Repeat([]byte{0xab}, SecretSize)
	o.Rand = bytes.NewReader(append(secret, 0xcd)) // one byte left over: Mint reads exactly SecretSize
	o.Now = time.Unix(goldenNow, 999_999_999)      // expiry rounds down, never past Now+TTL
	o.TTL = MaxTTL
	tok := mustMint(t, o)
	if !bytes.Equal(tok.Secret[:], secret) {
		t.Errorf("Mint did not take the secret from Rand: %x", tok.Secret)
	}
	if rest, _ := io.ReadAll(o.Rand); !bytes.Equal(rest, []byte{0xcd}) {
		t.Errorf("Mint left %x in Rand; want cd", rest)
	}
	if want := time.Unix(goldenNow+3600, 0).UTC(); !tok.Expiry.Equal(want) || tok.Expiry.Location() != time.UTC {
		t.Errorf("Expiry = %v; want %v", tok.Expiry, want)
	}
	if tok.Role != RoleWorker {
		t.Errorf(`Role "" minted as %q; want worker`, tok.Role)
	}
	if err := tok.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// The token does not alias the caller's slices.
	o = testOptions(t)
	tok = mustMint(t, o)
	o.Brokers[0] = mustAddrPort(t, "198.51.100.1:1")
	o.SigningKey[0] ^= 0xff
	if tok.Brokers[0] == o.Brokers[0] || tok.SigningKey[0] == o.SigningKey[0] {
		t.Error("the minted token shares memory with MintOptions")
	}

	// Two mints from crypto/rand differ.
	o = testOptions(t)
	o.Rand = nil
	if a, b := mustMint(t, o), mustMint(t, o); a.Secret == b.Secret {
		t.Error("two tokens minted from crypto/rand have the same secret")
	}

	// Zero Now means the current time.
	o = testOptions(t)
	o.Now = time.Time{}
	before := time.Now()
	tok = mustMint(t, o)
	if d := tok.Expiry.Sub(before); d < DefaultTTL-time.Second || d > DefaultTTL+time.Second {
		t.Errorf("with zero Now, expiry is %v from now; want about %v", d, DefaultTTL)
	}

	o = testOptions(t)
	o.Role = RoleControl
	if tok = mustMint(t, o); tok.Role != RoleControl {
		t.Errorf("Role = %q; want control", tok.Role)
	}
}

// countingReader records whether Mint read randomness.
type countingReader struct{ n int }

func (r *countingReader) Read(p []byte) (int, error) {
	r.n += len(p)
	for i := range p {
		p[i] = 7
	}
	return len(p), nil
}

func TestMintRefuses(t *testing.T) {
	ap := func(s string) netip.AddrPort { return mustAddrPort(t, s) }
	for _, tc := range []struct {
		name  string
		edit  func(*MintOptions)
		field string // for a *FieldError
		kind  error  // otherwise
	}{
		{"empty mesh", func(o *MintOptions) { o.Mesh = "" }, "mesh", nil},
		{"bad mesh", func(o *MintOptions) { o.Mesh = "Demo_1" }, "mesh", nil},
		{"bad node", func(o *MintOptions) { o.Node = "web.1" }, "node", nil},
		{"long node", func(o *MintOptions) { o.Node = strings.Repeat("n", 64) }, "node", nil},
		{"no brokers", func(o *MintOptions) { o.Brokers = nil }, "brokers", nil},
		{"too many brokers", func(o *MintOptions) {
			o.Brokers = nil
			for i := range MaxBrokers + 1 {
				o.Brokers = append(o.Brokers, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), 7300))
			}
		}, "brokers", nil},
		{"duplicate broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("192.0.2.1:1"), ap("192.0.2.1:1")} }, "brokers", nil},
		{"zero broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{{}} }, "brokers", nil},
		{"zoned broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("[fe80::1%eth0]:7300")} }, "brokers", nil},
		{"port zero", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("192.0.2.1:0")} }, "brokers", nil},
		{"unspecified broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("[::]:7300")} }, "brokers", nil},
		{"mapped broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("[::ffff:192.0.2.1]:7300")} }, "brokers", nil},
		{"multicast broker", func(o *MintOptions) { o.Brokers = []netip.AddrPort{ap("224.0.0.1:7300")} }, "brokers", nil},
		{"no CA pin", func(o *MintOptions) { o.CAPin = [32]byte{} }, "ca_pin", nil},
		{"no signing key", func(o *MintOptions) { o.SigningKey = nil }, "signing_key", nil},
		{"short signing key", func(o *MintOptions) { o.SigningKey = o.SigningKey[:31] }, "signing_key", nil},
		{"zero signing key", func(o *MintOptions) { o.SigningKey = make(ed25519.PublicKey, 32) }, "signing_key", nil},
		{"bad role", func(o *MintOptions) { o.Role = "admin" }, "role", nil},
		{"zero TTL", func(o *MintOptions) { o.TTL = 0 }, "", ErrTTL},
		{"negative TTL", func(o *MintOptions) { o.TTL = -time.Minute }, "", ErrTTL},
		{"sub-second TTL", func(o *MintOptions) { o.TTL = 999 * time.Millisecond }, "", ErrTTL},
		{"TTL over the cap", func(o *MintOptions) { o.TTL = MaxTTL + time.Nanosecond }, "", ErrTTL},
		{"TTL of a day", func(o *MintOptions) { o.TTL = 24 * time.Hour }, "", ErrTTL},
		{"expiry after 9999", func(o *MintOptions) { o.Now = time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC) }, "expiry", nil},
		{"expiry before 1970", func(o *MintOptions) { o.Now = time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC) }, "expiry", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t)
			r := &countingReader{}
			o.Rand = r
			tc.edit(&o)
			tok, err := Mint(o)
			if err == nil {
				t.Fatalf("Mint succeeded: %v", tok)
			}
			if r.n != 0 {
				t.Errorf("Mint read %d random bytes before refusing", r.n)
			}
			if tc.kind != nil {
				if !errors.Is(err, tc.kind) {
					t.Fatalf("error %v; want %v", err, tc.kind)
				}
			} else {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Field != tc.field {
					t.Fatalf("error %v; want a *FieldError for %s", err, tc.field)
				}
			}
		})
	}
}

func TestMintTTLMessage(t *testing.T) {
	o := testOptions(t)
	o.TTL = 2 * time.Hour
	_, err := Mint(o)
	if !errors.Is(err, ErrTTL) {
		t.Fatalf("error %v; want ErrTTL", err)
	}
	for _, want := range []string{"2h0m0s", "1h0m0s", "root credential"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("TTL error %q does not mention %q", err, want)
		}
	}
	o.TTL = MaxTTL
	if _, err := Mint(o); err != nil {
		t.Errorf("TTL of exactly MaxTTL: %v", err)
	}
	o.TTL = time.Second
	if _, err := Mint(o); err != nil {
		t.Errorf("TTL of one second: %v", err)
	}
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

func TestMintRandFailures(t *testing.T) {
	o := testOptions(t)
	o.Rand = bytes.NewReader(make([]byte, 10))
	if _, err := Mint(o); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short random source: %v; want io.ErrUnexpectedEOF", err)
	}
	boom := errors.New("entropy source gone")
	o.Rand = failingReader{boom}
	if _, err := Mint(o); !errors.Is(err, boom) {
		t.Errorf("failing random source: %v; want it wrapped", err)
	}
	o.Rand = bytes.NewReader(make([]byte, SecretSize))
	if _, err := Mint(o); err == nil || !strings.Contains(err.Error(), "all zeros") {
		t.Errorf("all-zero random source: %v; want a refusal", err)
	}
}

func TestRoundTrip(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := range 500 {
		o := testOptions(t)
		o.Rand = mrand.NewChaCha8([32]byte{byte(i), byte(i >> 8)})
		o.Mesh = randomID(rng)
		o.Node = randomID(rng)
		o.Role = []Role{"", RoleWorker, RoleControl}[rng.IntN(3)]
		o.TTL = time.Duration(1+rng.Int64N(int64(MaxTTL/time.Second))) * time.Second
		o.Now = time.Unix(rng.Int64N(1<<34), rng.Int64N(1e9))
		for j := range o.CAPin {
			o.CAPin[j] = byte(rng.Uint32())
		}
		o.CAPin[0] |= 1
		o.Brokers = nil
		for range 1 + rng.IntN(MaxBrokers) {
			var ap netip.AddrPort
			for ap = randomAddrPort(rng); slices.Contains(o.Brokers, ap); ap = randomAddrPort(rng) {
			}
			o.Brokers = append(o.Brokers, ap)
		}
		tok := mustMint(t, o)
		text := tok.Encode()
		if len(text) > MaxEncodedLen {
			t.Fatalf("encoded token is %d bytes", len(text))
		}
		got, err := Parse(text+"\n", o.Now)
		if err != nil {
			t.Fatalf("Parse(Encode(%v)): %v", tok, err)
		}
		if !reflect.DeepEqual(got, tok) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, tok)
		}
		if got.Encode() != text {
			t.Fatalf("re-encoding differs")
		}
	}
}

func randomID(rng *mrand.Rand) string {
	const alpha = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 1+rng.IntN(63))
	for i := range b {
		if i > 0 && i < len(b)-1 && rng.IntN(5) == 0 {
			b[i] = '-'
		} else {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
	}
	return string(b)
}

func randomAddrPort(rng *mrand.Rand) netip.AddrPort {
	port := uint16(1 + rng.IntN(65535))
	if rng.IntN(2) == 0 {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{byte(1 + rng.IntN(223)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}), port)
	}
	var a [16]byte
	for i := range a {
		a[i] = byte(rng.IntN(256))
	}
	a[0] = 0x20 // global unicast, never mapped, unspecified or multicast
	if rng.IntN(2) == 0 {
		clear(a[4:14]) // exercise :: compression
	}
	return netip.AddrPortFrom(netip.AddrFrom16(a), port)
}

func TestParseMessages(t *testing.T) {
	tok := mustMint(t, testOptions(t))
	text := tok.Encode()
	now := time.Unix(goldenNow, 0)
	for _, tc := range []struct {
		name  string
		in    string
		kind  error
		wants []string
	}{
		{"truncated names the field", text[:len("mesh1_demo_192.0")], ErrTruncated, []string{"brokers", "field 3 of 10"}},
		{"truncated prefix", "mesh", ErrTruncated, []string{"prefix"}},
		{"truncated crc", text[:len(text)-3], ErrTruncated, []string{"checksum", "5 of 8"}},
		{"checksum", text[:len(text)-1] + flip(text[len(text)-1]), ErrChecksum, []string{"altered or mis-copied"}},
		{"checksum with line break", text[:40] + "\r\n" + text[40:], ErrChecksum, []string{"one line"}},
		{"too long", strings.Repeat("a", MaxEncodedLen+1), ErrTooLong, []string{"4097", "4096"}},
		{"not a token", "ssh-ed25519 AAAA", ErrNotToken, []string{"mesh1_"}},
		// A whole token with what was copied around it is still refused, but said
		// to be one: "a token starts with mesh1_" was all it said.
		{"in double quotes", `"` + text + `"`, ErrNotToken, []string{"1 character comes before mesh1_", "paste the token alone"}},
		{"in backticks", "`" + text + "`", ErrNotToken, []string{"1 character comes before mesh1_", "paste the token alone"}},
		{"after MESH_TOKEN=", "MESH_TOKEN=" + text, ErrNotToken, []string{"11 characters come before mesh1_"}},
		{"after a shell prompt", "root@web-1:~# cat token.txt\n" + text, ErrNotToken, []string{"28 characters come before mesh1_", "a shell prompt"}},
		{"after a zero-width space", "\u200b" + text, ErrNotToken, []string{"1 invisible character comes before mesh1_", "an invisible character"}},
		{"after text and zero-width spaces", "x\u200b\u200b" + text, ErrNotToken, []string{"3 characters, 2 of them invisible, come before mesh1_"}},
		// A line break in the checksum is the same split, not text after the token.
		{"split in the crc", text[:len(text)-3] + "\r\n" + text[len(text)-3:], ErrMalformed, []string{"crc", "split when copied; paste it as one line"}},
		{"split after the last '_'", text[:len(text)-8] + "\n" + text[len(text)-8:], ErrMalformed, []string{"crc", "split when copied; paste it as one line"}},
		{"text after the token", text + " (worker)", ErrMalformed, []string{"crc", "copy only the token line"}},
		{"extra field", text + "_x", ErrMalformed, []string{"crc", "11 fields"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in, now)
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %v; want %v", err, tc.kind)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			assertNoSecret(t, err.Error(), tc.in)
		})
	}
}

func TestMalformedFieldMessage(t *testing.T) {
	s := baseSpec().with(func(s *spec) { s.role = "admin" })
	_, err := Parse(s.text(), time.Unix(goldenNow, 0))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "role" {
		t.Fatalf("error %v; want a *FieldError for role", err)
	}
	if strings.Contains(err.Error(), "admin") {
		t.Errorf("error %q quotes the field's text", err)
	}
	for _, w := range []string{"role", "worker", "control", "meshctl token"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestVersionError(t *testing.T) {
	now := time.Unix(goldenNow, 0)
	for _, tc := range []struct {
		in    string
		got   int
		wants []string
	}{
		{"mesh0_anything", 0, []string{"version 0", "older", "mint a new one"}},
		{"mesh2_anything", 2, []string{"version 2", "newer", "upgrade"}},
		{"mesh999_", 999, []string{"version 999", "newer"}},
	} {
		_, err := Parse(tc.in, now)
		var ve *VersionError
		if !errors.As(err, &ve) || ve.Got != tc.got || !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("Parse(%q) = %v; want *VersionError{Got: %d}", tc.in, err, tc.got)
			continue
		}
		for _, w := range tc.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q) error %q does not mention %q", tc.in, err, w)
			}
		}
	}
}

func TestExpiredError(t *testing.T) {
	expiry := time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)
	e := &ExpiredError{Expiry: expiry, Now: expiry.Add(3*time.Minute + 20*time.Second)}
	if got, want := e.Error(), "the token expired 3m20s ago (at 2026-11-29T19:00:00Z); mint a new one with meshctl token"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if e.Ago() != 200*time.Second {
		t.Errorf("Ago() = %v", e.Ago())
	}
	if !errors.Is(e, ErrExpired) {
		t.Error("ExpiredError is not ErrExpired")
	}

	o := testOptions(t)
	tok := mustMint(t, o)
	now := tok.Expiry.Add(90*time.Second + 300*time.Millisecond)
	got, err := Parse(tok.Encode(), now)
	var ee *ExpiredError
	if !errors.As(err, &ee) || !ee.Expiry.Equal(tok.Expiry) || !ee.Now.Equal(now) || ee.Ago() != 90*time.Second+300*time.Millisecond {
		t.Fatalf("Parse after expiry = %v; want *ExpiredError", err)
	}
	if !strings.Contains(err.Error(), "1m30s ago") {
		t.Errorf("error %q does not say how long ago", err)
	}
	if !reflect.DeepEqual(got, tok) {
		t.Errorf("Parse did not return the expired token: %v", got)
	}
}

func TestParseHostile(t *testing.T) {
	now := time.Unix(goldenNow, 0)
	text := mustMint(t, testOptions(t)).Encode()
	body := text[:strings.LastIndexByte(text, '_')]
	for _, tc := range []struct {
		name string
		in   string
		kind error
	}{
		{"NUL bytes", "\x00\x00\x00", ErrNotToken},
		{"NUL in a field", strings.Replace(text, "demo", "de\x00o", 1), ErrChecksum},
		{"invalid UTF-8", "mesh1_\xff\xfe_", ErrTruncated},
		{"only separators", "mesh1_" + strings.Repeat("_", MaxEncodedLen-6), ErrMalformed},
		{"many commas", baseSpec().with(func(s *spec) { s.brokers = []string{strings.Repeat(",", 3000)} }).text(), ErrMalformed},
		{"exactly the size limit", "mesh1_" + strings.Repeat("a", MaxEncodedLen-6), ErrTruncated},
		{"size limit after trimming", "\n\n" + "mesh1_" + strings.Repeat("a", MaxEncodedLen-6) + "\n\n", ErrTruncated},
		{"huge version", "mesh99999999999999999999999_", ErrNotToken},
		{"unicode whitespace around", "\u00a0" + text + "\u2028", nil},
		{"unicode digits in expiry", strings.Replace(text, "_17960", "_١7960", 1), ErrChecksum},
		{"crc of body with whitespace trimmed differently", " " + body + " _" + checksum(body+" "), ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.in, now)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("error %v; want %v", err, tc.kind)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	good := mustMint(t, testOptions(t))
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Token{}).Validate(); err == nil {
		t.Error("the zero Token validates")
	}
	for _, tc := range []struct {
		field string
		edit  func(*Token)
	}{
		{"mesh", func(t *Token) { t.Mesh = "a_b" }},
		{"brokers", func(t *Token) { t.Brokers = nil }},
		{"ca_pin", func(t *Token) { t.CAPin = [32]byte{} }},
		{"signing_key", func(t *Token) { t.SigningKey = append(t.SigningKey, 0) }},
		{"node", func(t *Token) { t.Node = "" }},
		{"role", func(t *Token) { t.Role = "" }},
		{"expiry", func(t *Token) { t.Expiry = t.Expiry.Add(time.Millisecond) }},
		{"expiry", func(t *Token) { t.Expiry = time.Time{} }},
		{"secret", func(t *Token) { t.Secret = [SecretSize]byte{} }},
	} {
		tok := good
		tok.Brokers = slices.Clone(good.Brokers)
		tok.SigningKey = slices.Clone(good.SigningKey)
		tc.edit(&tok)
		var fe *FieldError
		if err := tok.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Validate of a token with a bad %s = %v", tc.field, err)
		}
	}
}

func TestSecretHash(t *testing.T) {
	tok := mustMint(t, testOptions(t))
	want := sha256.Sum256(append([]byte("mesh-token-secret-v1\x00"), tok.Secret[:]...))
	if got := tok.SecretHash(); got != want {
		t.Errorf("SecretHash = %x; want %x", got, want)
	}
	if got := tok.SecretHash(); got == sha256.Sum256(tok.Secret[:]) {
		t.Error("SecretHash is the bare hash of the secret; it must be domain-separated")
	}
	other := tok
	other.Secret[0] ^= 1
	if other.SecretHash() == tok.SecretHash() {
		t.Error("different secrets hash alike")
	}
	// Fields other than the secret do not change the hash: the mesh looks tokens up by it.
	other = tok
	other.Node = "another"
	if other.SecretHash() != tok.SecretHash() {
		t.Error("SecretHash depends on more than the secret")
	}
}

// TestCheckNodeID: an id given outside a token is checked by the same rules, and its
// error speaks of the node id, not of a token field, and never quotes it.
func TestCheckNodeID(t *testing.T) {
	if err := CheckNodeID("web-1"); err != nil {
		t.Fatalf("CheckNodeID(web-1) = %v", err)
	}
	for _, id := range []string{"", "Web_1", strings.Repeat("x", 64), "-a", "mesh1_secret"} {
		err := CheckNodeID(id)
		var ie *IDError
		if !errors.As(err, &ie) || !errors.Is(err, ErrBadID) || errors.Is(err, ErrMalformed) {
			t.Errorf("CheckNodeID(%q) = %#v; want an *IDError", id, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "token") || !strings.HasPrefix(msg, "the node id ") || (id != "" && strings.Contains(msg, id)) {
			t.Errorf("CheckNodeID(%q) says %q", id, msg)
		}
	}
}

// TestALinkLocalBrokerIsRefusedAsInputAndReadInATokenFromBefore: no machine dials an
// IPv6 link-local address without its interface's zone, which a token does not
// carry: hosts given one were told "unreachable, retrying may help" (a review), so
// meshctl takes none as a broker's (CheckAddress: --advertise, a control token's
// addresses). A token minted before, which lists one beside brokers that work, is
// still minted and read: refused there, a mesh that lists one could mint nothing,
// and its agents did not start (a review of the first version of this).
func TestALinkLocalBrokerIsRefusedAsInputAndReadInATokenFromBefore(t *testing.T) {
	if err := CheckAddress("[fe80::4:6eff:fe84:2003]:7300"); err == nil || !strings.Contains(err.Error(), "link-local") {
		t.Fatalf("CheckAddress of a link-local address: %v, want refused as link-local", err)
	}
	for _, ok := range []string{"[fd37::4]:7300", "[2001:db8::7]:7300", "169.254.10.1:7300"} {
		if err := CheckAddress(ok); err != nil {
			t.Errorf("CheckAddress(%s): %v", ok, err)
		}
	}
	o := testOptions(t)
	o.Brokers = []netip.AddrPort{mustAddrPort(t, "[fe80::4:6eff:fe84:2003]:7300"), mustAddrPort(t, "192.0.2.10:7300")}
	tok := mustMint(t, o)
	got, err := Parse(tok.Encode(), time.Unix(goldenNow, 0))
	if err != nil || len(got.Brokers) != 2 {
		t.Fatalf("a token listing a link-local broker beside another: %+v, %v", got.Brokers, err)
	}
}

// TestCutShort: every prefix of a token is cut short, and so is the first line of
// a token wrapped anywhere (whose next line a reader of a paste waits for); the
// whole token, one split inside by a line break, and other text are not.
func TestCutShort(t *testing.T) {
	whole := mustMint(t, testOptions(t)).Encode()
	for i := 1; i < len(whole); i++ {
		if !CutShort(whole[:i] + "\n") {
			t.Fatalf("CutShort(%q) = false: its first %d bytes of %d", whole[:i], i, len(whole))
		}
	}
	for _, s := range []string{whole, whole + "\n", whole[:40] + "\n" + whole[40:], "hello", ""} {
		if CutShort(s) {
			t.Errorf("CutShort(%q) = true", s)
		}
	}
}
