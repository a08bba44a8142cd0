package main

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/pki"
	"mesh/host/atomicfile"
	"mesh/host/readfile"
)

// renewSub is the subcommand of `meshctl control` that renews a certificate.
const renewSub = "renew-certificate"

// Kinds of certificate `control renew-certificate` renews (its --json "kind").
const (
	renewedLeaf = "leaf"
	renewedCA   = "ca"
)

// renewResult is what `meshctl control renew-certificate --json` prints.
type renewResult struct {
	Kind        string `json:"kind"`
	Certificate string `json:"certificate"`
	Out         string `json:"out"`
	Subject     string `json:"subject"`
	// Pin is the SHA-256 of the key (hex), the same before and after.
	Pin              string    `json:"pin"`
	NotBefore        time.Time `json:"not_before"`
	NotAfter         time.Time `json:"not_after"`
	PreviousNotAfter time.Time `json:"previous_not_after"`
	// CANotAfter is when the mesh CA's certificate in --data expires (for a CA
	// renewed, the new one's).
	CANotAfter time.Time `json:"ca_not_after"`
	Next       string    `json:"next"`
}

// certificateFileError is a --certificate file that cannot be renewed: missing, cut
// short, not a certificate, not of this mesh's CA. Kind is the datadir error it
// matches (exit 7, as a --ca file of the same faults).
type certificateFileError struct {
	Path, Reason string
	Kind         error
}

func (e *certificateFileError) Error() string {
	return fmt.Sprintf("--certificate %s %s", e.Path, e.Reason)
}

func (e *certificateFileError) Unwrap() error { return e.Kind }

