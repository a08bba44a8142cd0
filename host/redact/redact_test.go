package redact

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestSecretsAreHidden (audit of secrets, finding 2): a failing hook's output went to
// the control plane's replicated state with only tokens hidden. Nkey seeds of every
// type, PEM private keys (whole, or cut short where the kept output ends) and a
// creds file's seed are hidden; the text around them, and text that only resembles
// them, is kept.
func TestSecretsAreHidden(t *testing.T) {
	var seeds []string
	for _, mk := range []func() (nkeys.KeyPair, error){nkeys.CreateUser, nkeys.CreateAccount, nkeys.CreateOperator, nkeys.CreateServer, nkeys.CreateCluster, nkeys.CreateCurveKeys} {
		kp, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := kp.Seed()
		seeds = append(seeds, string(s))
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	ecPEM := strings.Replace(keyPEM, "PRIVATE KEY", "EC PRIVATE KEY", 2)
	body := strings.Split(keyPEM, "\n")[1]
	creds := "-----BEGIN USER NKEY SEED-----\n" + seeds[0] + "\n------END USER NKEY SEED------\n"
	for _, c := range []struct{ in, gone string }{
		{"failed to load key " + seeds[0] + ": bad", seeds[0]},
		{"config check: " + keyPEM + "after", body},
		{"config check: " + ecPEM, body},
		{"cut short: " + keyPEM[:len(keyPEM)/2], body},
		{creds, seeds[0]},
	} {
		got := Secrets(c.in)
		if strings.Contains(got, c.gone) || !strings.Contains(got, Hidden) {
			t.Errorf("Secrets(%q) = %q: the secret is not hidden", c.in, got)
		}
	}
	for _, s := range seeds {
		if got := Secrets("seed=" + s + "."); got != "seed="+Hidden+"." {
			t.Errorf("the seed %.2s…: %q", s, got)
		}
	}
	// Text that is no secret is kept: a public key, a certificate, words.
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	for _, keep := range []string{"user " + pub, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "SUCCESS: restarted app.service", "port 8080 in use"} {
		if got := Secrets(keep); got != keep {
			t.Errorf("Secrets(%q) = %q, want it kept", keep, got)
		}
	}
}

// TestCutSecretsHidesAKeyWhoseStartWasCut (a reviewer's audit, 2026-12, finding 9):
// the end of a long output was kept, cut inside a private key longer than about
// 4 KiB (RSA of 6,144 bits or more): its BEGIN line gone, the rest of its body was
// reported in the clear. Cut, a text is hidden from its start to the first END
// PRIVATE KEY line; what follows is kept, and its own secrets hidden.
func TestCutSecretsHidesAKeyWhoseStartWasCut(t *testing.T) {
	material := make([]byte, 4700) // an RSA 8192-bit key's DER is about this long
	if _, err := rand.Read(material); err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: material}))
	lines := strings.Split(keyPEM, "\n")
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	// The cut falls in the key's body: half its lines are left, no BEGIN line.
	cut := strings.Join(lines[len(lines)/2:], "\n") + "config check failed: seed " + string(seed) + "\n"
	got := CutSecrets(cut)
	for _, l := range lines[len(lines)/2 : len(lines)-2] {
		if strings.Contains(got, l) {
			t.Fatalf("a line of the key's body is left: %.60q…\n%s", l, got)
		}
	}
	if strings.Contains(got, string(seed)) || !strings.HasPrefix(got, Hidden) || !strings.Contains(got, "config check failed") {
		t.Fatalf("CutSecrets = %q: want the key hidden, the words after it kept, the seed hidden", got)
	}
	// A whole key in a cut text: hidden, and the text before it with it.
	if got := CutSecrets("before " + keyPEM + "after"); got != Hidden+"\nafter" {
		t.Fatalf("a whole key in a cut text: %.80q", got)
	}
	// Nothing of a key: as Secrets.
	if in := "… the real reason\n"; CutSecrets(in) != in {
		t.Fatalf("CutSecrets(%q) = %q, want it kept", in, CutSecrets(in))
	}
}
