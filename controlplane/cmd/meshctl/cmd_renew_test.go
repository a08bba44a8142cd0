package main

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/freeport"
)

// bootstrappedDir bootstraps a control node of mesh in a new data directory.
func bootstrappedDir(t *testing.T, mesh string) datadir.Dir {
	t.Helper()
	addrs := freeport.Addrs(t, 3)
	dir := datadir.Dir(filepath.Join(t.TempDir(), "cp"))
	if err := bootstrap.Run(bootstrap.Options{Mesh: mesh, Dir: dir, Listen: addrs[0], RaftListen: addrs[1], ClusterListen: addrs[2]}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// readCert parses the PEM certificate at path.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCertificatePEM(raw)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// expiredLeafOf writes to path a leaf of dir's CA for "control cp-2", over a new key,
// that expired an hour ago, as a node's tls.pem copied to the CA holder would be.
func expiredLeafOf(t *testing.T, dir datadir.Dir, path string) *x509.Certificate {
	t.Helper()
	ca, err := dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	l, err := ca.IssueLeaf("control cp-2", []net.IP{net.IPv4(10, 0, 0, 2)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := pki.ParseCertificatePEM(l.CertPEM)
	tmpl := *fresh
	tmpl.SerialNumber = big.NewInt(7)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca.Cert, fresh.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return readCert(t, path)
}

// TestControlRenewCertificate: `meshctl control renew-certificate` on the CA holder
// re-issues an expired copy of a node's tls.pem over its key (same pin, subject and
// addresses, ten years from now, chaining to the CA) into --out, 0644, the copy
// untouched; in place, a file keeps its mode; --json says what it did. The CA's own
// ca.pem renewed in place keeps the CA pin, and the data directory's identity still
// loads (serve starts on it). Where no CA key is, exit 4; a certificate missing or of
// another mesh, exit 7; the command line wrong, exit 2.
func TestControlRenewCertificate(t *testing.T) {
	dir := bootstrappedDir(t, "renew")
	work := t.TempDir()
	copyPath := filepath.Join(work, "cp-2-tls.pem")
	old := expiredLeafOf(t, dir, copyPath)
	before, _ := os.ReadFile(copyPath)

	out := filepath.Join(work, "cp-2-renewed.pem")
	code, stdout, stderr := runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", copyPath, "--out", out)
	if code != exitOK {
		t.Fatalf("renew a node's certificate: exit %d:\n%s%s", code, stdout, stderr)
	}
	renewed := readCert(t, out)
	ca := readCert(t, dir.Path(datadir.CACertFile))
	if pki.LeafPin(renewed) != pki.LeafPin(old) || renewed.Subject.CommonName != "control cp-2" || len(renewed.IPAddresses) != 1 || !renewed.IPAddresses[0].Equal(net.IPv4(10, 0, 0, 2)) {
		t.Fatalf("renewed: pin %s (was %s), subject %q, IPs %v", pki.LeafPin(renewed), pki.LeafPin(old), renewed.Subject, renewed.IPAddresses)
	}
	if d := time.Until(renewed.NotAfter); d < pki.LeafValidity-time.Hour {
		t.Errorf("renewed for %s, want %s", d, pki.LeafValidity)
	}
	if err := pki.VerifyPinnedChain([]*x509.Certificate{renewed, ca}, pki.PinOf(ca)); err != nil {
		t.Errorf("the renewed certificate does not chain to the mesh CA: %v", err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o644 {
		t.Errorf("--out written %v, want 0644", fi.Mode().Perm())
	}
	if after, _ := os.ReadFile(copyPath); string(after) != string(before) {
		t.Error("--certificate was changed, with --out given")
	}
	for _, want := range []string{"valid until " + renewed.NotAfter.UTC().Format(time.RFC3339), "pin sha256:" + pki.LeafPin(old), "wrote " + out, "in place of tls.pem", "restart"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output does not say %q:\n%s", want, stdout)
		}
	}

	// In place, 0600, with --json.
	if err := os.Chmod(copyPath, 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", copyPath, "--json")
	if code != exitOK {
		t.Fatalf("renew in place: exit %d:\n%s", code, stderr)
	}
	var res renewResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json: %v:\n%s", err, stdout)
	}
	inPlace := readCert(t, copyPath)
	if res.Kind != "leaf" || res.Out != copyPath || res.Pin != pki.LeafPin(old) || !res.NotAfter.Equal(inPlace.NotAfter) ||
		!res.PreviousNotAfter.Equal(old.NotAfter) || res.Subject != "control cp-2" || res.Next == "" {
		t.Errorf("--json: %+v", res)
	}
	if fi, _ := os.Stat(copyPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("renewed in place, the file's mode became %v, want 0600 as it was", fi.Mode().Perm())
	}
	// The node's own tls.pem in place: the next step is a restart, not to put the
	// file where it is already (a docs walkthrough).
	own := dir.Path(datadir.TLSCertFile)
	code, stdout, stderr = runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", own)
	if code != exitOK || !strings.Contains(stdout, "next: restart this control node's meshctl serve") || strings.Contains(stdout, "in place of") {
		t.Errorf("renew the node's own tls.pem in place: exit %d, want the next step a restart:\n%s%s", code, stdout, stderr)
	}

	// The CA's own certificate, in place.
	caPath := dir.Path(datadir.CACertFile)
	code, stdout, stderr = runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", caPath)
	if code != exitOK {
		t.Fatalf("renew the CA: exit %d:\n%s", code, stderr)
	}
	newCA := readCert(t, caPath)
	if pki.PinOf(newCA) != pki.PinOf(ca) || newCA.SerialNumber.Cmp(ca.SerialNumber) == 0 || time.Until(newCA.NotAfter) < pki.CAValidity-time.Hour {
		t.Fatalf("renewed CA: pin changed %v, serial %v, until %s", pki.PinOf(newCA) != pki.PinOf(ca), newCA.SerialNumber, newCA.NotAfter)
	}
	if !strings.Contains(stdout, "the mesh CA's certificate") || !strings.Contains(stdout, "into the data directory of every other control node") || !strings.Contains(stdout, "this one's too") {
		t.Errorf("the CA's renewal does not say where it goes:\n%s", stdout)
	}
	cfg, err := dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dir.LoadIdentity(cfg.CAPin); err != nil {
		t.Fatalf("the data directory's identity does not load with the renewed ca.pem: %v", err)
	}
	if err := pki.VerifyPinnedChain([]*x509.Certificate{renewed, newCA}, pki.PinOf(ca)); err != nil {
		t.Errorf("a leaf renewed before the CA does not chain to the renewed CA: %v", err)
	}

	// Refusals.
	other := bootstrappedDir(t, "other")
	noKey := bootstrappedDir(t, "nokey")
	if err := os.Remove(noKey.Path(datadir.CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no CA key here", []string{"--data", string(noKey), "--certificate", noKey.Path(datadir.TLSCertFile)}, exitRefused, "holds no ca-key.pem"},
		{"certificate missing", []string{"--data", string(dir), "--certificate", filepath.Join(work, "nosuch.pem")}, exitDataDir, "does not exist"},
		{"another mesh's leaf", []string{"--data", string(dir), "--certificate", other.Path(datadir.TLSCertFile), "--out", filepath.Join(work, "x.pem")}, exitDataDir, "was not issued by this mesh's CA"},
		{"another mesh's CA", []string{"--data", string(dir), "--certificate", other.Path(datadir.CACertFile), "--out", filepath.Join(work, "y.pem")}, exitDataDir, "another CA"},
		{"not a certificate", []string{"--data", string(dir), "--certificate", dir.Path(datadir.ConfigFile), "--out", filepath.Join(work, "z.pem")}, exitDataDir, "no PEM certificate"},
		{"--out in a directory that does not exist", []string{"--data", string(dir), "--certificate", copyPath, "--out", filepath.Join(work, "tsl", "w.pem")}, exitUsage, "does not exist"},
		{"--out under a file", []string{"--data", string(dir), "--certificate", copyPath, "--out", filepath.Join(copyPath, "w.pem")}, exitUsage, "is not a directory"},
		{"no --certificate", []string{"--data", string(dir)}, exitUsage, "--certificate"},
		{"no --data", []string{"--certificate", copyPath}, exitUsage, "--data"},
		{"operator credentials", []string{"--data", string(dir), "--certificate", copyPath, "--servers", "127.0.0.1:1"}, exitUsage, "calls no control plane"},
	} {
		code, _, stderr := runCLI(append([]string{"control", "renew-certificate"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.says) {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", c.name, code, c.code, c.says, stderr)
		}
		// A renewal's refusal spoke of minting control tokens (a walkthrough).
		if strings.Contains(stderr, "control tokens are minted") {
			t.Errorf("%s: a renewal's refusal speaks of control tokens:\n%s", c.name, stderr)
		}
	}
	for _, f := range []string{"x.pem", "y.pem", "z.pem", "tsl"} {
		if _, err := os.Stat(filepath.Join(work, f)); err == nil {
			t.Errorf("a refused renewal wrote %s", f)
		}
	}
	if code, _, stderr := runCLI("control", "status", "--data", string(dir), "--certificate", copyPath); code != exitUsage || !strings.Contains(stderr, "renew-certificate") {
		t.Errorf("--certificate given to control status: exit %d:\n%s", code, stderr)
	}
}

// TestRenewCertificateRefusesAnOutItMustNotReplace (a reviewer's run): `--out
// …/ca-key.pem`, one tab-completion away from ca.pem, replaced the mesh CA's key
// with its certificate, exit 0, and no certificate could be renewed again. Now an
// --out that holds a key, no certificate, or the certificate of another key, that
// is a link, or that is a new name in the data directory is refused, exit 2,
// nothing written; the file given back its owner is given it before it takes its
// name.
func TestRenewCertificateRefusesAnOutItMustNotReplace(t *testing.T) {
	dir := bootstrappedDir(t, "m")
	work := t.TempDir()
	copyPath := filepath.Join(work, "cp-2-tls.pem")
	expiredLeafOf(t, dir, copyPath)
	other := filepath.Join(work, "other.pem")
	expiredLeafOf(t, dir, other) // a leaf of the same CA over another key
	link := filepath.Join(work, "link.pem")
	if err := os.Symlink(copyPath, link); err != nil {
		t.Fatal(err)
	}
	keyCopy := filepath.Join(work, "ca-key.pem")
	if b, err := os.ReadFile(dir.Path(datadir.CAKeyFile)); err != nil || os.WriteFile(keyCopy, b, 0o600) != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, p := range []string{keyCopy, dir.Path(datadir.CAKeyFile), dir.Path(datadir.TLSKeyFile), dir.Path(datadir.ConfigFile), dir.Path(datadir.TLSCertFile), other, copyPath} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = b
	}
	for _, c := range []struct {
		name, cert, out, says string
	}{
		{"the CA's key", dir.Path(datadir.CACertFile), dir.Path(datadir.CAKeyFile), "is in the data directory"},
		{"the node's key", copyPath, dir.Path(datadir.TLSKeyFile), "is in the data directory"},
		{"a copy of the CA's key", dir.Path(datadir.CACertFile), keyCopy, "holds a private key"},
		{"the CA over the node's certificate", dir.Path(datadir.CACertFile), dir.Path(datadir.TLSCertFile), "the certificate of another key"},
		{"a leaf over another node's", copyPath, other, "the certificate of another key"},
		{"a leaf over this node's tls.pem", copyPath, dir.Path(datadir.TLSCertFile), "the certificate of another key"},
		{"not a certificate", copyPath, dir.Path(datadir.ConfigFile), "is in the data directory"},
		{"a new name in the data directory", copyPath, filepath.Join(string(dir), "cp-2.pem"), "is in the data directory"},
		{"a link", copyPath, link, "not a regular file"},
	} {
		code, _, stderr := runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", c.cert, "--out", c.out)
		if code != exitUsage || !strings.Contains(stderr, c.says) || !strings.Contains(stderr, "nothing was written") {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", c.name, code, exitUsage, c.says, stderr)
		}
	}
	for p, b := range before {
		if got, err := os.ReadFile(p); err != nil || string(got) != string(b) {
			t.Errorf("a refused renewal changed %s: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(string(dir), "cp-2.pem")); err == nil {
		t.Error("a refused renewal made a file in the data directory")
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v", err)
	}
	// The copy being renewed, and a copy of it elsewhere, are what --out is for.
	again := filepath.Join(work, "again.pem")
	if err := os.WriteFile(again, before[copyPath], 0o640); err != nil || os.Chmod(again, 0o640) != nil { // the chmod: meshctl's umask, set by another test's run
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", copyPath, "--out", again); code != 0 {
		t.Fatalf("--out a copy of the same certificate: exit %d:\n%s%s", code, stdout, stderr)
	}
	if os.Geteuid() != 0 {
		return
	}
	// As root, a file another user owns is given back to them, as the temp file
	// it is before its rename.
	// Its group too (a walkthrough: root's group, and a 0640 file unreadable by
	// its own).
	if err := os.Chown(again, 4242, 4343); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runCLI("control", "renew-certificate", "--data", string(dir), "--certificate", again); code != 0 {
		t.Fatalf("renew in place: exit %d:\n%s%s", code, stdout, stderr)
	}
	if fi, err := os.Stat(again); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 4242 || fi.Sys().(*syscall.Stat_t).Gid != 4343 || fi.Mode().Perm() != 0o640 {
		t.Errorf("renewed in place: %v %v, want owned by uid 4242, group 4343, mode 0640", fi, err)
	}
}
