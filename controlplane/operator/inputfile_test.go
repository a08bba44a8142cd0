package operator

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
)

// TestOperatorFilesThatCannotBeUsed: a --creds or --ca file that does not exist, is
// empty, cut short, garbage, or the other flag's file, is an *InputFileError of the
// kind datadir gives the same fault in a data directory (meshctl: exit 7 for both,
// where a missing or empty --creds exited 1), saying what to give instead. Its
// content is judged before its mode: a CA certificate given as --creds (the flags
// swapped) was called "an operator's login to the whole mesh" and to be made
// private, and is now called a certificate that --ca takes.
func TestOperatorFilesThatCannotBeUsed(t *testing.T) {
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	caFile := caFileOf(t, ca)
	if err := os.Chmod(caFile, 0o644); err != nil {
		t.Fatal(err)
	}
	creds := credsFile(t)
	whole, err := os.ReadFile(creds)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := ca.IssueLeaf("x", nil, time.Now())
	dir := t.TempDir()
	file := func(name string, content []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty := file("empty", nil)
	cut := file("cut.creds", whole[:len(whole)/3])
	garbage := file("garbage", []byte("not credentials\n"))
	leafFile := file("leaf.pem", leaf.CertPEM)
	missing := filepath.Join(dir, "nosuch")
	seedOnly := file("seed.creds", whole[strings.Index(string(whole), "-----BEGIN USER NKEY SEED-----"):])
	jwtOnly := file("jwt.creds", whole[:strings.Index(string(whole), "-----BEGIN USER NKEY SEED-----")])
	for _, c := range []struct {
		name, creds, ca string
		kind            error
		says            string
	}{
		{"creds missing", missing, caFile, datadir.ErrMissing, "the creds file " + missing + " (--creds) does not exist: give the operator's .creds file"},
		{"creds empty", empty, caFile, datadir.ErrTruncated, "(--creds) is empty"},
		{"creds cut short", cut, caFile, datadir.ErrTruncated, "(--creds) is cut short"},
		{"creds garbage", garbage, caFile, datadir.ErrCorrupt, "(--creds) is not operator credentials"},
		{"creds a certificate (the flags swapped)", caFile, creds, datadir.ErrCorrupt, "(--creds) is a certificate: --ca takes it; --creds takes the operator's .creds file"},
		{"creds a directory", dir, caFile, datadir.ErrNotAFile, "a directory"},
		{"creds a seed alone", seedOnly, caFile, datadir.ErrCorrupt, "(--creds) holds no user JWT"},
		{"creds a JWT alone", jwtOnly, caFile, datadir.ErrCorrupt, "(--creds) holds no user seed"},
		{"CA missing", creds, missing, datadir.ErrMissing, "the CA file " + missing + " (--ca) does not exist: give the mesh CA certificate"},
		{"CA empty", creds, empty, datadir.ErrTruncated, "(--ca) is empty"},
		{"CA garbage", creds, garbage, datadir.ErrCorrupt, "(--ca) cannot be used"},
		{"CA a .creds file", creds, creds, datadir.ErrCorrupt, "it is an operator's .creds file, which --creds takes; --ca takes the mesh CA certificate"},
		{"CA a leaf", creds, leafFile, datadir.ErrCorrupt, "is not a CA certificate"},
	} {
		_, err := CAEndpoint([]string{"127.0.0.1:1"}, c.creds, c.ca)
		var fe *InputFileError
		if !errors.As(err, &fe) || !errors.Is(err, c.kind) || !errors.Is(err, ErrEndpoint) || !errors.Is(err, ErrUnusableFile) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an *InputFileError matching %v saying %q", c.name, err, c.kind, c.says)
			continue
		}
		if errors.Is(err, ErrCredsExposed) || strings.Contains(err.Error(), "chmod") || strings.Contains(err.Error(), "SUAG") || strings.Contains(err.Error(), "eyJ") {
			t.Errorf("%s: %v, wants no chmod and quotes nothing of the file", c.name, err)
		}
	}
	// The credentials themselves, readable by others, are still refused as such.
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := CAEndpoint([]string{"127.0.0.1:1"}, creds, caFile); !errors.Is(err, ErrCredsExposed) {
		t.Errorf("creds of mode 0644: %v, want ErrCredsExposed", err)
	}
}
