package token

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// sealed joins fields with '_' and appends a correct checksum.
func sealed(fields ...string) string {
	body := strings.Join(fields, "_")
	return fmt.Sprintf("%s_%08x", body, crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli)))
}

// sample returns the fields of a valid worker token (without the crc) and the time
// to parse it at.
func sample() ([]string, time.Time) {
	pin := sha256.Sum256([]byte("pin"))
	key := sha256.Sum256([]byte("key"))
	secret := sha256.Sum256([]byte("secret"))
	return []string{"mesh1", "demo", "192.0.2.10:7300,[2001:db8::7]:7301", hex.EncodeToString(pin[:]),
		hex.EncodeToString(key[:]), "web-1", "worker", "1796000900", hex.EncodeToString(secret[:])}, time.Unix(1796000000, 0)
}

func parsedSample(t *testing.T) Token {
	t.Helper()
	f, now := sample()
	tok, err := Parse(sealed(f...), now)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestParseSample(t *testing.T) {
	f, now := sample()
	tok, err := Parse("\n  "+sealed(f...)+"\r\n", now)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("192.0.2.10:7300"), netip.MustParseAddrPort("[2001:db8::7]:7301")}
	if tok.Mesh != "demo" || tok.Node != "web-1" || tok.Role != RoleWorker || len(tok.Brokers) != 2 ||
		tok.Brokers[0] != want[0] || tok.Brokers[1] != want[1] || tok.Expiry.Unix() != 1796000900 ||
		tok.SecretHex() != f[8] || hex.EncodeToString(tok.CAPin[:]) != f[3] || hex.EncodeToString(tok.SigningKey) != f[4] {
		t.Fatalf("parsed %#v", tok)
	}
}

