package declarations

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestVerifyDeclarationAccepts(t *testing.T) {
	k1, k2 := testKey(1), testKey(2)
	d := sampleDecl()
	raw := mustSign(t, d, k1, k2)
	v, err := VerifyDeclaration(raw, []ed25519.PublicKey{pub(k1)}, sampleExpect())
	if err != nil {
		t.Fatal(err)
	}
	if v.Mesh != d.Mesh || v.Node != d.Node || v.Version != d.Version || v.KeyringEpoch != d.KeyringEpoch ||
		!v.IssuedAt.Equal(d.IssuedAt) || !v.ExpiresAt.Equal(d.ExpiresAt) {
		t.Errorf("verified %+v, signed %+v", v.Declaration, d)
	}
	if v.BodyDigest != d.Body.Digest() || v.Body.Digest() != d.Body.Digest() {
		t.Error("body changed between signing and verifying")
	}
	if len(v.SignedBy) != 1 || v.SignedBy[0] != KeyID(pub(k1)) {
		t.Errorf("SignedBy = %v, want only the trusted key", v.SignedBy)
	}
	if v.SameAsApplied {
		t.Error("SameAsApplied without anything applied")
	}
	// With both keys trusted, both are reported.
	v, err = VerifyDeclaration(raw, []ed25519.PublicKey{pub(k1), pub(k2)}, sampleExpect())
	if err != nil || len(v.SignedBy) != 2 {
		t.Errorf("SignedBy = %v, %v; want both keys", v.SignedBy, err)
	}
}

func TestVerifyDeclarationEmptyBodyAtEnrolment(t *testing.T) {
	k := testKey(1)
	d := sampleDecl()
	d.Version, d.Body = 0, Body{}
	v, err := VerifyDeclaration(mustSign(t, d, k), []ed25519.PublicKey{pub(k)}, sampleExpect())
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != 0 || len(v.Body.Files) != 0 {
		t.Errorf("got version %d with %d files", v.Version, len(v.Body.Files))
	}
}

// TestVerifyDeclarationOrder feeds declarations that break several rules at
// once and checks that the earliest check in the documented order is the
// one reported.
func TestVerifyDeclarationOrder(t *testing.T) {
	k, other := testKey(1), testKey(2)
	trusted := []ed25519.PublicKey{pub(k)}
	applied := sampleDecl()
	exp := sampleExpect()
	exp.HaveApplied, exp.AppliedVersion, exp.AppliedBodyDigest = true, applied.Version, applied.Body.Digest()

	// Everything wrong that can be wrong inside a signed payload.
	allWrong := declMap(t, applied)
	allWrong["node"] = "db-1"
	allWrong["version"] = 1
	allWrong["expires_at"] = t0.Add(time.Minute).Format(time.RFC3339)
	allWrong["body"] = map[string]any{"files": []any{map[string]any{"path": "/etc/passwd", "content": "x"}}}

	without := func(m map[string]any, change func(map[string]any)) string {
		c := map[string]any{}
		for k, v := range m {
			c[k] = v
		}
		change(c)
		return encode(t, c)
	}

	tests := []struct {
		name string
		raw  []byte
		code string
	}{
		{"1 size beats shape", []byte(strings.Repeat("{", MaxEnvelopeSize+1)), "too_large"},
		{"2 shape beats signature", signPayload(t, encode(t, allWrong), other)[1:], "malformed"},
		{"2 payload type beats signature", must(SignEnvelope(PayloadTypeKeyring, []byte(encode(t, allWrong)), other)), "malformed"},
		{"3 signature beats payload", signPayload(t, encode(t, allWrong)+"}", other), "untrusted"},
		{"3 signature beats audience", signPayload(t, encode(t, allWrong), other), "untrusted"},
		{"4 payload beats audience", signPayload(t, encode(t, allWrong)+"}", k), "malformed"},
		{"5 audience beats version", signPayload(t, encode(t, allWrong), k), "wrong_audience"},
		{"6 version beats window", signPayload(t, without(allWrong, func(m map[string]any) { m["node"] = "web-1" }), k), "rolled_back"},
		{"6 replay beats window", signPayload(t, without(allWrong, func(m map[string]any) { m["node"] = "web-1"; m["version"] = 3 }), k), "replayed"},
		{"7 window beats body", signPayload(t, without(allWrong, func(m map[string]any) { m["node"] = "web-1"; m["version"] = 4 }), k), "expired"},
		{"8 body last", signPayload(t, without(allWrong, func(m map[string]any) {
			m["node"] = "web-1"
			m["version"] = 4
			m["expires_at"] = t0.Add(DefaultValidity).Format(time.RFC3339)
		}), k), "invalid_body"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyDeclaration(tc.raw, trusted, exp)
			wantCode(t, err, tc.code)
		})
	}
}