// renewCertificate is `meshctl control renew-certificate`: on the machine that holds
// the mesh CA key (the data directory of --data), it re-issues the certificate of
// the file certPath over the key it already has, with a fresh validity, and writes
// it atomically to out (certPath when empty). A control node's certificate
// (tls.pem) is re-issued as pki.RenewLeaf does, the mesh CA's own (ca.pem) as
// pki.CA.Renew does: every pin in the mesh is of a key, so none changes. It calls
// no control plane: it works when certificates have expired and nothing serves.
func renewCertificate(cp *controlPlaneFlags, cio *cliIO, certPath, out string, asJSON bool, now time.Time) error {
	switch {
	case cp.remote() || len(cp.servers) > 0:
		return usagef("%s runs on the machine that holds the mesh CA key, with its data directory (--data), and calls no control plane: --servers, --creds, --ca and --context do not apply", renewSub)
	case cp.dir == "":
		return usagef("%s needs --data, the data directory that holds the mesh CA key (ca-key.pem)", renewSub)
	case certPath == "":
		return usagef("%s needs --certificate, the certificate to renew: a copy of a control node's tls.pem, or the mesh CA's ca.pem", renewSub)
	}
	if out == "" {
		out = certPath
	}
	dir := datadir.Dir(cp.dir)
	cfg, err := dir.LoadConfig()
	if err != nil {
		return err
	}
	if !dir.Exists(datadir.CAKeyFile) {
		return fmt.Errorf("%w: this is %s, and its data directory holds no %s: renew certificates where the mesh CA key is (`meshctl nodes` marks that control node (CA); the bootstrap machine, unless the key was restored elsewhere from its backup)",
			join.ErrNotCAHolder, cfg.Node, datadir.CAKeyFile)
	}
	if err := dir.CheckKeysPrivate(datadir.CAKeyFile); err != nil {
		return err
	}
	ca, err := dir.LoadCA()
	if err != nil {
		return err
	}
	old, err := readCertificate(certPath)
	if err != nil {
		return err
	}

	res := renewResult{Certificate: certPath, Out: out, Subject: old.Subject.CommonName, PreviousNotAfter: old.NotAfter.UTC()}
	var certPEM []byte
	if old.IsCA {
		if pki.PinOf(old) != ca.Pin() {
			return &certificateFileError{Path: certPath, Kind: datadir.ErrCorrupt,
				Reason: fmt.Sprintf("is the certificate of another CA (its pin is sha256:%s), not of this mesh's (sha256:%s in %s)", pki.LeafPin(old), pki.LeafPin(ca.Cert), dir.Path(datadir.CACertFile))}
		}
		renewed, err := ca.Renew(now)
		if err != nil {
			return err
		}
		// This node's own certificate verifies under it, as every other the CA
		// issued: the same name and key.
		if leafPEM, err := dir.ReadFile(datadir.TLSCertFile); err == nil {
			if leaf, err := pki.ParseCertificatePEM(leafPEM); err == nil {
				if err := leaf.CheckSignatureFrom(renewed.Cert); err != nil {
					return fmt.Errorf("the renewed CA certificate does not verify %s: %w; nothing was written", dir.Path(datadir.TLSCertFile), err)
				}
			}
		}
		certPEM = renewed.CertPEM
		res.Kind, res.Pin = renewedCA, pki.LeafPin(renewed.Cert)
		res.NotBefore, res.NotAfter, res.CANotAfter = renewed.Cert.NotBefore.UTC(), renewed.Cert.NotAfter.UTC(), renewed.Cert.NotAfter.UTC()
		where := "every other control node"
		if !sameFile(out, dir.Path(datadir.CACertFile)) {
			where = "every control node, this one's included"
		}
		res.Next = fmt.Sprintf("copy %s as %s into the data directory of %s, then restart every control node's meshctl serve, this one's too, one at a time (docs/operations.md, \"Rolling restarts\"); the CA's key, name and pin are unchanged, so every certificate it issued still verifies, and hosts and operators' --ca copies need nothing",
			out, datadir.CACertFile, where)
	} else {
		if now.After(ca.Cert.NotAfter) {
			return fmt.Errorf("%w: the mesh CA's certificate %s expired at %s: renew it first (`%s --data %s --certificate %s`), then this one",
				datadir.ErrCertificateTime, dir.Path(datadir.CACertFile), ca.Cert.NotAfter.UTC().Format(time.RFC3339), datadir.RenewCommand, dir, dir.Path(datadir.CACertFile))
		}
		newPEM, cert, err := ca.RenewLeaf(old, now)
		if errors.Is(err, pki.ErrNotIssuedByCA) {
			return &certificateFileError{Path: certPath, Kind: datadir.ErrCorrupt,
				Reason: fmt.Sprintf("was not issued by this mesh's CA (%s): it is another mesh's certificate, or not a control node's", dir.Path(datadir.CACertFile))}
		}
		if err != nil {
			return err
		}
		certPEM = newPEM
		res.Kind, res.Pin = renewedLeaf, pki.LeafPin(cert)
		res.NotBefore, res.NotAfter, res.CANotAfter = cert.NotBefore.UTC(), cert.NotAfter.UTC(), ca.Cert.NotAfter.UTC()
		res.Next = fmt.Sprintf("put %s in place of %s in the data directory of the control node it belongs to (%s), then restart that node's meshctl serve; its key and pin are unchanged, so nothing else changes",
			out, datadir.TLSCertFile, old.Subject.CommonName)
		if sameFile(out, dir.Path(datadir.TLSCertFile)) {
			// Renewed in place: it said to put the file where it already was (a
			// docs walkthrough).
			res.Next = fmt.Sprintf("restart this control node's meshctl serve (%s), which reads %s as it starts; its key and pin are unchanged, so nothing else changes",
				old.Subject.CommonName, datadir.TLSCertFile)
		}
	}
	if err := checkOut(out, certPEM, dir); err != nil {
		return err
	}
	if err := writeCertificate(out, certPEM); err != nil {
		return err
	}

	if asJSON {
		return writeJSON(cio.stdout, res)
	}
	what := fmt.Sprintf("the certificate of %q", res.Subject)
	if res.Kind == renewedCA {
		what = "the mesh CA's certificate"
	}
	fmt.Fprintf(cio.stdout, "renewed %s (%s): valid until %s (it was until %s), over the same key (pin sha256:%s)\n",
		what, certPath, res.NotAfter.Format(time.RFC3339), res.PreviousNotAfter.Format(time.RFC3339), res.Pin)
	fmt.Fprintf(cio.stdout, "wrote %s\n", out)
	fmt.Fprintf(cio.stdout, "next: %s\n", res.Next)
	if res.Kind == renewedLeaf && res.CANotAfter.Before(res.NotAfter) {
		fmt.Fprintf(cio.stdout, "note: the mesh CA's certificate (%s) expires at %s, before this one: renew it too before then (`%s --data %s --certificate %s`)\n",
			dir.Path(datadir.CACertFile), res.CANotAfter.Format(time.RFC3339), datadir.RenewCommand, dir, dir.Path(datadir.CACertFile))
	}
	return nil
}

