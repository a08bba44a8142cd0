package integration

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// ctlExitUsage is meshctl's exit code for a command line that is wrong.
const ctlExitUsage = 2

// notCreated reports an error unless dir, new before the command, still does not
// exist.
func notCreated(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s was created (holding %v) by a command that was refused", dir, names)
	}
}

// TestListenAtTheTopPort, with the built meshctl: `bootstrap --listen
// 127.0.0.1:65535` exited 0 with the default Raft and cluster addresses wrapped to
// 127.0.0.1:0 and 127.0.0.1:1, recorded in mesh.json for good (serve then bound Raft
// on a random port and routes on port 1). It is a usage error now, before the data
// directory is touched, unless both are given; and a control token for a node on
// port 65535 whose other two addresses are given passes the address check it
// failed ("must be the new node's concrete ip:port").
func TestListenAtTheTopPort(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	dir := filepath.Join(base, "cp")
	r := harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--mesh", "x", "--listen", "127.0.0.1:65535", "--data", dir)
	if r.Code != ctlExitUsage || !strings.Contains(r.Stderr, "--raft-listen and --cluster-listen") || !strings.Contains(r.Stderr, "past 65535") {
		t.Fatalf("bootstrap --listen 127.0.0.1:65535: exit %d, want %d naming the flags to give:\n%s", r.Code, ctlExitUsage, r.Combined())
	}
	notCreated(t, dir)

	r = harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--mesh", "x", "--listen", "127.0.0.1:65535",
		"--raft-listen", "127.0.0.1:27701", "--cluster-listen", "127.0.0.1:27702", "--data", dir, "--dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, "broker 127.0.0.1:65535, raft 127.0.0.1:27701, cluster 127.0.0.1:27702") {
		t.Fatalf("bootstrap --listen 127.0.0.1:65535 with both addresses given: exit %d, want 0 and a plan with them:\n%s", r.Code, r.Combined())
	}

	// The address check comes before the data directory is read: an empty one
	// then says it holds no mesh (exit 7), not that the address is no address.
	empty := filepath.Join(base, "empty")
	if err := os.Mkdir(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	r = harness.Run(t, "", nil, bin.Meshctl, "token", "--data", empty, "--role", "control", "--node", "cp-9",
		"--addr", "127.0.0.1:65535", "--raft-addr", "127.0.0.1:27701", "--cluster-addr", "127.0.0.1:27702")
	if r.Code == ctlExitUsage || strings.Contains(r.Stderr, "concrete ip:port") {
		t.Fatalf("token --addr 127.0.0.1:65535 with both other addresses: exit %d, refused as an address:\n%s", r.Code, r.Combined())
	}
	r = harness.Run(t, "", nil, bin.Meshctl, "token", "--data", empty, "--role", "control", "--node", "cp-9", "--addr", "127.0.0.1:65535")
	if r.Code != ctlExitUsage || !strings.Contains(r.Stderr, "--raft-addr and --cluster-addr") {
		t.Fatalf("token --addr 127.0.0.1:65535 alone: exit %d, want %d naming the flags to give:\n%s", r.Code, ctlExitUsage, r.Combined())
	}
}

