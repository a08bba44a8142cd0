package integration

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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

// TestRenewedCertificatesKeepTheMesh: a single control node whose certificate
// expires in 100 days serves: `meshctl control status` names it, with the command
// that renews it, and exits 0 (a rolling restart's gate), its --json giving the
// date. With a host applying its declarations, it is stopped, and both its
// certificates run out (the mesh CA's ca.pem and its own tls.pem, re-signed over
// the same keys to have expired): serve refuses to start, exit 7, naming both.
// `meshctl control renew-certificate` on its data directory (it holds the CA key)
// refuses the leaf while the CA has expired, then renews the CA and the leaf in
// place, over the same keys: no pin changes. serve starts, the agent that kept
// running reconnects to it by itself, and applies the next declaration; `control
// status` names no certificate any more.
func TestRenewedCertificatesKeepTheMesh(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "renew")
	dir := datadir.Dir(cp.Dir)
	caPath, tlsPath := dir.Path(datadir.CACertFile), dir.Path(datadir.TLSCertFile)
	soon := time.Now().Add(100 * 24 * time.Hour).Truncate(time.Second).UTC()
	resignCertificate(t, cp, tlsPath, time.Now().Add(-time.Hour), soon)
	cp.Serve()
	if r := cp.Ctl("control", "status"); r.Code != 0 || !strings.Contains(r.Stdout, "cp-1's certificate (its tls.pem) expires in 99 days, at "+soon.Format(time.RFC3339)) ||
		!strings.Contains(r.Stdout, "Renew it on cp-1, which holds the CA key: `meshctl control renew-certificate --data DIR --certificate DIR/tls.pem`") {
		t.Fatalf("control status, cp-1's certificate expiring in 100 days: exit %d, want 0 naming it and the renewal:\n%s", r.Code, r.Combined())
	}
	if got := controlCertificates(t, cp); got["cp-1 leaf"] != "expires_soon "+soon.Format(time.RFC3339) {
		t.Fatalf("control status --json: certificates %v, want cp-1's leaf expires_soon at %s", got, soon.Format(time.RFC3339))
	}
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	cp.WaitConverged("web-1", 0, 20*time.Second)

	serve := cp.Process()
	serve.Signal(syscall.SIGTERM)
	if code := serve.Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve stopped with exit %d:\n%s", code, serve.Output())
	}
	pins := func() (string, string) {
		ca, err := os.ReadFile(caPath)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := os.ReadFile(tlsPath)
		if err != nil {
			t.Fatal(err)
		}
		caPin, _ := pki.LeafPinPEM(ca)
		leafPin, _ := pki.LeafPinPEM(leaf)
		return caPin, leafPin
	}
	caPin, leafPin := pins()
	expired := time.Now().Add(-time.Minute)
	resignCertificate(t, cp, caPath, expired.Add(-48*time.Hour), expired)
	resignCertificate(t, cp, tlsPath, expired.Add(-24*time.Hour), expired)

	p := cp.StartServe()
	if code := p.Wait(20 * time.Second); code != 7 || !strings.Contains(p.Output(), caPath+": the mesh CA's certificate expired at") ||
		!strings.Contains(p.Output(), tlsPath+": this control node's certificate expired at") {
		t.Fatalf("serve with both certificates expired: exit %d, want 7 naming both:\n%s", code, p.Output())
	}

	// The leaf first: refused, the CA has expired.
	if r := cp.Ctl("control", "renew-certificate", "--certificate", tlsPath); r.Code != 7 || !strings.Contains(r.Stderr, "renew it first") {
		t.Fatalf("renewing the leaf under an expired CA: exit %d, want 7 saying to renew the CA first:\n%s", r.Code, r.Combined())
	}
	for _, path := range []string{caPath, tlsPath} {
		if r := cp.Ctl("control", "renew-certificate", "--certificate", path); r.Code != 0 {
			t.Fatalf("renew %s: exit %d:\n%s", path, r.Code, r.Combined())
		}
	}
	if gotCA, gotLeaf := pins(); gotCA != caPin || gotLeaf != leafPin {
		t.Fatalf("the pins changed: CA %s (was %s), leaf %s (was %s)", gotCA, caPin, gotLeaf, leafPin)
	}

	cp.Serve()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/renewed","content":"yes"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("declare after the renewal: exit %d:\n%s\nagent:\n%s", r.Code, r.Combined(), h.Process().Output())
	}
	if got, err := h.ReadManaged("etc/renewed"); err != nil || got != "yes" {
		t.Fatalf("the host's file after the renewal: %q, %v", got, err)
	}
	if fams := cp.Scrape(); harness.Sum(fams, "mesh_tls_certificate_expiry_timestamp_seconds", "certificate=leaf") < float64(time.Now().Add(pki.LeafValidity-24*time.Hour).Unix()) {
		t.Errorf("mesh_tls_certificate_expiry_timestamp_seconds{certificate=leaf} = %v after the renewal", harness.Sum(fams, "mesh_tls_certificate_expiry_timestamp_seconds", "certificate=leaf"))
	}
	if r := cp.Ctl("control", "status"); r.Code != 0 || strings.Contains(r.Stdout, "certificate") {
		t.Errorf("control status after the renewal: exit %d, want 0 naming no certificate:\n%s", r.Code, r.Combined())
	}
	if got := controlCertificates(t, cp); !strings.HasPrefix(got["cp-1 leaf"], "valid ") || !strings.HasPrefix(got["cp-1 ca"], "valid ") {
		t.Errorf("control status --json after the renewal: certificates %v, want both valid", got)
	}
}