func TestVerifyDeclarationSignedButMalformed(t *testing.T) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	good := encode(t, sampleDecl()) // the field order SignDeclaration uses
	tests := []struct {
		name    string
		payload string
		mention string
	}{
		{"not JSON", "hello", "not valid JSON"},
		{"truncated", good[:len(good)-5], "truncated"},
		{"trailing data", good + "{}", "trailing data"},
		{"unknown field", replaceOnce(t, good, `{"mesh"`, `{"role":"control","mesh"`), `unknown field "role"`},
		{"duplicate version key", replaceOnce(t, good, `{"mesh"`, `{"version":99,"mesh"`), `"version" appears twice`},
		{"duplicate node key", replaceOnce(t, good, `{"mesh"`, `{"node":"db-1","mesh"`), `"node" appears twice`},
		{"key in other case", replaceOnce(t, good, `"node"`, `"Node"`), `unknown field "Node"`},
		{"unknown field in body", replaceOnce(t, good, `"files":[`, `"dirs":[],"files":[`), `unknown field "dirs"`},
		{"unknown field in file", replaceOnce(t, good, `{"path"`, `{"setuid":true,"path"`), `unknown field "setuid"`},
		{"missing version", replaceOnce(t, good, `"version":3,`, ``), `"version" is missing`},
		{"missing expires_at", replaceOnce(t, good, `"expires_at":"2025-03-02T12:00:00Z",`, ``), `"expires_at" is missing`},
		{"missing body", replaceOnce(t, good, `,"body":`+encode(t, sampleBody()), ``), `"body" is missing`},
		{"negative version", replaceOnce(t, good, `"version":3`, `"version":-3`), "unsigned"},
		{"fractional version", replaceOnce(t, good, `"version":3`, `"version":3.5`), "unsigned"},
		{"exponent version", replaceOnce(t, good, `"version":3`, `"version":3e0`), "unsigned"},
		{"version overflow", replaceOnce(t, good, `"version":3`, `"version":18446744073709551616`), "unsigned"},
		{"version as string", replaceOnce(t, good, `"version":3`, `"version":"3"`), "must be a number"},
		{"null mesh", replaceOnce(t, good, `"mesh":"demo"`, `"mesh":null`), "null"},
		{"bad time", replaceOnce(t, good, `"issued_at":"2025-03-01T12:00:00Z"`, `"issued_at":"yesterday"`), "parsing time"},
		{"zero issued_at", replaceOnce(t, good, `"issued_at":"2025-03-01T12:00:00Z"`, `"issued_at":"0001-01-01T00:00:00Z"`), "issued_at is not set"},
		{"expires before issued", replaceOnce(t, good, `"issued_at":"2025-03-01T12:00:00Z"`, `"issued_at":"2025-03-09T12:00:00Z"`), "expires_at is not after issued_at"},
		{"invalid UTF-8", replaceOnce(t, good, `"demo"`, "\"demo\xff\""), "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyDeclaration(signPayload(t, tc.payload, k), trusted, sampleExpect())
			wantCode(t, err, "malformed")
			var me *MalformedError
			if !errors.As(err, &me) || !me.Signed || me.What != "declaration" {
				t.Fatalf("error %#v is not a signed *MalformedError for the declaration", err)
			}
			wantErrContains(t, err, "signed by a trusted key but malformed")
			wantErrContains(t, err, tc.mention)
		})
	}
	// The unmodified payload passes, so each case above fails for its
	// change alone.
	if _, err := VerifyDeclaration(signPayload(t, good, k), trusted, sampleExpect()); err != nil {
		t.Fatalf("unmodified payload refused: %v", err)
	}
}