// readCertificate reads the PEM certificate of --certificate (its first block).
func readCertificate(path string) (*x509.Certificate, error) {
	data, err := readfile.Regular(path, datadir.MaxFileSize)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &certificateFileError{Path: path, Kind: datadir.ErrMissing, Reason: "does not exist"}
	case errors.Is(err, readfile.ErrTooLarge):
		return nil, &certificateFileError{Path: path, Kind: datadir.ErrTooLarge, Reason: fmt.Sprintf("is over %d bytes: not a certificate", datadir.MaxFileSize)}
	case errors.Is(err, readfile.ErrNotRegular):
		return nil, &certificateFileError{Path: path, Kind: datadir.ErrNotAFile, Reason: "cannot be used: " + err.Error()}
	case err != nil:
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &certificateFileError{Path: path, Kind: datadir.ErrTruncated, Reason: "is empty: give a copy of a control node's tls.pem, or the mesh CA's ca.pem"}
	}
	cert, err := pki.ParseCertificatePEM(data)
	if err != nil {
		why := "holds no PEM certificate"
		if !errors.Is(err, pki.ErrNoCertificate) {
			why = "holds a certificate that cannot be parsed (" + err.Error() + ")"
		}
		return nil, &certificateFileError{Path: path, Kind: datadir.ErrCorrupt, Reason: why + ": give a copy of a control node's tls.pem, or the mesh CA's ca.pem"}
	}
	return cert, nil
}