// controlCertificates is what `meshctl control status --json` says of the control
// nodes' certificates: "NODE leaf" or "NODE ca" to "STATE NOT-AFTER".
func controlCertificates(t *testing.T, cp *harness.ControlPlane) map[string]string {
	t.Helper()
	s, r := controlStatusOf(t, cp)
	if r.Code != 0 {
		t.Fatalf("control status --json: exit %d:\n%s", r.Code, r.Combined())
	}
	out := map[string]string{}
	for _, c := range s.Certificates {
		out[c.Node+" "+c.Certificate] = c.State + " " + c.NotAfter.UTC().Format(time.RFC3339)
	}
	return out
}

// TestCertificateLifetimesMatchTheCode: docs/operations.md's "Certificate lifetimes"
// gives the validity periods pki issues with, the warning serve gives, and names
// only tests that exist: a period changed in the code, or a test renamed, cannot
// leave the section saying otherwise.
func TestCertificateLifetimesMatchTheCode(t *testing.T) {
	raw, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## Certificate lifetimes\n")
	if start < 0 {
		t.Fatal(`docs/operations.md has no section "Certificate lifetimes"`)
	}
	sec := doc[start+1:]
	if end := strings.Index(sec[3:], "\n## "); end >= 0 {
		sec = sec[:end+3]
	}
	year, day := 365*24*time.Hour, 24*time.Hour
	// In days, as the certificates are made: "20 years" ended five days early (a
	// docs walkthrough).
	days := func(d time.Duration) string {
		n := int(d / day)
		return fmt.Sprintf("%d,%03d days (about %d years)", n/1000, n%1000, int(d/year))
	}
	for _, want := range []string{
		fmt.Sprintf("| %s from the bootstrap |", days(pki.CAValidity)),
		fmt.Sprintf("| %s from when it was made", days(pki.LeafValidity)),
		"less than 180 days left",
		"meshctl control renew-certificate --data /var/lib/meshctl --certificate /var/lib/meshctl/ca.pem",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("the section does not say %q", want)
		}
	}
	srcs, _ := filepath.Glob("*_test.go")
	var all strings.Builder
	for _, f := range srcs {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9]+)`").FindAllStringSubmatch(sec, -1) {
		if !strings.Contains(all.String(), "func "+m[1]+"(") {
			t.Errorf("the section names %s, which is no test of this package", m[1])
		}
	}
}