func TestParseErrors(t *testing.T) {
	f, now := sample()
	good := sealed(f...)
	body := good[:len(good)-9]
	with := func(i int, v string) string {
		g := append([]string(nil), f...)
		g[i] = v
		return sealed(g...)
	}
	for _, tc := range []struct {
		name  string
		in    string
		kind  string
		wants []string
	}{
		{"empty", "", "empty", nil},
		{"blank", "\n\t ", "empty", nil},
		{"too long", strings.Repeat("m", MaxEncodedLen+1), "too_long", []string{"4097"}},
		{"exactly the limit", "mesh1_" + strings.Repeat("a", MaxEncodedLen-6), "truncated", nil},
		{"prefix cut", "mesh", "truncated", []string{"prefix"}},
		{"other text", "ssh-ed25519 AAAAC3Nza", "not_token", []string{"mesh1_"}},
		{"NUL", "\x00", "not_token", nil},
		{"invalid UTF-8 after prefix", "mesh\xff_", "not_token", nil},
		{"four-digit version", "mesh1000_", "not_token", nil},
		{"older", "mesh0_x", "version", []string{"older", "ask the operator"}},
		{"newer", "mesh3_x", "version", []string{"newer", "upgrade meshhost"}},
		{"stops in node", good[:strings.Index(good, "_web-1_")+4], "truncated", []string{"node field", "field 6 of 10"}},
		{"stops in secret", good[:len(body)-10], "truncated", []string{"secret field"}},
		{"crc short", good[:len(good)-2], "truncated", []string{"6 of 8"}},
		{"crc missing", body, "truncated", []string{"secret field"}},
		{"crc uppercase", body + "_" + strings.ToUpper(good[len(good)-8:]) + "X", "malformed:crc", nil},
		{"extra field", good + "_", "malformed:crc", []string{"11 fields"}},
		{"only separators", "mesh1_" + strings.Repeat("_", 3000), "malformed:crc", nil},
		{"changed char", strings.Replace(good, "web-1", "web-7", 1), "checksum", []string{"altered or mis-copied"}},
		{"split line", good[:50] + "\n" + good[50:], "checksum", []string{"one line"}},
		// A line break in the checksum is the same split, not text after the token.
		{"split in the crc", body + "_" + good[len(good)-8:len(good)-3] + "\r\n" + good[len(good)-3:], "malformed:crc", []string{"split when copied; paste it as one line"}},
		{"split after the last '_'", body + "_\n" + good[len(good)-8:], "malformed:crc", []string{"split when copied; paste it as one line"}},
		{"text after the token", good + " (worker)", "malformed:crc", []string{"paste only the token line"}},
		// A whole token with what was copied around it is still refused, but said
		// to be one: "a join token starts with mesh1_" was all it said.
		{"in double quotes", `"` + good + `"`, "not_token", []string{"1 character comes before mesh1_", "paste the token alone"}},
		{"in backticks", "`" + good + "`", "not_token", []string{"1 character comes before mesh1_", "paste the token alone"}},
		{"after MESH_TOKEN=", "MESH_TOKEN=" + good, "not_token", []string{"11 characters come before mesh1_"}},
		{"after a shell prompt", "root@web-1:~# cat token.txt\n" + good, "not_token", []string{"28 characters come before mesh1_", "a shell prompt"}},
		{"after a zero-width space", "\u200b" + good, "not_token", []string{"1 invisible character comes before mesh1_", "an invisible character"}},
		{"after text and zero-width spaces", "x\u200b\u200b" + good, "not_token", []string{"3 characters, 2 of them invisible, come before mesh1_"}},
		{"a command line naming a token", "meshhost enrol " + good, "not_token", []string{"15 characters come before mesh1_"}},
		{"bad mesh", with(1, "a..b"), "malformed:mesh", []string{"position 2", "meshctl token"}},
		{"comma flood", with(2, strings.Repeat(",", 2000)), "malformed:brokers", []string{"2001 broker addresses"}},
		{"host name", with(2, "localhost:7300"), "malformed:brokers", []string{"host names"}},
		{"second broker bad", with(2, "192.0.2.1:1,192.0.2.2"), "malformed:brokers", []string{"broker address 2"}},
		{"pin with a space", with(3, " "+f[3][1:]), "malformed:ca_pin", nil},
		{"key uppercase", with(4, strings.ToUpper(f[4])), "malformed:signing_key", []string{"uppercase"}},
		{"node", with(5, "web_1"), "malformed:crc", nil},
		{"node too long", with(5, strings.Repeat("a", 64)), "malformed:node", nil},
		{"role", with(6, "superuser"), "malformed:role", []string{`"worker" or "control"`}},
		{"expiry", with(7, "1e9"), "malformed:expiry", nil},
		{"secret zero", with(8, strings.Repeat("0", 64)), "malformed:secret", []string{"all zeros"}},
		{"secret too long", with(8, f[8]+"0"), "malformed:secret", []string{"65 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Parse(tc.in, now)
			if got := kind(err); got != tc.kind {
				t.Fatalf("error %v is of kind %s; want %s", err, got, tc.kind)
			}
			if tok.Mesh != "" || tok.Brokers != nil {
				t.Errorf("Parse returned a token with its error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), f[8]) || (len(tc.in) > 12 && strings.Contains(err.Error(), tc.in)) {
				t.Errorf("error %q quotes the token", err)
			}
		})
	}
}

func TestExpired(t *testing.T) {
	f, _ := sample()
	expiry := time.Unix(1796000900, 0)
	for _, tc := range []struct {
		now  time.Time
		text string
	}{
		{expiry, "expired 0s ago"},
		{expiry.Add(time.Second), "expired 1s ago"},
		{expiry.Add(3*time.Minute + 20*time.Second + 200*time.Millisecond), "expired 3m20s ago (at 2026-11-30T01:08:20Z)"},
	} {
		tok, err := Parse(sealed(f...), tc.now)
		var ee *ExpiredError
		if !errors.As(err, &ee) || !errors.Is(err, ErrExpired) {
			t.Fatalf("at %v: error %v; want *ExpiredError", tc.now, err)
		}
		if ee.Ago() != tc.now.Sub(expiry) || !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), "meshctl token") {
			t.Errorf("at %v: Ago %v, text %q; want %q", tc.now, ee.Ago(), err, tc.text)
		}
		if tok.Node != "web-1" || tok.SecretHex() != f[8] {
			t.Errorf("expired token not returned: %v", tok)
		}
	}
	if _, err := Parse(sealed(f...), expiry.Add(-time.Nanosecond)); err != nil {
		t.Errorf("a nanosecond before expiry: %v", err)
	}
}

func TestSecretHexAndHash(t *testing.T) {
	tok := parsedSample(t)
	want := sha256.Sum256(append([]byte("mesh-token-secret-v1\x00"), tok.Secret[:]...))
	if tok.SecretHash() != want {
		t.Errorf("SecretHash = %x; want %x", tok.SecretHash(), want)
	}
	if tok.SecretHex() != hex.EncodeToString(tok.Secret[:]) {
		t.Errorf("SecretHex = %s", tok.SecretHex())
	}
	other := tok
	other.Secret[31] ^= 0x80
	if other.SecretHash() == tok.SecretHash() {
		t.Error("different secrets, same hash")
	}
}

