// Package pintls is the host's check of the broker it dials: the chain the server
// presents must reach the CA whose SubjectPublicKeyInfo hash is pinned (from the token,
// later from the identity file). Names are not checked: the token carries an address,
// and the pin is the whole identity.
package pintls

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrSubstituted means something other than the mesh answered: the server's chain
// does not reach the pinned CA.
//
// Whether retrying helps is the caller's to say: not for enrol, which names one
// mesh; the agent, which keeps trying the mesh's other brokers and this one again,
// said "retrying will not help" as it retried.
var ErrSubstituted = errors.New("the broker's certificate does not chain to the CA pinned in the token: the mesh was substituted (or the token is for another mesh)")

// ErrClock means the broker's chain reaches the pinned CA but is not valid at this
// machine's time: its clock is wrong (or, if it is right, a certificate of the mesh
// expired). It is the mesh; retrying helps once the clock is right.
var ErrClock = errors.New("the broker's certificate chains to the pinned CA but is not valid at this machine's time")

// Config returns a client TLS configuration that completes a handshake only with a
// server whose chain reaches the pinned CA, valid at now() (nil means time.Now: the
// host's clock, which tests skew). The check runs in VerifyConnection, inside the
// handshake and also on resumed sessions, so nothing is sent to anyone else.
func Config(pin [32]byte, now func() time.Time) *tls.Config {
	if now == nil {
		now = time.Now
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Chain and name verification are replaced by the stricter pin check below.
		InsecureSkipVerify: true, //nolint:gosec
		VerifyConnection: func(cs tls.ConnectionState) error {
			return Verify(cs.PeerCertificates, pin, now())
		},
	}
}

// Verify checks that certs[0] is signed by a CA certificate among certs whose
// SubjectPublicKeyInfo SHA-256 equals pin, and is valid at now for server
// authentication.
func Verify(certs []*x509.Certificate, pin [32]byte, now time.Time) error {
	if len(certs) == 0 {
		return ErrSubstituted
	}
	for _, c := range certs[1:] {
		if !c.IsCA || sha256.Sum256(c.RawSubjectPublicKeyInfo) != pin {
			continue
		}
		roots := x509.NewCertPool()
		roots.AddCert(c)
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CurrentTime: now}
		_, err := certs[0].Verify(opts)
		if err == nil {
			return nil
		}
		// x509 checks validity periods before signatures, so a certificate out of
		// its period says nothing yet of who signed it: the chain is checked again
		// at a time inside both periods. Only if it verifies then is this the
		// mesh, seen by a clock that is wrong (or a certificate of the mesh that
		// expired): that is not a substitution, and retrying helps once it is right.
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			at := latest(certs[0].NotBefore, c.NotBefore)
			if at.Before(certs[0].NotAfter) && at.Before(c.NotAfter) {
				opts.CurrentTime = at
				if _, again := certs[0].Verify(opts); again == nil {
					return &ClockError{Now: now, NotBefore: at, NotAfter: earliest(certs[0].NotAfter, c.NotAfter)}
				}
			}
		}
		return fmt.Errorf("%w (the pinned CA is presented, but the server certificate does not verify against it: %v)", ErrSubstituted, err)
	}
	return ErrSubstituted
}

// ClockError is a broker chain that reaches the pinned CA but is valid only from
// NotBefore to NotAfter, and Now, this machine's time, is outside. It matches
// ErrClock, never ErrSubstituted.
type ClockError struct {
	Now, NotBefore, NotAfter time.Time
}

func (e *ClockError) Error() string {
	if e.Now.Before(e.NotBefore) {
		return fmt.Sprintf("%s: this machine's clock says %s, %s before the mesh's certificates are valid (from %s): this machine's clock is wrong (set it, or wait for NTP, and it connects), or the mesh's certificates were made by a clock ahead (they are valid from then)",
			ErrClock, e.Now.UTC().Format(time.RFC3339), roughly(e.NotBefore.Sub(e.Now)), e.NotBefore.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s: this machine's clock says %s, %s after the broker's certificate expired (at %s): this machine's clock is wrong (set it), or, if it is right, that control node's certificate (or the mesh CA's) expired: renew it where the CA key is (meshctl control renew-certificate) and restart that control node, which keeps its place; nothing changes on this host",
		ErrClock, e.Now.UTC().Format(time.RFC3339), roughly(e.Now.Sub(e.NotAfter)), e.NotAfter.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrClock.
func (e *ClockError) Is(target error) bool { return target == ErrClock }

// roughly rounds d to the second, or to the day beyond a few days.
func roughly(d time.Duration) string {
	const day = 24 * time.Hour
	if d > 3*day {
		return fmt.Sprintf("%d days", d/day)
	}
	return d.Round(time.Second).String()
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Pin returns the SHA-256 of a certificate's SubjectPublicKeyInfo.
func Pin(cert *x509.Certificate) [32]byte { return sha256.Sum256(cert.RawSubjectPublicKeyInfo) }