func TestVerifyDeclarationAudience(t *testing.T) {
	k := testKey(1)
	for _, tc := range []struct{ mesh, node, key, code string }{
		{"demo", "db-1", testNodeKey, "wrong_audience"},
		{"other", "web-1", testNodeKey, "wrong_mesh"},
		{"other", "db-1", testNodeKey, "wrong_mesh"},
		{"demo", "web-1", otherNodeKey, "wrong_enrolment"},
		{"demo", "db-1", otherNodeKey, "wrong_audience"},
	} {
		d := sampleDecl()
		d.Mesh, d.Node, d.NodeKey = tc.mesh, tc.node, tc.key
		_, err := VerifyDeclaration(mustSign(t, d, k), []ed25519.PublicKey{pub(k)}, sampleExpect())
		wantCode(t, err, tc.code)
		if !errors.Is(err, ErrWrongAudience) {
			t.Errorf("%v does not match ErrWrongAudience", err)
		}
		var ae *AudienceError
		if !errors.As(err, &ae) {
			t.Fatalf("%T is not *AudienceError", err)
		}
		want := AudienceError{WantMesh: "demo", WantNode: "web-1", WantKey: testNodeKey, GotMesh: tc.mesh, GotNode: tc.node, GotKey: tc.key}
		if *ae != want {
			t.Errorf("AudienceError = %+v, want %+v", *ae, want)
		}
		if tc.code == "wrong_enrolment" {
			wantErrContains(t, err, "earlier enrolment")
		} else {
			wantErrContains(t, err, `addressed to node "`+tc.node+`"`)
		}
	}
}

// TestVerifyDeclarationOldKeyring: a declaration signed under a keyring epoch
// older than the one the node accepted since was issued before a rotation.
func TestVerifyDeclarationOldKeyring(t *testing.T) {
	k := testKey(1)
	d := sampleDecl() // keyring epoch 1
	exp := sampleExpect()
	exp.KeyringEpoch = 2
	_, err := VerifyDeclaration(mustSign(t, d, k), []ed25519.PublicKey{pub(k)}, exp)
	wantCode(t, err, "old_keyring")
	var oe *OldKeyringError
	if !errors.As(err, &oe) || oe.Got != 1 || oe.Current != 2 || oe.Version != d.Version || d.Version == 0 {
		t.Fatalf("error %#v, want *OldKeyringError{1, 2, %d}", err, d.Version)
	}
	wantErrContains(t, err, "before a key rotation")
	d.KeyringEpoch = 2
	if _, err := VerifyDeclaration(mustSign(t, d, k), []ed25519.PublicKey{pub(k)}, exp); err != nil {
		t.Fatalf("same epoch refused: %v", err)
	}
	d.KeyringEpoch = 3 // a newer keyring the node has not seen yet is not this check's business
	if _, err := VerifyDeclaration(mustSign(t, d, k), []ed25519.PublicKey{pub(k)}, exp); err != nil {
		t.Fatalf("newer epoch refused: %v", err)
	}
}

func TestSignDeclarationNeedsNodeKey(t *testing.T) {
	for _, key := range []string{"", "U123", "N" + testNodeKey[1:], "u" + testNodeKey[1:], testNodeKey[:55] + "1"} {
		d := sampleDecl()
		d.NodeKey = key
		if _, err := SignDeclaration(d, testKey(1)); err == nil || !strings.Contains(err.Error(), "node key") {
			t.Errorf("node key %q: SignDeclaration error %v, want one naming the node key", key, err)
		}
	}
	if _, err := VerifyDeclaration(mustSign(t, sampleDecl(), testKey(1)), []ed25519.PublicKey{pub(testKey(1))}, Expect{Mesh: "demo", Node: "web-1", Now: t0}); err == nil {
		t.Error("VerifyDeclaration without the node's key in Expect accepted")
	}
}