// TestBootstrapAddressesBySameRules, with the built meshctl: --raft-listen and
// --cluster-listen are checked as --listen is, before the data directory is touched,
// and refused with exit 2. Equal addresses created the mesh, then every serve exited
// 1 blaming "another process" for its own clash; names and wildcards were recorded
// (the other control nodes dial them); `--raft-listen foo` exited 1 and left a lock
// file in a directory that was new.
func TestBootstrapAddressesBySameRules(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		says string
	}{
		{"Raft on the broker's address", []string{"--listen", "127.0.0.1:27600", "--raft-listen", "127.0.0.1:27600"}, "must differ"},
		{"cluster on the default Raft port", []string{"--listen", "127.0.0.1:27600", "--cluster-listen", "127.0.0.1:27601"}, "must differ"},
		{"Raft a name", []string{"--listen", "127.0.0.1:27800", "--raft-listen", "localhost:27801"}, "--raft-listen"},
		{"Raft a wildcard", []string{"--listen", "127.0.0.1:27800", "--raft-listen", "0.0.0.0:27801"}, "wildcard"},
		{"cluster an IPv6 wildcard", []string{"--listen", "127.0.0.1:27800", "--cluster-listen", "[::]:27802"}, "wildcard"},
		{"Raft no address", []string{"--listen", "127.0.0.1:27600", "--raft-listen", "foo"}, "not ip:port"},
	} {
		dir := filepath.Join(t.TempDir(), "cp")
		args := append([]string{"bootstrap", "--mesh", "x", "--data", dir}, c.args...)
		r := harness.Run(t, "", nil, bin.Meshctl, args...)
		if r.Code != ctlExitUsage || !strings.Contains(r.Stderr, c.says) || r.Stdout != "" {
			t.Errorf("%s: exit %d, want %d saying %q and no plan:\n%s", c.name, r.Code, ctlExitUsage, c.says, r.Combined())
		}
		notCreated(t, dir)
	}
}

// TestNoOutputHoldsATokensSecret, with the built meshctl: a token pasted as a value
// that is echoed unchecked was printed whole, secret included, by `bootstrap
// --raft-listen TOKEN --dry-run` (the plan) and by `demo --dir TOKEN/x` (every path
// it narrates). Each is refused now (exit 2), without quoting the token, and nothing
// is created.
func TestNoOutputHoldsATokensSecret(t *testing.T) {
	t.Parallel()
	pub, _, _ := ed25519.GenerateKey(nil)
	tok, err := tokenfmt.Mint(tokenfmt.MintOptions{
		Mesh: "x", Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300")}, CAPin: [32]byte{1}, SigningKey: pub,
		Node: "cp-2", Role: tokenfmt.RoleControl, TTL: 15 * time.Minute, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	text, secret := tok.Encode(), hex.EncodeToString(tok.Secret[:])
	tail := text[strings.Index(text, ":")+1:]
	base := t.TempDir()
	for _, c := range []struct {
		name    string
		args    []string
		created string
	}{
		{"bootstrap --raft-listen", []string{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27600", "--raft-listen", text, "--data", filepath.Join(base, "a"), "--dry-run"}, filepath.Join(base, "a")},
		{"bootstrap --cluster-listen", []string{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27600", "--cluster-listen", text, "--data", filepath.Join(base, "b")}, filepath.Join(base, "b")},
		{"bootstrap --advertise", []string{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27600", "--advertise", text, "--data", filepath.Join(base, "c"), "--dry-run"}, filepath.Join(base, "c")},
		{"bootstrap --data", []string{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27600", "--data", filepath.Join(base, text, "x"), "--dry-run"}, filepath.Join(base, text)},
		{"demo --dir", []string{"demo", "--dir", filepath.Join(base, text, "x")}, filepath.Join(base, text)},
		// What follows the token's first ':' holds its secret as well.
		{"bootstrap --data, a token's end", []string{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27600", "--data", filepath.Join(base, tail, "x"), "--dry-run"}, filepath.Join(base, tail)},
		{"demo --dir, a token's end", []string{"demo", "--dir", filepath.Join(base, tail, "x")}, filepath.Join(base, tail)},
	} {
		r := harness.Run(t, "", nil, bin.Meshctl, c.args...)
		if strings.Contains(r.Combined(), secret) {
			t.Errorf("%s printed the token's secret (exit %d):\n%s", c.name, r.Code, r.Combined())
		}
		if r.Code != ctlExitUsage {
			t.Errorf("%s: exit %d, want %d:\n%s", c.name, r.Code, ctlExitUsage, r.Combined())
		}
		notCreated(t, c.created)
	}
}
