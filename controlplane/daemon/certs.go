package daemon

import (
	"crypto/x509"
	"fmt"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
)

// certificates are the TLS certificates this node serves with, as read at start:
// its own leaf (tls.pem) and the mesh CA's (ca.pem). serve reads them only then:
// a renewed one is taken at the next start.
type certificates struct {
	leaf, ca *x509.Certificate
}

// loadCertificates parses the certificates LoadIdentity checked and refuses them
// when they are not valid now (datadir.CertificateTimeError, exit 7): every peer
// and host would refuse them, and the node, unable to reach the others, used to
// exit a minute later advising a quorum recovery.
func (d *Daemon) loadCertificates(caPEM, leafPEM []byte) error {
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", d.opts.Dir.Path(datadir.CACertFile), err)
	}
	leaf, err := pki.ParseCertificatePEM(leafPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", d.opts.Dir.Path(datadir.TLSCertFile), err)
	}
	if err := d.opts.Dir.CheckCertificateTimes(ca, leaf, d.now()); err != nil {
		return err
	}
	d.certs = certificates{leaf: leaf, ca: ca}
	return nil
}
