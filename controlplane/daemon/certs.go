package daemon

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
)

// expiryWarning is how long before a certificate of this node expires that serve
// warns of it: pki.RenewWithin, the time `meshctl control status` names it in too.
const expiryWarning = pki.RenewWithin

// expiryCheckEvery is how often a running node looks at its certificates' expiry
// again: once a day.
var expiryCheckEvery = 24 * time.Hour

// Labels of mesh_tls_certificate_expiry_timestamp_seconds.
const (
	certLeaf = "leaf"
	certCA   = "ca"
)

// certificates are the TLS certificates this node serves with, as read at start:
// its own leaf (tls.pem) and the mesh CA's (ca.pem). serve reads them only then:
// a renewed one is taken at the next start.
type certificates struct {
	leaf, ca *x509.Certificate
}

// notAfter is when the two certificates expire, in UTC (zero for one not read).
// The heartbeats carry them, so that every control node's view shows them, and
// `meshctl control status` names a node whose certificate expires soon.
func (c certificates) notAfter() (leaf, ca time.Time) {
	if c.leaf != nil {
		leaf = c.leaf.NotAfter.UTC()
	}
	if c.ca != nil {
		ca = c.ca.NotAfter.UTC()
	}
	return leaf, ca
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

// warnExpiry logs a warning for each certificate of this node that expires within
// expiryWarning of now, naming the file, when, and how to renew it.
func (d *Daemon) warnExpiry(now time.Time) {
	for _, c := range []struct {
		cert *x509.Certificate
		name string
		ca   bool
	}{{d.certs.ca, datadir.CACertFile, true}, {d.certs.leaf, datadir.TLSCertFile, false}} {
		if c.cert == nil {
			continue
		}
		left := c.cert.NotAfter.Sub(now)
		if left >= expiryWarning {
			continue
		}
		path := d.opts.Dir.Path(c.name)
		if left <= 0 {
			// Expired while serve runs (a start refuses it): said as such, not
			// "expires soon" with days left below zero.
			what := "this control node's certificate expired: the other control nodes and the hosts refuse it"
			if c.ca {
				what = "the mesh CA's certificate expired: every host and control node refuses every broker"
			}
			d.log.Error(what+". Renew it over the same key where the CA key is ("+datadir.RenewCommand+"), put it in place and restart (docs/operations.md, \"Certificate lifetimes\")",
				"file", path, "not_after", c.cert.NotAfter.UTC().Format(time.RFC3339))
			continue
		}
		if c.ca {
			d.log.Warn("the mesh CA's certificate expires soon: then every host and control node refuses every broker. "+
				"Renew it over the same key where the CA key is ("+datadir.RenewCommand+" --data CA-DIR --certificate CA-DIR/ca.pem: the CA's pin, and every certificate it issued, stay good), "+
				"copy the new ca.pem into every control node's data directory and restart each (docs/operations.md, \"Certificate lifetimes\")",
				"file", path, "not_after", c.cert.NotAfter.UTC().Format(time.RFC3339), "days_left", int(left/(24*time.Hour)))
			continue
		}
		d.log.Warn("this control node's certificate expires soon: then the other control nodes and the hosts refuse it. "+
			"Renew it over the same key where the CA key is ("+datadir.RenewCommand+" --data CA-DIR --certificate COPY-OF-tls.pem: its pin stays), "+
			"put the result in place of tls.pem and restart this node (docs/operations.md, \"Certificate lifetimes\")",
			"file", path, "not_after", c.cert.NotAfter.UTC().Format(time.RFC3339), "days_left", int(left/(24*time.Hour)))
	}
}

// watchExpiry warns of certificates about to expire once a day (warnExpiry), the
// warning at start aside.
func (d *Daemon) watchExpiry(ctx context.Context) error {
	t := time.NewTicker(expiryCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			d.warnExpiry(d.now())
		}
	}
}

// descCertExpiry is mesh_tls_certificate_expiry_timestamp_seconds.
var descCertExpiry = prometheus.NewDesc("mesh_tls_certificate_expiry_timestamp_seconds",
	"When the certificates this control node serves with expire (NotAfter), in seconds since the Unix epoch: certificate=leaf for its own (tls.pem), ca for the mesh CA's (ca.pem), as read at start.",
	[]string{"certificate"}, nil)

// certCollector exports the certificates' expiry. It is part of what a node exports
// before it is open (startingRegistry): a node whose quorum is lost may be the one
// whose certificate is about to expire.
type certCollector struct{ d *Daemon }

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descCertExpiry }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	for _, x := range []struct {
		cert  *x509.Certificate
		label string
	}{{c.d.certs.leaf, certLeaf}, {c.d.certs.ca, certCA}} {
		if x.cert != nil {
			ch <- prometheus.MustNewConstMetric(descCertExpiry, prometheus.GaugeValue, float64(x.cert.NotAfter.Unix()), x.label)
		}
	}
}
