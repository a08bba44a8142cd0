package declarations

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
)

func sampleMembership() Membership {
	return Membership{Mesh: "demo", Version: 3, Brokers: []string{"10.0.0.1:7300", "10.0.0.2:7300"}, IssuedAt: t0}
}

func TestMembership(t *testing.T) {
	k, other := testKey(1), testKey(2)
	trusted := []ed25519.PublicKey{pub(k)}
	m := sampleMembership()
	raw := must(SignMembership(m, k))
	got, err := VerifyMembership(raw, trusted, "demo", 2, []string{"10.0.0.1:7300"})
	if err != nil || got.Version != 3 || len(got.Brokers) != 2 || got.Brokers[1] != "10.0.0.2:7300" {
		t.Fatalf("VerifyMembership = %+v, %v", got, err)
	}
	if _, err := VerifyMembership(raw, trusted, "demo", 3, m.Brokers); err != nil {
		t.Fatalf("the same membership again: %v", err)
	}
	if typ, _ := PeekType(raw); typ != PayloadTypeMembership {
		t.Errorf("PeekType = %q", typ)
	}
	signRaw := func(payload string) []byte { return must(SignEnvelope(PayloadTypeMembership, []byte(payload), k)) }
	for _, tc := range []struct {
		name    string
		raw     []byte
		current uint64
		code    string
		mention string
	}{
		{"forged", must(SignMembership(m, other)), 0, "untrusted", ""},
		{"an older version", raw, 4, "rolled_back", "membership version 3 is older than 4"},
		{"the same version, other brokers", must(SignMembership(Membership{Mesh: "demo", Version: 2, Brokers: []string{"10.9.9.9:7300"}, IssuedAt: t0}, k)), 2, "replayed", "other brokers"},
		{"another mesh", must(SignMembership(Membership{Mesh: "evil", Version: 9, Brokers: m.Brokers, IssuedAt: t0}, k)), 0, "wrong_mesh", ""},
		{"a declaration", mustSign(t, sampleDecl(), k), 0, "malformed", "payload type"},
		{"truncated", raw[:len(raw)-3], 0, "malformed", ""},
		{"no brokers", signRaw(`{"mesh":"demo","version":4,"brokers":[],"issued_at":"2025-03-01T12:00:00Z"}`), 0, "malformed", "no broker"},
		{"a name, not an address", signRaw(`{"mesh":"demo","version":4,"brokers":["mesh.example:7300"],"issued_at":"2025-03-01T12:00:00Z"}`), 0, "malformed", "ip:port"},
		{"no port", signRaw(`{"mesh":"demo","version":4,"brokers":["10.0.0.1:0"],"issued_at":"2025-03-01T12:00:00Z"}`), 0, "malformed", "ip:port"},
		{"a broker twice", signRaw(`{"mesh":"demo","version":4,"brokers":["10.0.0.1:7300","10.0.0.1:7300"],"issued_at":"2025-03-01T12:00:00Z"}`), 0, "malformed", "twice"},
		{"unknown field", signRaw(`{"mesh":"demo","version":4,"brokers":["10.0.0.1:7300"],"issued_at":"2025-03-01T12:00:00Z","redirect":true}`), 0, "malformed", "redirect"},
		{"no time", signRaw(`{"mesh":"demo","version":4,"brokers":["10.0.0.1:7300"],"issued_at":"0001-01-01T00:00:00Z"}`), 0, "malformed", "issued_at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyMembership(tc.raw, trusted, "demo", tc.current, []string{"10.0.0.1:7300"})
			wantCode(t, err, tc.code)
			if tc.mention != "" {
				wantErrContains(t, err, tc.mention)
			}
		})
	}
	for name, bad := range map[string]Membership{
		"no mesh":    {Version: 1, Brokers: m.Brokers, IssuedAt: t0},
		"no brokers": {Mesh: "demo", Version: 1, IssuedAt: t0},
		"no time":    {Mesh: "demo", Version: 1, Brokers: m.Brokers},
		"too many":   {Mesh: "demo", Version: 1, Brokers: manyBrokers(MaxBrokers + 1), IssuedAt: t0},
	} {
		if _, err := SignMembership(bad, k); err == nil {
			t.Errorf("%s: signed", name)
		}
	}
	if _, err := VerifyMembership(raw, trusted, "", 0, nil); err == nil || errors.Is(err, ErrMalformed) {
		t.Errorf("no mesh id given: %v", err)
	}
}

func manyBrokers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "10.0." + strings.Repeat("1", 1) + "." + itoa(i%250+1) + ":7300"
	}
	return out
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
