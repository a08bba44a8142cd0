package integration

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// resignCertificate re-signs the certificate at path (tls.pem, or the CA's own
// ca.pem) over its own key with the CA key of cp's data directory, valid from
// notBefore to notAfter: a certificate that expired, or expires soon, without
// waiting years. The pins (of the key) do not change.
func resignCertificate(t *testing.T, cp *harness.ControlPlane, path string, notBefore, notAfter time.Time) {
	t.Helper()
	ca, err := datadir.Dir(cp.Dir).LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old, err := pki.ParseCertificatePEM(raw)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := *old
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	parent := ca.Cert
	if old.IsCA {
		parent = &tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, parent, old.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestServeRefusesAnExpiredCertificate: meshctl serve on a data directory whose
// tls.pem expired exits 7 at once, naming the file, when it expired and the command
// that renews it; it used to start silently and exit a minute later advising a
// quorum recovery from this node (finding 1 of the audit of ordinary weeks).
func TestServeRefusesAnExpiredCertificate(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "expired")
	tlsPEM := datadir.Dir(cp.Dir).Path(datadir.TLSCertFile)
	expiry := time.Now().Add(-time.Minute).Truncate(time.Second)
	resignCertificate(t, cp, tlsPEM, expiry.Add(-time.Hour), expiry)

	start := time.Now()
	p := cp.StartServe()
	code := p.Wait(20 * time.Second)
	if code != 7 {
		t.Fatalf("serve with tls.pem expired: exit %d after %s, want 7:\n%s", code, time.Since(start).Round(time.Millisecond), p.Output())
	}
	out := p.Output()
	for _, want := range []string{tlsPEM, "expired at " + expiry.UTC().Format(time.RFC3339), "meshctl control renew-certificate --data " + cp.Dir} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no leader within") {
		t.Errorf("serve waited for a leader before refusing:\n%s", out)
	}
}
