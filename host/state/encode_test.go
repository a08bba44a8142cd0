package state

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // a real zone with daylight saving time, on any test machine
)

// encodingJSON is what Store.encode wrote before appendApplied, and what
// appendApplied must write: json.NewEncoder's output less its newline.
func encodingJSON(a Applied) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(a); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// matchesEncodingJSON fails t unless appendApplied writes a as encoding/json does,
// or refuses it as encoding/json does.
func matchesEncodingJSON(t *testing.T, a Applied) {
	t.Helper()
	want, err := encodingJSON(a)
	prefix := []byte("reused:")
	got, ok := appendApplied(append(make([]byte, 0, 8), prefix...), &a, nil)
	switch {
	case err != nil && ok:
		t.Fatalf("encoding/json refuses the state (%v); appendApplied wrote %s", err, got)
	case err != nil:
		return
	case !ok:
		t.Fatalf("appendApplied refused a state encoding/json writes as %s", want)
	case !bytes.HasPrefix(got, prefix):
		t.Fatalf("appendApplied overwrote what its buffer held: %q", got)
	case !bytes.Equal(got[len(prefix):], want):
		t.Fatalf("appendApplied wrote\n%s\nencoding/json writes\n%s", got[len(prefix):], want)
	}
	if len(a.Keyring) > 0 { // as a Store calls it, with the keyring encoded before
		got, _ = appendApplied(nil, &a, base64.StdEncoding.AppendEncode(nil, a.Keyring))
		if !bytes.Equal(got, want) {
			t.Fatalf("appendApplied with the keyring's base64 wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	}
}

func TestAppendAppliedMatchesEncodingJSON(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	india := time.FixedZone("IST", 5*3600+1800)
	odd := time.FixedZone("", -(3*3600 + 25*60 + 7)) // an offset with seconds
	withKeyring := func(k []byte) Applied { a := sample(); a.Keyring = k; return a }
	with := func(f func(*Applied)) Applied { a := sample(); f(&a); return a }
	cases := map[string]Applied{
		"zero":                {},
		"format only":         {Format: FormatVersion},
		"empty managed":       {Format: FormatVersion, Managed: []string{}},
		"sample":              sample(),
		"running":             runningState(),
		"keyring 1 byte":      withKeyring([]byte{0xff}),
		"keyring 2 bytes":     withKeyring([]byte{0, 0xfe}),
		"keyring 3 bytes":     withKeyring([]byte("{}\n")),
		"keyring empty":       withKeyring([]byte{}),
		"keyring nil":         withKeyring(nil),
		"keyring binary":      withKeyring([]byte("\x00<>&\"\\\xe2\x80\xa8\xff")),
		"managed nil, have":   with(func(a *Applied) { a.Managed = nil }),
		"managed escapes":     with(func(a *Applied) { a.Managed = []string{`a<b>&c`, `q"uote`, `back\slash`, "/abs", ""} }),
		"managed one each":    with(func(a *Applied) { a.Managed = []string{"<", ">", "&", `"`, `\`, "\x7f", "\x1f", " ", "~", "\u00e9"} }),
		"last error one each": with(func(a *Applied) { a.LastError = "<" }),
		"managed non-ASCII":   with(func(a *Applied) { a.Managed = []string{"café/ü.conf", "日本/語", "emoji/🙂"} }),
		"managed control":     with(func(a *Applied) { a.Managed = []string{"\x00", "\x01\x1f", "tab\there", "nl\n\r", "del\x7f", "\b\f"} }),
		"managed separators":  with(func(a *Applied) { a.Managed = []string{"line\u2028sep", "para\u2029sep"} }),
		"managed invalid UTF-8": with(func(a *Applied) {
			a.Managed = []string{"\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf"}
		}),
		"last error quoted":        with(func(a *Applied) { a.LastError = `open "etc/x": permission denied <root> & more` }),
		"last error only code":     with(func(a *Applied) { a.LastError, a.LastErrorVersion = "", 0 }),
		"last error only version":  with(func(a *Applied) { a.LastError, a.LastErrorCode = "", "" }),
		"last error non-ASCII":     with(func(a *Applied) { a.LastErrorCode = "é\u2028" }),
		"next attempt set":         with(func(a *Applied) { a.NextAttempt = time.Date(2026, 12, 1, 2, 3, 4, 500, time.UTC) }),
		"next attempt zone":        with(func(a *Applied) { a.NextAttempt = time.Date(2026, 7, 1, 2, 3, 4, 123456789, ny) }),
		"next attempt zero in NY":  with(func(a *Applied) { a.NextAttempt = time.Time{}.In(ny) }),
		"next attempt zero in UTC": with(func(a *Applied) { a.NextAttempt = time.Time{}.UTC() }),
		"times in zones": with(func(a *Applied) {
			a.IssuedAt = time.Date(2026, 3, 8, 1, 59, 59, 999999999, ny)
			a.ExpiresAt = time.Date(2026, 3, 8, 3, 0, 0, 1, ny)
			a.NextAttempt = time.Date(2026, 3, 8, 12, 0, 0, 100, india)
		}),
		"times odd offset": with(func(a *Applied) {
			a.IssuedAt = time.Date(2026, 1, 1, 0, 0, 0, 120000000, odd)
			a.ExpiresAt = time.Date(9999, 12, 31, 23, 59, 59, 999999999, odd)
		}),
		"times monotonic": with(func(a *Applied) {
			a.IssuedAt = time.Now()
			a.ExpiresAt = time.Now().Add(time.Hour).In(india)
		}),
		"times year 0": with(func(a *Applied) { a.IssuedAt = time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC) }),
		"times local":  with(func(a *Applied) { a.IssuedAt = time.Date(2026, 6, 1, 0, 0, 0, 7, time.Local) }),
		"lists empty": with(func(a *Applied) {
			a.Brokers, a.HooksPending, a.HooksFailed = []string{}, []string{}, []string{}
		}),
		"lists set": with(func(a *Applied) {
			a.Brokers = []string{"10.0.0.1:4222", "[2001:db8::1]:4222"}
			a.MembershipVersion = 3
			a.HooksPending = []string{"etc/app.conf", "motd"}
			a.HooksFailed = []string{"restart <app>", "reload"}
			a.HooksCut = true
		}),
		"extremes": {
			Format: math.MinInt, HaveApplied: true, Version: math.MaxUint64, KeyringEpoch: math.MaxUint64,
			LastErrorVersion: math.MaxUint64, MembershipVersion: math.MaxUint64,
			BodyDigest: strings.Repeat("\\", 3),
		},
		"long": with(func(a *Applied) {
			a.Keyring = bytes.Repeat([]byte("k"), 1<<16+1)
			for i := range 1000 {
				a.Managed = append(a.Managed, strings.Repeat("d/", i%20)+"f")
			}
		}),
	}
	for name, a := range cases {
		t.Run(name, func(t *testing.T) { matchesEncodingJSON(t, a) })
	}
}

// TestAppendAppliedWritesEveryField: each field of Applied set alone, to a value
// encoding/json writes, is written as encoding/json writes it. A field added to the
// state and not to the hand encoder (hooks_cut, once) was saved as if it were zero,
// and lost at every save, with no case above to show it.
func TestAppendAppliedWritesEveryField(t *testing.T) {
	typ := reflect.TypeFor[Applied]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var a Applied
		v := reflect.ValueOf(&a).Elem().Field(i)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Int64:
			v.SetInt(7)
		case reflect.Uint64:
			v.SetUint(7)
		case reflect.String:
			v.SetString("x")
		case reflect.Slice:
			if f.Type.Elem().Kind() == reflect.Uint8 {
				v.SetBytes([]byte("{}"))
			} else {
				v.Set(reflect.ValueOf([]string{"x"}))
			}
		case reflect.Struct:
			v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)))
		default:
			t.Fatalf("field %s of a kind this test does not set (%s): teach it", f.Name, v.Kind())
		}
		t.Run(f.Name, func(t *testing.T) { matchesEncodingJSON(t, a) })
	}
}

// TestAppendAppliedRefusesWhatEncodingJSONRefuses: times MarshalJSON refuses make
// appendApplied report false, and Store.encode then gives encoding/json's error,
// as it did before the hand encoder.
func TestAppendAppliedRefusesWhatEncodingJSONRefuses(t *testing.T) {
	checked := 0
	for name, tm := range map[string]time.Time{
		"year 10000":  time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		"year -1":     time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC),
		"offset 24 h": time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600)),
	} {
		t.Run(name, func(t *testing.T) {
			for _, field := range []string{"issued_at", "expires_at", "next_attempt"} {
				a := sample()
				switch field {
				case "issued_at":
					a.IssuedAt, a.ExpiresAt = tm, tm
				case "expires_at":
					a.ExpiresAt = tm
				case "next_attempt":
					a.NextAttempt = tm
				}
				matchesEncodingJSON(t, a)
				if _, ok := appendApplied(nil, &a, nil); ok {
					t.Fatalf("%s: appendApplied wrote %v", field, tm)
				}
				_, jerr := encodingJSON(a)
				if a.Validate() != nil {
					continue // Store.encode refuses it before encoding
				}
				checked++
				_, err := NewStore(t.TempDir()).encode(a)
				if err == nil || jerr == nil || err.Error() != "state: encoding: "+jerr.Error() {
					t.Fatalf("%s: Store.encode gave %v, want state: encoding: %v", field, err, jerr)
				}
			}
		})
	}
	if checked == 0 {
		t.Fatal("no case reached Store.encode's encoding")
	}
}

// TestStoreEncodeReusesBuffer: Store.encode writes what encoding/json writes, one
// encode after another into the same buffer, shorter and longer, and with the
// keyring's base64 it keeps following the keyring as it changes.
func TestStoreEncodeReusesBuffer(t *testing.T) {
	s := NewStore(t.TempDir())
	long := runningState()
	long.Managed = []string{"a/b", "ü<>"}
	long.LastError = `it "failed"`
	rotated := runningState()
	rotated.Keyring = bytes.Replace(rotated.Keyring, []byte("A=="), []byte("B=="), 1) // same length
	for _, a := range []Applied{long, {Format: FormatVersion}, sample(), long, runningState(), rotated, sample(), rotated} {
		want, err := encodingJSON(a)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.encode(a)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Store.encode wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	}
}

// FuzzEncodeMatchesEncodingJSON builds applied states from its inputs, valid or not,
// and holds appendApplied to writing what encoding/json writes, byte for byte, and to
// refusing exactly what encoding/json refuses. A list is nil, empty, or its string
// cut at commas, as lists says (two bits a list).
func FuzzEncodeMatchesEncodingJSON(f *testing.F) {
	s := sample()
	f.Add(s.Format, s.HaveApplied, s.Version, s.KeyringEpoch, s.LastErrorVersion, uint64(0),
		s.BodyDigest, s.LastError, s.LastErrorCode, s.Keyring,
		"etc/app.conf,motd", "", "", "", uint8(0b00_00_00_10),
		s.IssuedAt.Unix(), s.ExpiresAt.Unix(), int64(0), int64(0), 0, 0)
	f.Add(0, false, uint64(0), uint64(0), uint64(0), uint64(0),
		"", "", "", []byte(nil),
		"", "", "", "", uint8(0),
		int64(-62135596800), int64(-62135596800), int64(0), int64(0), 0, 0)
	f.Add(1, true, uint64(1<<63), uint64(9), uint64(3), uint64(4),
		"<&>", "open \"x\": \u2028 \xff\x00", "é", []byte{0, 1, 2, 0xff},
		"a<b>,c&d,\\,\",\x7f", "10.0.0.1:4222,[::1]:1", "x,,y", "hook <1>", uint8(0b10_10_10_10),
		int64(1764460800), int64(1764547200), int64(1764500000), int64(123456789), 19800, -12600)
	f.Add(1, true, uint64(2), uint64(0), uint64(0), uint64(0),
		"", "", "", []byte{},
		"", "", "", "", uint8(0b01_01_01_01),
		int64(253402300800), int64(-62167219201), int64(1), int64(999999999), 86400, -86399)
	f.Fuzz(func(t *testing.T, format int, have bool, version, epoch, errVersion, memVersion uint64,
		digest, lastErr, lastCode string, keyring []byte,
		managed, brokers, pending, failed string, lists uint8,
		issued, expires, next, nsec int64, off1, off2 int) {
		list := func(s string, bit uint) []string {
			switch (lists >> bit) & 3 {
			case 0:
				return nil
			case 1:
				return []string{}
			default:
				return strings.Split(s, ",")
			}
		}
		at := func(sec, nsec int64, off int) time.Time {
			loc := time.UTC
			if off != 0 {
				loc = time.FixedZone("zone", off)
			}
			return time.Unix(sec, nsec).In(loc)
		}
		a := Applied{
			Format: format, HaveApplied: have, Version: version, BodyDigest: digest,
			IssuedAt: at(issued, nsec, off1), ExpiresAt: at(expires, nsec/1000, off2),
			KeyringEpoch: epoch, Keyring: keyring, Managed: list(managed, 0),
			LastError: lastErr, LastErrorCode: lastCode, LastErrorVersion: errVersion,
			Brokers: list(brokers, 2), MembershipVersion: memVersion,
			HooksPending: list(pending, 4), HooksFailed: list(failed, 6),
			// Taken from an input already there: a new argument would void the
			// corpus kept of this target.
			HooksCut: memVersion%2 == 1,
		}
		if next != 0 {
			a.NextAttempt = at(next, nsec%1000, off1+off2)
		}
		matchesEncodingJSON(t, a)
	})
}

// TestJSONPlain: every byte jsonPlain lets through, encoding/json writes as it is, and
// jsonPlain lets through what declarations.jsonPlain does.
func TestJSONPlain(t *testing.T) {
	for c := range 256 {
		s := string([]byte{byte(c)})
		want := c >= 0x20 && c <= 0x7e && !strings.ContainsRune(`"\<>&`, rune(c))
		if jsonPlain(s) != want {
			t.Errorf("jsonPlain(%q) = %v, want %v", s, !want, want)
		}
		if q, err := json.Marshal(s); want && (err != nil || string(q) != `"`+s+`"`) {
			t.Errorf("encoding/json writes %q as %s (%v)", s, q, err)
		}
	}
}
