package datadir

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrCertificateTime means a certificate of the data directory (ca.pem, tls.pem) is
// not valid at this machine's time: it expired, or is not valid yet. Every peer and
// host would refuse a chain through it, so serve does not start on it. See
// *CertificateTimeError.
var ErrCertificateTime = errors.New("certificate not valid at this machine's time")

// RenewCommand is the command that re-issues a certificate over its own key, run where
// the CA key is (docs/operations.md, "Certificate lifetimes").
const RenewCommand = "meshctl control renew-certificate"

// CertificateTimeError is a certificate of the data directory, at Path, valid from
// NotBefore to NotAfter, read at Now, outside. CA says it is the mesh CA's (ca.pem)
// rather than this node's own (tls.pem); HoldsCAKey that this data directory holds
// the CA key, so the renewal can run here.
type CertificateTimeError struct {
	Path, Dir           string
	CA, HoldsCAKey      bool
	NotBefore, NotAfter time.Time
	Now                 time.Time
}

// Is makes errors.Is(err, ErrCertificateTime) hold.
func (e *CertificateTimeError) Is(target error) bool { return target == ErrCertificateTime }

// Expired reports whether the certificate's time is over (rather than not begun).
func (e *CertificateTimeError) Expired() bool { return e.Now.After(e.NotAfter) }

func (e *CertificateTimeError) Error() string {
	whose := "this control node's certificate"
	refused := "the other control nodes and the hosts refuse its broker, Raft and routes"
	if e.CA {
		whose = "the mesh CA's certificate"
		refused = "every host and control node refuses a chain through it"
	}
	clock := e.Now.UTC().Format(time.RFC3339)
	if !e.Expired() {
		return fmt.Sprintf("%s: %s is not valid until %s, %s from now by this machine's clock (%s): %s, so serve does not start. "+
			"This machine's clock is behind (set it: NTP, timedatectl), or the certificate was made by a clock ahead: it is valid from then",
			e.Path, whose, e.NotBefore.UTC().Format(time.RFC3339), span(e.NotBefore.Sub(e.Now)), clock, refused)
	}
	head := fmt.Sprintf("%s: %s expired at %s, %s ago by this machine's clock (%s): %s, so serve does not start. "+
		"If this machine's clock is wrong, set it (NTP, timedatectl) and start serve again. Otherwise renew the certificate over the same key, which keeps its pin: ",
		e.Path, whose, e.NotAfter.UTC().Format(time.RFC3339), span(e.Now.Sub(e.NotAfter)), clock, refused)
	const see = " (docs/operations.md, \"Certificate lifetimes\"); recovering the quorum (peers.json) does not mend this"
	where := "the machine that holds the mesh CA key (ca-key.pem: the bootstrap machine, unless it was restored elsewhere)"
	if e.CA {
		cmd := RenewCommand + " --data CA-DIR --certificate CA-DIR/" + CACertFile
		if e.HoldsCAKey {
			cmd = fmt.Sprintf("%s --data %s --certificate %s", RenewCommand, e.Dir, e.Path)
			where = "this machine"
		}
		return head + fmt.Sprintf("run `%s` on %s; it keeps the CA's key, name and pin, so every certificate it issued still verifies. "+
			"Then copy the new %s into every control node's data directory and restart each", cmd, where, CACertFile) + see
	}
	if e.HoldsCAKey {
		return head + fmt.Sprintf("run `%s --data %s --certificate %s` here, then start serve again", RenewCommand, e.Dir, e.Path) + see
	}
	return head + fmt.Sprintf("copy this %s to %s, run `%s --data CA-DIR --certificate COPY` there, put the file it writes back here as %s, and start serve again",
		TLSCertFile, where, RenewCommand, e.Path) + see
}

// span is a duration for a person: days past two of them, else to the second.
func span(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	return d.Round(time.Second).String()
}

// CheckCertificateTimes refuses the CA certificate (ca.pem) and this node's own
// (tls.pem) when now is outside their validity: a *CertificateTimeError for each,
// the CA's first. LoadIdentity checked the files already; this reads their dates.
func (d Dir) CheckCertificateTimes(ca, leaf *x509.Certificate, now time.Time) error {
	var errs []error
	holds := d.Exists(CAKeyFile)
	for _, c := range []struct {
		cert *x509.Certificate
		path string
		ca   bool
	}{{ca, d.Path(CACertFile), true}, {leaf, d.Path(TLSCertFile), false}} {
		if now.Before(c.cert.NotBefore) || now.After(c.cert.NotAfter) {
			errs = append(errs, &CertificateTimeError{Path: c.path, Dir: string(d), CA: c.ca, HoldsCAKey: holds,
				NotBefore: c.cert.NotBefore, NotAfter: c.cert.NotAfter, Now: now})
		}
	}
	return errors.Join(errs...)
}
