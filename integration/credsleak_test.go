package integration

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestCredsWithoutAJWTSendsNoSeed: an operator's credentials file whose JWT block is
// missing (cut off when copied, or an nkey seed file named by mistake) holds a seed
// and nothing else. nats.go's reader of .creds files takes whatever the file holds as
// the JWT when it finds none, so meshctl sent the seed itself in the JWT field of its
// CONNECT; the broker refused it, and then showed it to every operator who asked for
// the closed connections with their authentication (CONNZ auth, state closed: `nats
// server report connections`). meshctl refuses such a file before it connects, saying
// why and not what it holds.
func TestCredsWithoutAJWTSendsNoSeed(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "credsleak")
	serve := cp.Serve()
	creds, err := os.ReadFile(filepath.Join(cp.Dir, datadir.AdminCredsFile))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	dir := t.TempDir()
	for name, content := range map[string][]byte{
		// The decorated seed block alone, as the second half of a .creds file.
		"seed-block.creds": creds[bytes.Index(creds, []byte("-----BEGIN USER NKEY SEED-----")):],
		// A bare seed, as `nk -gen user` writes it.
		"user.nk": append(append([]byte{}, seed...), '\n'),
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		r := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--servers", cp.Listen, "--creds", path, "--ca", filepath.Join(cp.Dir, datadir.CACertFile))
		if r.Code == 0 {
			t.Fatalf("%s: meshctl nodes succeeded with credentials holding no JWT:\n%s", name, r.Combined())
		}
		if strings.Contains(r.Combined(), string(seed)) {
			t.Errorf("%s: meshctl printed the seed:\n%s", name, r.Combined())
		}
		if !strings.Contains(r.Combined(), "no user JWT") {
			t.Errorf("%s: meshctl does not say the file holds no JWT:\n%s", name, r.Combined())
		}
	}
	// What the broker kept of the connections it closed, as an operator reads it.
	nc := cp.OperatorConn()
	msg, err := nc.Request("$SYS.REQ.SERVER.PING.CONNZ", []byte(`{"state":1,"auth":true,"limit":1000}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(msg.Data, seed) {
		t.Errorf("the broker's closed connections show the operator seed to every operator:\n%.600s", msg.Data)
	}
	if strings.Contains(serve.Output(), string(seed)) {
		t.Error("the control node's log holds the operator seed")
	}
}
