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