func TestVerifyDeclarationVersion(t *testing.T) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	applied := sampleDecl() // version 3
	other := sampleBody()
	other.Files[0].Content = strp("listen = 9090\n")

	tests := []struct {
		name        string
		haveApplied bool
		version     uint64
		body        Body
		code        string
		same        bool
	}{
		{"first ever, any version", false, 0, applied.Body, "", false},
		{"first ever, high version", false, 1 << 40, other, "", false},
		{"newer", true, 4, other, "", false},
		{"newer, same body", true, 4, applied.Body, "", false},
		{"same version, same body: refresh", true, 3, applied.Body, "", true},
		{"same version, other body", true, 3, other, "replayed", false},
		{"older", true, 2, applied.Body, "rolled_back", false},
		{"zero after applied", true, 0, Body{}, "rolled_back", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp := sampleExpect()
			exp.HaveApplied, exp.AppliedVersion, exp.AppliedBodyDigest = tc.haveApplied, applied.Version, applied.Body.Digest()
			d := sampleDecl()
			d.Version, d.Body = tc.version, tc.body
			// A refresh is re-signed later, with a new window.
			d.IssuedAt, d.ExpiresAt = t0.Add(30*time.Minute), t0.Add(30*time.Minute+DefaultValidity)
			v, err := VerifyDeclaration(mustSign(t, d, k), trusted, exp)
			wantCode(t, err, tc.code)
			if err == nil && v.SameAsApplied != tc.same {
				t.Errorf("SameAsApplied = %v, want %v", v.SameAsApplied, tc.same)
			}
			var ve *VersionError
			if tc.code == "rolled_back" {
				if !errors.As(err, &ve) || ve.Got != tc.version || ve.Current != applied.Version {
					t.Errorf("VersionError = %+v", ve)
				}
			}
			// The node reports the version it refused as replayed.
			var re *ReplayedError
			if tc.code == "replayed" {
				if !errors.As(err, &re) || re.Version != tc.version {
					t.Errorf("ReplayedError = %+v", re)
				}
			}
		})
	}
}

func TestVerifyDeclarationWindow(t *testing.T) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	d := sampleDecl()
	raw := mustSign(t, d, k)
	tests := []struct {
		name   string
		now    time.Time
		skew   time.Duration
		future time.Duration
		code   string
	}{
		{"inside", t0.Add(time.Hour), 0, 0, ""},
		{"at issued_at minus future skew", d.IssuedAt.Add(-DefaultFutureSkew), 0, 0, ""},
		{"just before issued_at minus future skew", d.IssuedAt.Add(-DefaultFutureSkew - time.Nanosecond), 0, 0, "not_yet_valid"},
		{"far in the past", d.IssuedAt.Add(-48 * time.Hour), 0, 0, "not_yet_valid"},
		{"at expires_at plus skew", d.ExpiresAt.Add(DefaultSkew), 0, 0, ""},
		{"just after expires_at plus skew", d.ExpiresAt.Add(DefaultSkew + time.Nanosecond), 0, 0, "expired"},
		{"custom skew widens", d.ExpiresAt.Add(20 * time.Minute), time.Hour, 0, ""},
		{"custom skew narrows", d.ExpiresAt.Add(2 * time.Second), time.Second, 0, "expired"},
		{"custom skew narrows the start", d.IssuedAt.Add(-2 * time.Second), 0, time.Second, "not_yet_valid"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp := sampleExpect()
			exp.Now, exp.Skew, exp.FutureSkew = tc.now, tc.skew, tc.future
			_, err := VerifyDeclaration(raw, trusted, exp)
			wantCode(t, err, tc.code)
		})
	}

	exp := sampleExpect()
	exp.Now = d.ExpiresAt.Add(3 * time.Hour)
	_, err := VerifyDeclaration(raw, trusted, exp)
	var ee *ExpiredError
	if !errors.As(err, &ee) || ee.Ago() != 3*time.Hour || !ee.ExpiresAt.Equal(d.ExpiresAt) {
		t.Fatalf("ExpiredError = %+v (%v)", ee, err)
	}
	wantErrContains(t, err, "expired 3h0m0s ago")
	// The issue time is given, and both clocks named: stamped by a clock behind,
	// a declaration is expired on arrival.
	wantErrContains(t, err, fmt.Sprintf("issued %s ago at %s", (d.ExpiresAt.Sub(d.IssuedAt)+3*time.Hour).Round(time.Second), d.IssuedAt.UTC().Format(time.RFC3339)))
	wantErrContains(t, err, "this node's clock is ahead, or the control plane's was behind when it stamped it")

	exp.Now = d.IssuedAt.Add(-2 * time.Hour)
	_, err = VerifyDeclaration(raw, trusted, exp)
	wantErrContains(t, err, "2h0m0s ahead of this node's clock")
}

