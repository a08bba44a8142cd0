package identity

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// testCA makes a self-signed CA certificate and returns its PEM and pin.
func testCA(t testing.TB) (string, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test mesh CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pin := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), hex.EncodeToString(pin[:])
}

func userSeed(t testing.TB) (seed, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return string(s), p
}

func signingKey(t testing.TB) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(pub)
}

// validIdentity returns a fresh identity that passes Validate.
func validIdentity(t testing.TB) Identity {
	t.Helper()
	caPEM, pin := testCA(t)
	seed, pub := userSeed(t)
	return Identity{
		Format:    FormatVersion,
		Mesh:      "demo",
		Node:      "web-1",
		Role:      "worker",
		Seed:      Secret(seed),
		PublicKey: pub,
		CAPEM:     caPEM,
		CAPin:     pin,
		Brokers:   []string{"127.0.0.1:7300", "[::1]:7301"},
		Subjects: Subjects{
			Declarations: "mesh.node.web-1.decl",
			Status:       "mesh.node.web-1.status",
			Sync:         "mesh.node.web-1.sync",
			InboxPrefix:  "_INBOX.node.web-1",
		},
		SigningKeys: []string{signingKey(t)},
		EnrolledAt:  time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
	}
}

func validPending(t testing.TB) Pending {
	t.Helper()
	seed, _ := userSeed(t)
	h := sha256.Sum256([]byte("token id"))
	return Pending{
		Format:    FormatVersion,
		Mesh:      "demo",
		Node:      "web-1",
		TokenHash: hex.EncodeToString(h[:]),
		Seed:      Secret(seed),
		CreatedAt: time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
	}
}

// fileBytes is the identity file Save would write for id.
func fileBytes(t testing.TB, id Identity) []byte {
	t.Helper()
	b, err := json.MarshalIndent(fileIdentity(id), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// withField returns the file for id with one top-level field replaced by the
// raw JSON value (or removed, when value is "").
func withField(t testing.TB, id Identity, field, value string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(fileBytes(t, id), &m); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(m, field)
	} else {
		m[field] = json.RawMessage(value)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outcome names which of Load's states err is, and fails if it is more than one.
func outcome(t testing.TB, err error) string {
	t.Helper()
	var got []string
	for _, s := range []struct {
		name string
		err  error
	}{
		{"absent", ErrNotEnrolled}, {"unreadable", ErrUnreadable},
		{"truncated", ErrTruncated}, {"corrupt", ErrCorrupt},
	} {
		if errors.Is(err, s.err) {
			got = append(got, s.name)
		}
	}
	if err == nil {
		return "ok"
	}
	if len(got) != 1 {
		t.Fatalf("error %q matches %v, want exactly one state", err, got)
	}
	return got[0]
}
