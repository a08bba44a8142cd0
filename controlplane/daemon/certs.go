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

// readCertificates parses the certificates of dir LoadIdentity checked and refuses
// them when they are not valid at now (datadir.CertificateTimeError, exit 7): every
// peer and host would refuse them, and the node, unable to reach the others, used
// to exit a minute later advising a quorum recovery. Refused, they are returned all
// the same, for the warnings of the other.
func readCertificates(dir datadir.Dir, caPEM, leafPEM []byte, now time.Time) (certificates, error) {
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		return certificates{}, fmt.Errorf("%s: %w", dir.Path(datadir.CACertFile), err)
	}
	leaf, err := pki.ParseCertificatePEM(leafPEM)
	if err != nil {
		return certificates{}, fmt.Errorf("%s: %w", dir.Path(datadir.TLSCertFile), err)
	}
	return certificates{leaf: leaf, ca: ca}, dir.CheckCertificateTimes(ca, leaf, now)
}

// warnExpiry logs a warning for each certificate of this node that expires within
// expiryWarning of now, naming the file, when, and how to renew it.
func (d *Daemon) warnExpiry(now time.Time) {
	for _, n := range expiryNotices(d.opts.Dir, d.certs, now) {
		if n.expired {
			d.log.Error(n.msg, "file", n.file, "not_after", n.notAfter.Format(time.RFC3339))
			continue
		}
		d.log.Warn(n.msg, "file", n.file, "not_after", n.notAfter.Format(time.RFC3339), "days_left", n.daysLeft)
	}
}

// expiryNotice is what serve says of a certificate that expires within
// expiryWarning, or expired while it ran.
type expiryNotice struct {
	expired  bool
	msg      string
	file     string
	notAfter time.Time // UTC
	daysLeft int
}

// expiryNotices are the notices due at now for the certificates of dir.
func expiryNotices(dir datadir.Dir, certs certificates, now time.Time) []expiryNotice {
	var out []expiryNotice
	for _, c := range []struct {
		cert *x509.Certificate
		name string
		ca   bool
	}{{certs.ca, datadir.CACertFile, true}, {certs.leaf, datadir.TLSCertFile, false}} {
		if c.cert == nil {
			continue
		}
		left := c.cert.NotAfter.Sub(now)
		if left >= expiryWarning {
			continue
		}
		n := expiryNotice{file: dir.Path(c.name), notAfter: c.cert.NotAfter.UTC(), daysLeft: int(left / (24 * time.Hour))}
		switch {
		case left <= 0:
			// Expired while serve runs (a start refuses it): said as such, not
			// "expires soon" with days left below zero.
			what := "this control node's certificate expired: the other control nodes and the hosts refuse it"
			if c.ca {
				what = "the mesh CA's certificate expired: every host and control node refuses every broker"
			}
			n.expired = true
			n.msg = what + ". Renew it over the same key where the CA key is (" + datadir.RenewCommand + "), put it in place and restart (docs/operations.md, \"Certificate lifetimes\")"
		case c.ca:
			n.msg = "the mesh CA's certificate expires soon: then every host and control node refuses every broker. " +
				"Renew it over the same key where the CA key is (" + datadir.RenewCommand + " --data CA-DIR --certificate CA-DIR/ca.pem: the CA's pin, and every certificate it issued, stay good), " +
				"copy the new ca.pem into every control node's data directory and restart each (docs/operations.md, \"Certificate lifetimes\")"
		default:
			n.msg = "this control node's certificate expires soon: then the other control nodes and the hosts refuse it. " +
				"Renew it over the same key where the CA key is (" + datadir.RenewCommand + " --data CA-DIR --certificate COPY-OF-tls.pem: its pin stays), " +
				"put the result in place of tls.pem and restart this node (docs/operations.md, \"Certificate lifetimes\")"
		}
		out = append(out, n)
	}
	return out
}

// watchExpiry warns of certificates about to expire once a day (warnExpiry), the
// warning at start aside.
func (d *Daemon) watchExpiry(ctx context.Context) error {
	t := time.NewTicker(d.opts.expiryCheckEvery)
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