// TestAppliedAnyIssueTimeLetsOnlyTheAppliedThrough: Expect.AppliedAnyIssueTime
// takes a copy of the applied declaration (same version, same body) issued days in
// this node's future, saying so (IssuedAhead); every other declaration issued so is
// still not_yet_valid, and the option changes neither expiry nor the version rules.
// Without the option the applied copy is refused too.
func TestAppliedAnyIssueTimeLetsOnlyTheAppliedThrough(t *testing.T) {
	k := testKey(1)
	trusted := []ed25519.PublicKey{pub(k)}
	applied := sampleDecl() // version 3, issued t0
	other := sampleBody()
	other.Files[0].Content = strp("listen = 9090\n")
	behind := t0.Add(-48 * time.Hour) // this node's clock, two days behind the issue
	tests := []struct {
		name        string
		haveApplied bool
		option      bool
		version     uint64
		body        Body
		now         time.Time
		code        string
		ahead       bool
	}{
		{"the applied copy, with the option", true, true, 3, applied.Body, behind, "", true},
		{"the applied copy, without it", true, false, 3, applied.Body, behind, "not_yet_valid", false},
		{"the applied copy within the tolerance", true, true, 3, applied.Body, t0.Add(-time.Minute), "", false},
		{"a newer declaration", true, true, 4, other, behind, "not_yet_valid", false},
		{"a newer version of the same body", true, true, 4, applied.Body, behind, "not_yet_valid", false},
		{"the applied version over another body", true, true, 3, other, behind, "replayed", false},
		{"an older version", true, true, 2, applied.Body, behind, "rolled_back", false},
		{"nothing applied yet", false, true, 3, applied.Body, behind, "not_yet_valid", false},
		{"the applied copy expired", true, true, 3, applied.Body, applied.ExpiresAt.Add(DefaultSkew + time.Second), "expired", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp := sampleExpect()
			exp.HaveApplied, exp.AppliedVersion, exp.AppliedBodyDigest = tc.haveApplied, applied.Version, applied.Body.Digest()
			exp.AppliedAnyIssueTime, exp.Now = tc.option, tc.now
			d := sampleDecl()
			d.Version, d.Body = tc.version, tc.body
			v, err := VerifyDeclaration(mustSign(t, d, k), trusted, exp)
			wantCode(t, err, tc.code)
			if err == nil && (v.IssuedAhead != tc.ahead || !v.SameAsApplied) {
				t.Errorf("IssuedAhead %v, SameAsApplied %v; want %v, true", v.IssuedAhead, v.SameAsApplied, tc.ahead)
			}
		})
	}
}

func TestVerifyDeclarationBody(t *testing.T) {
	k := testKey(1)
	m := declMap(t, sampleDecl())
	m["body"] = map[string]any{"files": []any{
		map[string]any{"path": "etc/ok", "content": "x"},
		map[string]any{"path": "etc/../../root/.ssh/authorized_keys", "content": "x"},
	}}
	_, err := VerifyDeclaration(signPayload(t, encode(t, m), k), []ed25519.PublicKey{pub(k)}, sampleExpect())
	wantCode(t, err, "invalid_body")
	// Signed, the body's version is said (audit of mixed versions, finding 1: a
	// body an older control plane signed was reported v0, a version never
	// declared).
	if be := asBodyError(t, err); be.Index != 1 || be.Version != sampleDecl().Version || be.Version == 0 {
		t.Errorf("BodyError.Index = %d, Version %d, want 1 and %d", be.Index, be.Version, sampleDecl().Version)
	}
}