func TestValidate(t *testing.T) {
	good := parsedSample(t)
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Token)
	}{
		{"mesh", func(t *Token) { t.Mesh = "" }},
		{"brokers", func(t *Token) { t.Brokers = []netip.AddrPort{t.Brokers[0], t.Brokers[0]} }},
		{"brokers", func(t *Token) { t.Brokers = []netip.AddrPort{netip.MustParseAddrPort("[fe80::1%lo]:1")} }},
		{"ca_pin", func(t *Token) { t.CAPin = [32]byte{} }},
		{"signing_key", func(t *Token) { t.SigningKey = t.SigningKey[:16] }},
		{"signing_key", func(t *Token) { t.SigningKey = make([]byte, 32) }},
		{"node", func(t *Token) { t.Node = "-x" }},
		{"role", func(t *Token) { t.Role = "" }},
		{"expiry", func(t *Token) { t.Expiry = time.Unix(-1, 0) }},
		{"expiry", func(t *Token) { t.Expiry = t.Expiry.Add(time.Microsecond) }},
		{"secret", func(t *Token) { t.Secret = [SecretSize]byte{} }},
	} {
		tok := good
		tc.edit(&tok)
		var fe *FieldError
		if err := tok.Validate(); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("bad %s: Validate = %v", tc.field, err)
		}
	}
}

func TestRedaction(t *testing.T) {
	tok := parsedSample(t)
	forms := []string{
		tok.SecretHex(), strings.ToUpper(tok.SecretHex()), tok.SecretHex()[:16],
		base64.StdEncoding.EncodeToString(tok.Secret[:]),
		strings.Trim(fmt.Sprint(tok.Secret[:]), "[]"),
	}
	type wrapper struct {
		T Token
		P *Token
	}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%08v"} {
		out = append(out, fmt.Sprintf(verb, tok), fmt.Sprintf(verb, &tok), fmt.Sprintf(verb, wrapper{tok, &tok}), fmt.Sprintf(verb, []Token{tok}))
	}
	out = append(out, fmt.Sprint(tok), fmt.Sprintln(&tok), tok.String(), tok.GoString())
	var b bytes.Buffer
	log.New(&b, "", 0).Print(tok)
	slog.New(slog.NewTextHandler(&b, nil)).Info("x", "token", tok, "ptr", &tok, "w", wrapper{tok, &tok})
	slog.New(slog.NewJSONHandler(&b, nil)).Info("x", "token", tok, "ptr", &tok, "w", wrapper{tok, &tok})
	out = append(out, b.String())
	for _, v := range []any{tok, &tok, wrapper{tok, &tok}} {
		j, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(j))
	}
	if !strings.Contains(fmt.Sprint(struct{ S [32]byte }{tok.Secret}), forms[4]) {
		t.Fatal("the decimal form is not what fmt prints; the test would prove nothing")
	}
	for _, o := range out {
		if !strings.Contains(o, "redacted") {
			t.Errorf("no redaction shown: %s", o)
		}
		for _, form := range forms {
			if strings.Contains(o, form) {
				t.Errorf("output contains the secret: %s", o)
			}
		}
	}
	if !strings.Contains(tok.String(), "web-1") || !strings.Contains(tok.String(), "192.0.2.10:7300") {
		t.Errorf("String() hides the public fields: %s", tok)
	}
	if _, err := Parse(tok.String(), time.Unix(0, 0)); err == nil {
		t.Error("the redacted String() parses")
	}
}

// BenchmarkProve is what an enrolment's proof costs the host: the proof key derived
// from the secret, and a signature. Enrolment makes it once, for the login and the
// request alike.
func BenchmarkProve(b *testing.B) {
	var t Token
	for i := range t.Secret {
		t.Secret[i] = byte(i)
	}
	for b.Loop() {
		t.Prove("mesh", "web-1", "UAFVA4V6T7TXVWXKLTOKXNOEOM563KHY4UBWLUTMRWBTTPERXFF64XRI")
	}
}

// TestLooksLikeToken: what starts as a token does, and what does not (a script's
// next line, which starts with "mesh" too).
func TestLooksLikeToken(t *testing.T) {
	for in, want := range map[string]bool{
		"mesh1_AAAA":             true,
		"\n  mesh1_AAAA\n":       true,
		"\uFEFFmesh12_x":         true,
		"\v\f\u00a0mesh1_x":      true,
		"meshhost run --state s": false,
		"mesh_AAAA":              false,
		"mesh1":                  false,
		"echo mesh1_AAAA":        false,
		"":                       false,
	} {
		if got := LooksLikeToken([]byte(in)); got != want {
			t.Errorf("LooksLikeToken(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestCutShort: every prefix of a token is cut short, and so is the first line of
// a token wrapped anywhere (whose next line a reader of a paste waits for); the
// whole token, one split inside by a line break, and other text are not.
func TestCutShort(t *testing.T) {
	f, _ := sample()
	whole := sealed(f...)
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
