package datadir

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"mesh/controlplane/pki"
)

// ErrMissing means a file every control node's data directory holds (from its
// bootstrap or join) is not there: removed by hand, or lost with a disk.
var ErrMissing = errors.New("missing")

// FileError is a file of the data directory that cannot be used as it is: missing
// (ErrMissing), empty or cut short (ErrTruncated), or whole but not what it should
// be (ErrCorrupt): garbage, another kind of key, a key that is not its
// certificate's, a certificate of another CA. Running the command again will not
// mend it, so its message names the file and says what will.
type FileError struct {
	// Path is the file's path.
	Path string
	// Err says what is wrong; it matches ErrMissing, ErrTruncated or ErrCorrupt.
	Err error
}

func (e *FileError) Error() string {
	return fmt.Sprintf("%s: %v. %s", e.Path, e.Err, remedy(filepath.Base(e.Path)))
}

// Unwrap returns what is wrong.
func (e *FileError) Unwrap() error { return e.Err }

// remedy says how to mend a file of the data directory that cannot be used.
func remedy(name string) string {
	const backup = `Restore it from a backup of this data directory (one serve --backup-dir took, or a copy taken while serve was stopped; docs/operations.md, "Backing up")`
	if name == CACertFile {
		return backup + ", or copy " + CACertFile + " from another control node of the mesh: it is the same on every one"
	}
	if name == CAKeyFile || name == AccountKeyFile {
		// Kept apart from the rest, offline: no other node holds a copy, and
		// joining again would not bring one back.
		return "Restore it from the offline backup taken at bootstrap (docs/operations.md, \"Losing the bootstrap machine\"); until then no control token can be minted and no certificate renewed. The mesh goes on serving without it"
	}
	// The node's own identity and keys: nobody else holds a copy.
	return backup + "; without one, with other control nodes running, remove this node (`meshctl control remove`) and join it again with a new control token on a fresh data directory"
}

// missingFile is the error of a required file that does not exist: ErrMissing, and
// the file system's error (fs.ErrNotExist) too.
type missingFile struct{ err error }

func (e missingFile) Error() string {
	return "missing (every control node has it from its bootstrap or join)"
}
func (e missingFile) Unwrap() []error { return []error{ErrMissing, e.err} }

// readRequired reads a file every control node holds: one that does not exist is a
// FileError matching ErrMissing. Other errors are ReadFile's (a file over
// MaxFileSize, not a regular file, a permission).
func (d Dir) readRequired(name string) ([]byte, error) {
	data, err := readCapped(d.Path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &FileError{Path: d.Path(name), Err: missingFile{err}}
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, &UnreadableError{Path: d.Path(name), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Path(name), err)
	}
	return data, nil
}

// pemBlock decodes the first PEM block of data, which must be of type typ (what
// names it in messages). Data that is empty, or whose block begins and does not
// end, is ErrTruncated; anything else that is not such a block is ErrCorrupt.
func pemBlock(data []byte, typ, what string) (*pem.Block, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrTruncated)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		if bytes.Contains(data, []byte("-----BEGIN ")) {
			return nil, fmt.Errorf("%w: its PEM block does not end (the file was cut short)", ErrTruncated)
		}
		return nil, fmt.Errorf("%w: it is not PEM (no %s in it)", ErrCorrupt, what)
	}
	if block.Type != typ {
		return nil, fmt.Errorf("%w: it holds a PEM block of type %q, not a %s", ErrCorrupt, block.Type, what)
	}
	return block, nil
}

// parseCertificateFile reads a PEM certificate file's content.
func parseCertificateFile(data []byte) (*x509.Certificate, error) {
	block, err := pemBlock(data, "CERTIFICATE", "certificate")
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: its certificate cannot be parsed (%v)", ErrCorrupt, err)
	}
	return cert, nil
}

// parseKeyFile reads a PEM PKCS#8 private key file's content. Its errors never quote
// the key.
func parseKeyFile(data []byte) (crypto.Signer, error) {
	block, err := pemBlock(data, "PRIVATE KEY", "private key")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: its private key cannot be parsed", ErrCorrupt)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%w: its private key cannot sign", ErrCorrupt)
	}
	return s, nil
}

// LoadCACert reads the mesh CA's certificate (ca.pem): its PEM and the certificate.
func (d Dir) LoadCACert() ([]byte, *x509.Certificate, error) {
	data, err := d.readRequired(CACertFile)
	if err != nil {
		return nil, nil, err
	}
	cert, err := parseCertificateFile(data)
	if err != nil {
		return nil, nil, &FileError{Path: d.Path(CACertFile), Err: err}
	}
	if !cert.IsCA {
		return nil, nil, &FileError{Path: d.Path(CACertFile), Err: fmt.Errorf("%w: its certificate is not a CA's", ErrCorrupt)}
	}
	return data, cert, nil
}

// LoadLeaf reads this control node's TLS identity: the certificate (tls.pem) and its
// key (tls-key.pem), which must be a pair.
func (d Dir) LoadLeaf() (pki.Leaf, error) {
	leaf, _, err := d.loadLeaf()
	return leaf, err
}

func (d Dir) loadLeaf() (pki.Leaf, *x509.Certificate, error) {
	certPEM, err := d.readRequired(TLSCertFile)
	if err != nil {
		return pki.Leaf{}, nil, err
	}
	keyPEM, err := d.readRequired(TLSKeyFile)
	if err != nil {
		return pki.Leaf{}, nil, err
	}
	cert, err := parseCertificateFile(certPEM)
	if err != nil {
		return pki.Leaf{}, nil, &FileError{Path: d.Path(TLSCertFile), Err: err}
	}
	key, err := parseKeyFile(keyPEM)
	if err != nil {
		return pki.Leaf{}, nil, &FileError{Path: d.Path(TLSKeyFile), Err: err}
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		// Which of the two is foreign cannot be told: the key is named, and the
		// certificate with it.
		return pki.Leaf{}, nil, &FileError{Path: d.Path(TLSKeyFile),
			Err: fmt.Errorf("%w: it is not the key of the certificate in %s (one of the two is another node's, or of another issue)", ErrCorrupt, TLSCertFile)}
	}
	return pki.Leaf{CertPEM: certPEM, KeyPEM: keyPEM}, cert, nil
}

// LoadIdentity reads what this control node's TLS rests on and checks it before
// anything listens: the CA certificate (ca.pem), whose pin must be pin (mesh.json's
// ca_pin, hex), and this node's certificate and key (LoadLeaf), issued by that CA.
// Each file that cannot be used is a FileError naming it.
func (d Dir) LoadIdentity(pin string) (caPEM []byte, leaf pki.Leaf, err error) {
	caPEM, caCert, err := d.LoadCACert()
	if err != nil {
		return nil, pki.Leaf{}, err
	}
	if got := pki.PinOf(caCert); hex.EncodeToString(got[:]) != pin {
		return nil, pki.Leaf{}, &FileError{Path: d.Path(CACertFile),
			Err: fmt.Errorf("%w: it holds another CA than this mesh's (its pin is sha256:%x; %s says sha256:%s)", ErrCorrupt, got, ConfigFile, pin)}
	}
	leaf, cert, err := d.loadLeaf()
	if err != nil {
		return nil, pki.Leaf{}, err
	}
	if err := cert.CheckSignatureFrom(caCert); err != nil {
		return nil, pki.Leaf{}, &FileError{Path: d.Path(TLSCertFile),
			Err: fmt.Errorf("%w: its certificate was not issued by the CA in %s", ErrCorrupt, CACertFile)}
	}
	return caPEM, leaf, nil
}
