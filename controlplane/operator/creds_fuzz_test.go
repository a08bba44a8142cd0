package operator

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
)

// seedPattern finds what may be an nkey seed in a file's bytes.
var seedPattern = regexp.MustCompile(`S[A-Z][A-Z2-7]{56}`)

// FuzzCredsFile: an operator's .creds file (--creds, MESH_CREDS, a context's creds,
// a data directory's admin.creds) is read by credsProblem before any connection,
// by credsJWT at each login, and by credsExpiry. For any content:
//
//   - credsProblem says why it is not a .creds file with ErrTruncated or
//     ErrCorrupt, or accepts it with no reason; what it accepts logs in: credsJWT
//     gives its user JWT and the seed parses;
//   - credsJWT refuses with ErrNoUserJWT only, its error naming the file and
//     nothing of its content; what it returns is a user JWT, never a seed (nats.go
//     sends it in the CONNECT, which nats-server shows to every operator);
//   - no reason, and no error, quotes an nkey seed the file holds;
//   - credsExpiry does not panic.
func FuzzCredsFile(f *testing.F) {
	account, err := nkeys.CreateAccount()
	if err != nil {
		f.Fatal(err)
	}
	good, err := bootstrap.OperatorCreds(account, "test")
	if err != nil {
		f.Fatal(err)
	}
	user, _ := nkeys.CreateUser()
	seed, _ := user.Seed()
	accountSeed, _ := account.Seed()
	text, _ := jwt.ParseDecoratedJWT(good)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:len(good)-40])
	f.Add(seed)
	f.Add(append([]byte("-----BEGIN USER NKEY SEED-----\n"), append(seed, "\n------END USER NKEY SEED------\n"...)...))
	f.Add([]byte(text))
	f.Add([]byte("-----BEGIN NATS USER JWT-----\n" + string(seed) + "\n------END NATS USER JWT------\n"))
	f.Add([]byte("-----BEGIN " + string(seed) + "-----\nAAAA\n-----END " + string(seed) + "-----\n"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte(strings.Replace(string(good), "USER NKEY SEED", "NKEY SEED", 2)))
	f.Add([]byte(strings.Replace(string(good), string(seed[:2]), string(accountSeed[:2]), 1)))
	f.Add(append(accountSeed, '\n'))
	f.Add([]byte(" \n\t"))
	f.Add([]byte{})
	path := filepath.Join(f.TempDir(), "op.creds")
	f.Fuzz(func(t *testing.T, data []byte) {
		seeds := seedsIn(data)
		reason, kind := credsProblem(data)
		switch {
		case kind == nil && reason != "", kind != nil && reason == "":
			t.Fatalf("reason %q with kind %v", reason, kind)
		case kind != nil && !errors.Is(kind, datadir.ErrCorrupt) && !errors.Is(kind, datadir.ErrTruncated):
			t.Fatalf("kind of no known kind: %v", kind)
		}
		for _, s := range seeds {
			if strings.Contains(reason, s) {
				t.Fatalf("the reason quotes a seed the file holds: %q", reason)
			}
		}
		got, err := credsJWT(path, data)
		if err != nil {
			if !errors.Is(err, ErrNoUserJWT) || err.Error() != "the credentials file "+path+" "+ErrNoUserJWT.Error() {
				t.Fatalf("refusal of no known kind: %v", err)
			}
			if kind == nil {
				t.Fatal("credsProblem accepted a file credsJWT refuses")
			}
		} else {
			if _, derr := jwt.DecodeUserClaims(got); derr != nil {
				t.Fatalf("credsJWT returned %q, not a user JWT: %v", got, derr)
			}
			if _, serr := nkeys.FromSeed([]byte(strings.TrimSpace(got))); serr == nil {
				t.Fatal("credsJWT returned a seed")
			}
			for _, s := range seeds {
				if strings.Contains(got, s) {
					t.Fatal("credsJWT returned text holding a seed")
				}
			}
		}
		if kind == nil {
			kp, err := jwt.ParseDecoratedUserNKey(data)
			if err != nil {
				t.Fatalf("credsProblem accepted a file whose seed does not parse: %v", err)
			}
			kp.Wipe()
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		credsExpiry(path)
	})
}

// seedsIn is the nkey seeds that stand in data.
func seedsIn(data []byte) []string {
	var out []string
	for _, m := range seedPattern.FindAll(data, -1) {
		if _, err := nkeys.FromSeed(m); err == nil {
			out = append(out, string(m))
		}
	}
	return out
}

// TestACredsRefusalQuotesOnlyAPEMTypeThatReadsAsOne: a file holding a PEM block of
// another kind is said with its type when the type is a known one ("RSA PRIVATE
// KEY"); a BEGIN line of other text, a seed's first 32 characters say, is not
// quoted (the file's own text; a review).
func TestACredsRefusalQuotesOnlyAPEMTypeThatReadsAsOne(t *testing.T) {
	block := func(typ string) []byte {
		return []byte("-----BEGIN " + typ + "-----\nAAAA\n-----END " + typ + "-----\n")
	}
	if reason, _ := credsProblem(block("RSA PRIVATE KEY")); !strings.Contains(reason, `"RSA PRIVATE KEY"`) {
		t.Errorf("an RSA key's file: %q, want its type named", reason)
	}
	// A seed's start, whole and split by a space (a review: 31 of its
	// characters were quoted).
	for _, seedStart := range []string{"SUAMLK2ZNL35WSMW37E7UD4VZ7ELPKW7", "SUAMLK2ZNL35WSMW37E7 UD4VZ7ELPKW"} {
		if reason, _ := credsProblem(block(seedStart)); reason == "" || strings.Contains(reason, seedStart) || !strings.Contains(reason, "of another type") {
			t.Errorf("a block typed with a seed's start: %q, want it refused without quoting the type", reason)
		}
	}
}
