package enrol

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/host/wire"
)

// TestHostileAnswers: an answer whose CA, keyring, first declaration or brokers'
// membership cannot be used (missing, garbage, cut short, signed by another key,
// of another mesh) is refused as a bad answer, and nothing is saved.
func TestHostileAnswers(t *testing.T) {
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	otherCA, _ := meshCertificates(t)
	now := time.Now().UTC().Truncate(time.Second)
	foreignKeyring, _ := declarations.SignKeyring(declarations.Keyring{Mesh: "demo", Epoch: 1,
		Keys: []string{"00"}, IssuedAt: now}, stranger)
	for name, change := range map[string]func(*wire.EnrolResponse){
		"no CA":        func(r *wire.EnrolResponse) { r.CAPEM = "" },
		"CA cut short": func(r *wire.EnrolResponse) { r.CAPEM = r.CAPEM[:len(r.CAPEM)/2] },
		"CA of garbage DER": func(r *wire.EnrolResponse) {
			r.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")}))
		},
		"another CA": func(r *wire.EnrolResponse) {
			r.CAPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: otherCA}))
		},
		"no subjects":           func(r *wire.EnrolResponse) { r.Subjects = nil },
		"no keyring":            func(r *wire.EnrolResponse) { r.Keyring = nil },
		"keyring cut short":     func(r *wire.EnrolResponse) { r.Keyring = r.Keyring[:len(r.Keyring)/2] },
		"keyring of a stranger": func(r *wire.EnrolResponse) { r.Keyring = foreignKeyring },
		"declaration cut short": func(r *wire.EnrolResponse) { r.Declaration = r.Declaration[:len(r.Declaration)-3] },
		"declaration of a stranger": func(r *wire.EnrolResponse) {
			d, _ := declarations.SignDeclaration(declarations.Declaration{Mesh: "demo", Node: "web-1", NodeKey: "U",
				KeyringEpoch: 1, IssuedAt: now, ExpiresAt: now.Add(time.Hour)}, stranger)
			r.Declaration = d
		},
		"no membership":        func(r *wire.EnrolResponse) { r.Membership = nil },
		"membership cut short": func(r *wire.EnrolResponse) { r.Membership = r.Membership[:len(r.Membership)/2] },
		"membership of a stranger": func(r *wire.EnrolResponse) {
			m, _ := declarations.SignMembership(declarations.Membership{Mesh: "demo", Version: 1, Brokers: []string{"10.0.0.1:1"}, IssuedAt: now}, stranger)
			r.Membership = m
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir, _, err := enrolWith(t, newFakeMesh(t, change))
			if !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("got %v, want ErrBadAnswer", err)
			}
			for _, unrelated := range []error{ErrRefused, ErrUnreachable, ErrNoAnswer, ErrToken, ErrSave, ErrSubstituted} {
				if errors.Is(err, unrelated) {
					t.Fatalf("%v also matches %v", err, unrelated)
				}
			}
			if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
				t.Fatalf("after the refusal the identity is %v, want none", err)
			}
			if _, err := os.Stat(state.Path(dir)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after the refusal an applied state was saved: %v", err)
			}
			if strings.Contains(err.Error(), "SU") && strings.Contains(err.Error(), "seed") {
				t.Fatalf("the refusal may quote a seed: %v", err)
			}
		})
	}
}