// checkOut refuses, before anything is written, an --out the renewed certificate
// renewed must not replace: a file that is not a copy of a certificate of the same
// key (a renewal keeps the key, so the file it replaces holds the old certificate
// of that key, or is new), and, in the data directory, any file but tls.pem and
// ca.pem. Before, any regular file was replaced: `--out …/ca-key.pem`, one
// tab-completion away from ca.pem, replaced the mesh CA's key with its certificate,
// exit 0, and no certificate could ever be renewed again (a reviewer's run).
func checkOut(out string, renewed []byte, dir datadir.Dir) error {
	// A directory that does not exist is refused, not made: a typo in it
	// (/etc/mesh/tsl/…) wrote the certificate where nothing reads it, exit 0
	// (a walkthrough).
	d, err := os.Stat(filepath.Dir(out))
	if errors.Is(err, fs.ErrNotExist) {
		return usagef("--out %s: its directory %s does not exist: nothing was written; give a path in a directory that exists (it is not made: a typo would put the certificate where nothing reads it)", out, filepath.Dir(out))
	}
	if err != nil {
		return usagef("--out %s: its directory %s cannot be used (%v): nothing was written; give a path in a directory that exists", out, filepath.Dir(out), errors.Unwrap(err))
	}
	if !d.IsDir() {
		return usagef("--out %s: %s is not a directory: nothing was written; give a path in a directory that exists", out, filepath.Dir(out))
	}
	if own, err := os.Stat(string(dir)); err == nil && os.SameFile(d, own) {
		if base := filepath.Base(out); base != datadir.TLSCertFile && base != datadir.CACertFile {
			return usagef("--out %s is in the data directory %s, where only %s and %s are certificates: nothing was written; give one of those, or a path outside it",
				out, dir, datadir.TLSCertFile, datadir.CACertFile)
		}
	}
	if fi, err := os.Lstat(out); errors.Is(err, fs.ErrNotExist) {
		return nil // a new file
	} else if err == nil && !fi.Mode().IsRegular() {
		return usagef("--out %s is not a regular file (%v): nothing was written; give the file the renewed certificate replaces, or a new path (a link is not followed: the rename would replace the link, not what it names)", out, fi.Mode().Type())
	}
	data, err := readfile.Regular(out, datadir.MaxFileSize)
	switch {
	case errors.Is(err, readfile.ErrNotRegular):
		return usagef("--out %s is not a regular file (%v): nothing was written; give the file the renewed certificate replaces, or a new path", out, err)
	case errors.Is(err, readfile.ErrTooLarge):
		return usagef("--out %s is over %d bytes, not a certificate: nothing was written; give the file the renewed certificate replaces, or a new path", out, datadir.MaxFileSize)
	case err != nil:
		return fmt.Errorf("read --out %s before replacing it: %w; nothing was written", out, err)
	}
	newCert, err := pki.ParseCertificatePEM(renewed)
	if err != nil {
		return err
	}
	if bytes.Contains(data, []byte("PRIVATE KEY")) {
		return usagef("--out %s holds a private key: nothing was written; give the file the renewed certificate replaces (a copy of tls.pem or ca.pem), or a new path", out)
	}
	cur, err := pki.ParseCertificatePEM(data)
	if err != nil {
		return usagef("--out %s holds no certificate (%v): nothing was written; give the file the renewed certificate replaces (a copy of tls.pem or ca.pem), or a new path", out, err)
	}
	if pki.PinOf(cur) != pki.PinOf(newCert) {
		return usagef("--out %s is the certificate of another key (%q, pin sha256:%s; the renewed one's is sha256:%s): nothing was written; give the copy of the certificate being renewed, or a new path",
			out, cur.Subject.CommonName, pki.LeafPin(cur), pki.LeafPin(newCert))
	}
	return nil
}

// writeCertificate writes a renewed certificate to path atomically (temp file,
// fsync, rename, fsync of the directory). The file it replaces keeps its mode (at
// most 0644: a certificate is public, and no one else may write it) and, when
// meshctl runs as root, its owner, given to the temp file before the rename: serve
// refuses a tls.pem or ca.pem another user owns. A new file is 0644.
func writeCertificate(path string, data []byte) error {
	mode := fs.FileMode(0o644)
	owner, group := -1, -1
	if fi, err := os.Lstat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return &certificateFileError{Path: path, Kind: datadir.ErrNotAFile, Reason: "(--out) is not a regular file: give where the renewed certificate goes"}
		}
		mode = fi.Mode().Perm() & 0o644
		if os.Geteuid() == 0 {
			// Its group too: a 0640 file given root's group was no longer
			// readable by its own (a walkthrough).
			uid, _ := datadir.FileOwner(fi)
			gid, _ := datadir.FileGroup(fi)
			if uid != os.Geteuid() || gid != os.Getegid() {
				owner, group = uid, gid
			}
		}
	}
	write := func() error { return atomicfile.WriteFile(path, data, mode) }
	if owner >= 0 {
		write = func() error { return atomicfile.WriteFileOwned(path, data, mode, owner, group) }
	}
	if err := write(); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			// A copy root made in /tmp (sticky), renewed as the meshctl user, as
			// the doc's steps go (a walkthrough): said, with the ways out.
			return fmt.Errorf("write the renewed certificate: this user may not replace %s (another user's file in a sticky directory such as /tmp, or a directory this user may not write): nothing was written; "+
				"give --out a path in a directory this user owns, or copy the certificate there first, or run this as root: %w", path, err)
		}
		return fmt.Errorf("write the renewed certificate: %w", err)
	}
	return nil
}

// sameFile reports whether a and b name the same file (both existing), or the same
// path.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(fa, fb)
	}
	return filepath.Clean(a) == filepath.Clean(b)
}
