package operator

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/pki"
)

// TestCredsLoginSendsOnlyAUserJWT: a credentials file that holds a seed and no user
// JWT (its JWT block cut off, or an nkey seed file named for one) gives no JWT to
// send, and the error neither quotes the file nor reads as an unreachable mesh.
// jwt.ParseDecoratedJWT takes the whole file, or its first block whatever it holds,
// for the JWT: nats.go sent the seed in the CONNECT's jwt field, and nats-server
// showed it to every operator with the closed connections
// (integration/TestCredsWithoutAJWTSendsNoSeed).
func TestCredsLoginSendsOnlyAUserJWT(t *testing.T) {
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	upub, _ := user.PublicKey()
	seed, _ := user.Seed()
	claims := jwt.NewUserClaims(upub)
	token, err := claims.Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{
		"whole.creds":      whole,
		"seed-block.creds": whole[bytes.Index(whole, []byte("-----BEGIN USER NKEY SEED-----")):],
		"user.nk":          append(append([]byte{}, seed...), '\n'),
		"garbage.creds":    []byte("not a creds file\n"),
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		// nats.go asks the JWT callback as it takes the options, and Connect fails
		// then, before it dials; otherwise the callback's answer is what the
		// CONNECT carries.
		o := nats.GetDefaultOptions()
		var err error
		for _, opt := range CredsLogin(path, pki.PinnedClientConfig([32]byte{1}), time.Second) {
			if err = opt(&o); err != nil {
				break
			}
		}
		var got string
		if err == nil {
			got, err = o.UserJWT()
		}
		if name == "whole.creds" {
			if err != nil || got != token {
				t.Fatalf("%s: JWT %q, %v; want the file's JWT", name, got, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: the login sends %d bytes that are no user JWT as its JWT", name, len(got))
			continue
		}
		if !errors.Is(err, ErrNoUserJWT) || strings.Contains(err.Error(), string(seed)) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v; want ErrNoUserJWT naming the file, not its seed", name, err)
		}
	}
}