func TestVerifyDeclarationCallerMistakes(t *testing.T) {
	k := testKey(1)
	raw := mustSign(t, sampleDecl(), k)
	trusted := []ed25519.PublicKey{pub(k)}
	for name, change := range map[string]func(*Expect){
		"no mesh":       func(e *Expect) { e.Mesh = "" },
		"no node":       func(e *Expect) { e.Node = "" },
		"no clock":      func(e *Expect) { e.Now = time.Time{} },
		"negative skew": func(e *Expect) { e.Skew = -time.Second },
	} {
		exp := sampleExpect()
		change(&exp)
		_, err := VerifyDeclaration(raw, trusted, exp)
		if Code(err) != "error" {
			t.Errorf("%s: Code = %q (%v), want \"error\"", name, Code(err), err)
		}
	}
	_, err := VerifyDeclaration(raw, []ed25519.PublicKey{make([]byte, 12)}, sampleExpect())
	wantCode(t, err, "error")
}

func TestSignDeclarationRefuses(t *testing.T) {
	k := testKey(1)
	tests := []struct {
		name    string
		change  func(*Declaration)
		code    string
		mention string
	}{
		{"no mesh", func(d *Declaration) { d.Mesh = "" }, "error", "mesh id"},
		{"bad mesh", func(d *Declaration) { d.Mesh = "Demo" }, "error", "mesh id"},
		{"mesh with underscore", func(d *Declaration) { d.Mesh = "a_b" }, "error", "mesh id"},
		{"mesh with dot", func(d *Declaration) { d.Mesh = "a.b" }, "error", "mesh id"},
		{"node leading dash", func(d *Declaration) { d.Node = "-web" }, "error", "node id"},
		{"node trailing dash", func(d *Declaration) { d.Node = "web-" }, "error", "node id"},
		{"node too long", func(d *Declaration) { d.Node = strings.Repeat("a", 64) }, "error", "node id"},
		{"no issued_at", func(d *Declaration) { d.IssuedAt = time.Time{} }, "error", "issued_at"},
		{"expires at issue", func(d *Declaration) { d.ExpiresAt = d.IssuedAt }, "error", "expires_at"},
		{"bad body", func(d *Declaration) { d.Body.Files[0].Path = "/etc/shadow" }, "invalid_body", "absolute"},
		{"no key", func(d *Declaration) {}, "error", "no signing key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := sampleDecl()
			tc.change(&d)
			keys := []ed25519.PrivateKey{k}
			if tc.name == "no key" {
				keys = nil
			}
			_, err := SignDeclaration(d, keys...)
			wantCode(t, err, tc.code)
			wantErrContains(t, err, tc.mention)
		})
	}
	// Ids at the edges of the rule are accepted.
	d := sampleDecl()
	d.Mesh, d.Node = "a", strings.Repeat("z", 63)
	if _, err := SignDeclaration(d, k); err != nil {
		t.Errorf("edge ids refused: %v", err)
	}
}

func TestSignDeclarationEncodesUTC(t *testing.T) {
	k := testKey(1)
	d := sampleDecl()
	zone := time.FixedZone("X", 5*3600)
	d.IssuedAt, d.ExpiresAt = d.IssuedAt.In(zone), d.ExpiresAt.In(zone)
	payload, _, err := OpenEnvelope(mustSign(t, d, k), PayloadTypeDeclaration, []ed25519.PublicKey{pub(k)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(payload), `"issued_at":"2025-03-01T12:00:00Z"`) {
		t.Errorf("payload times are not UTC: %s", payload)
	}
}

// replaceOnce is strings.Replace that fails the test when old is absent, so a
// tampering test cannot silently test the untampered input.
func replaceOnce(t testing.TB, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("test setup: %q not found in %s", old, s)
	}
	return strings.Replace(s, old, new, 1)
}
