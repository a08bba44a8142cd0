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

// TestNamedSecretsAreHidden (a walkthrough): a failing hook that printed a
// service's configuration (DB_PASSWORD=hunter2) had it shown by declare --wait,
// status and nodes --json, and kept in every control node's Raft log and backups.
// The value given to a name of a password, secret, token or key, as a shell, an
// environment, INI, YAML, JSON or an HTTP header writes it, and a URL's password,
// are hidden; the text around them, and text that names no secret, are kept; and
// hiding again what was hidden changes nothing (the control plane hides an
// agent's report again).
func TestNamedSecretsAreHidden(t *testing.T) {
	const pw = "hunter2x"
	for _, c := range []struct{ in, want string }{
		{"DB_PASSWORD=" + pw, "DB_PASSWORD=" + Hidden},
		{"export AWS_SECRET_ACCESS_KEY='" + pw + " more'", "export AWS_SECRET_ACCESS_KEY=" + Hidden},
		{`{"api_key": "` + pw + `", "user": "app"}`, `{"api_key": ` + Hidden + `, "user": "app"}`},
		{"password: " + pw + "\nport: 5432", "password: " + Hidden + "\nport: 5432"},
		{"[db]\npasswd = " + pw + "\n", "[db]\npasswd = " + Hidden + "\n"},
		{"Authorization: Bearer " + pw, "Authorization: " + Hidden},
		{"start: --password=" + pw + " --port 80", "start: --password=" + Hidden + " --port 80"},
		{"SECRET_KEY_BASE=" + pw + ";next", "SECRET_KEY_BASE=" + Hidden + ";next"},
		{"password=" + pw + ",more", "password=" + Hidden},
		{"dsn postgres://app:" + pw + "@db:5432/x failed", "dsn postgres://app:" + Hidden + "@db:5432/x failed"},
		{"GITHUB_TOKEN=" + pw, "GITHUB_TOKEN=" + Hidden},
	} {
		got := Secrets(c.in)
		if got != c.want || strings.Contains(got, pw) {
			t.Errorf("Secrets(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := Secrets(got); again != got {
			t.Errorf("hidden again, %q became %q", got, again)
		}
	}
	for _, kept := range []string{
		"hook failed: exit status 1", "nginx: [emerg] unknown directive \"foo\" in /etc/nginx/nginx.conf:12",
		"declaration signing key: not in keyring", "author: someone", "keyring epoch 2", "port=5432 user=app",
		"https://example.com:8443/path", "secret: " + Hidden, "password: <a token: not shown>",
	} {
		if got := Secrets(kept); got != kept {
			t.Errorf("Secrets(%q) = %q, want it kept", kept, got)
		}
	}
	// A token given to a secret's name is hidden whole, as a token.
	tok := "mesh1_demo_192.0.2.10:7300,192.0.2.11:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1796000900_" + strings.Repeat("5e", 32) + "_0badc0de"
	if got := Secrets("MESH_TOKEN=" + tok + " x"); strings.Contains(got, "5e5e") || strings.Contains(got, "192.0.2.11") || !strings.HasSuffix(got, " x") {
		t.Errorf("a token given to MESH_TOKEN: %q", got)
	}
}
