package integration

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/integration/harness"
)

// ctlExitUsage is meshctl's exit code for a command line that is wrong.
const ctlExitUsage = 2

// notCreated fails unless dir, new before the command, still does not exist.
func notCreated(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s was created (holding %v) by a command that was refused", dir, names)
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
