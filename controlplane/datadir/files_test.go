package datadir

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/pki"
)

// nodeFiles are the files of one control node's data directory that serve reads
// before anything else, as bootstrap and join write them; pin is its CA's.
func nodeFiles(t *testing.T, mesh string) (files map[string][]byte, pin string) {
	t.Helper()
	ca, _, err := pki.NewCA(mesh, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("control cp-1", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(nil)
	signing, err := EncodeSigningKey(key)
	if err != nil {
		t.Fatal(err)
	}
	curve, _ := nkeys.CreateCurveKeys()
	curveSeed, _ := curve.Seed()
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	token, err := jwt.NewUserClaims(userPub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(token, userSeed)
	if err != nil {
		t.Fatal(err)
	}
	p := ca.Pin()
	return map[string][]byte{
		CACertFile: ca.CertPEM, TLSCertFile: leaf.CertPEM, TLSKeyFile: leaf.KeyPEM,
		SigningKeyFile: signing, CurveKeyFile: curveSeed, AdminCredsFile: creds,
	}, hex.EncodeToString(p[:])
}

// TestFilesThatCannotBeUsed: each file serve reads at start (ca.pem, tls.pem,
// tls-key.pem, signing-key.pem, control-curve.nk, admin.creds), missing, empty, cut
// short, garbage or another node's or mesh's, is refused with a FileError that
// names it, matches ErrMissing, ErrTruncated or ErrCorrupt (meshctl's exit 7), and
// says to restore it from the backup. Before, the TLS files failed in
// tls.X509KeyPair naming neither file ("failed to find any PEM data in key input"
// for an empty tls.pem blamed the key), and every missing file was a bare
// fs.ErrNotExist (exit 1).
func TestFilesThatCannotBeUsed(t *testing.T) {
	good, pin := nodeFiles(t, "demo")
	other, _ := nodeFiles(t, "other")
	load := func(d Dir) error {
		if _, _, err := d.LoadIdentity(pin); err != nil {
			return err
		}
		if _, err := d.LoadSigningKeys(); err != nil {
			return err
		}
		if _, err := d.LoadCurveKey(); err != nil {
			return err
		}
		_, err := d.LoadOperatorKey()
		return err
	}
	write := func(t *testing.T, files map[string][]byte) Dir {
		d := Dir(t.TempDir())
		for name, data := range files {
			if err := os.WriteFile(d.Path(name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	if err := load(write(t, good)); err != nil {
		t.Fatalf("a whole data directory: %v", err)
	}
	garbage := []byte("\x8f\x00this is no key, no certificate and no seed\xff\n")
	for name := range good {
		for _, c := range []struct {
			kind   string
			damage func(data []byte) []byte // nil: remove the file
			want   error
		}{
			{"missing", nil, ErrMissing},
			{"empty", func([]byte) []byte { return nil }, ErrTruncated},
			{"cut short", func(b []byte) []byte { return b[:len(b)/2] }, nil}, // ErrTruncated, or ErrCorrupt where the format cannot tell
			{"garbage", func([]byte) []byte { return garbage }, ErrCorrupt},
		} {
			t.Run(name+" "+c.kind, func(t *testing.T) {
				files := map[string][]byte{}
				for n, b := range good {
					files[n] = b
				}
				if c.damage == nil {
					delete(files, name)
				} else {
					files[name] = c.damage(good[name])
				}
				err := load(write(t, files))
				checkFileError(t, err, name, c.want)
				if c.want == ErrMissing && !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("a missing file: %v, want it to match fs.ErrNotExist as well", err)
				}
			})
		}
	}
	// Whole files that do not belong together: the pair, the CA, the mesh.
	for _, c := range []struct {
		name    string
		swap    []string // files taken from another mesh's node
		blamed  string
		mention string
	}{
		{"another node's key", []string{TLSKeyFile}, TLSKeyFile, "not the key of the certificate in " + TLSCertFile},
		{"another node's certificate", []string{TLSCertFile}, TLSKeyFile, "not the key of the certificate in " + TLSCertFile},
		{"a pair of another mesh", []string{TLSCertFile, TLSKeyFile}, TLSCertFile, "not issued by the CA in " + CACertFile},
		{"another mesh's CA", []string{CACertFile}, CACertFile, "another CA than this mesh's"},
		{"a certificate that is no CA's", nil, CACertFile, "not a CA's"},
		{"a key where the certificate belongs", nil, TLSCertFile, `type "PRIVATE KEY"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string][]byte{}
			for n, b := range good {
				files[n] = b
			}
			for _, n := range c.swap {
				files[n] = other[n]
			}
			switch c.name {
			case "a certificate that is no CA's":
				files[CACertFile] = good[TLSCertFile]
			case "a key where the certificate belongs":
				files[TLSCertFile] = good[TLSKeyFile]
			}
			err := load(write(t, files))
			checkFileError(t, err, c.blamed, ErrCorrupt)
			if err != nil && !strings.Contains(err.Error(), c.mention) {
				t.Errorf("err = %v, want it to say %q", err, c.mention)
			}
		})
	}
}

// checkFileError fails unless err is a FileError of the file name matching want
// (ErrTruncated or ErrCorrupt when want is nil), whose message names the file and
// the way to mend it.
func checkFileError(t *testing.T, err error, name string, want error) {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FileError", err)
	}
	if !strings.HasSuffix(fe.Path, "/"+name) || !strings.Contains(err.Error(), fe.Path) {
		t.Errorf("err = %v, want it to name %s", err, name)
	}
	switch {
	case want != nil && !errors.Is(err, want):
		t.Errorf("err = %v, want it to match %v", err, want)
	case want == nil && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt):
		t.Errorf("err = %v, want it to match ErrTruncated or ErrCorrupt", err)
	}
	if !strings.Contains(err.Error(), `docs/operations.md, "Backing up"`) {
		t.Errorf("err = %v, want it to say how to restore the file", err)
	}
}
