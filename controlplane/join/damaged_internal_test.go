package join

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
)

// TestAJoinsDamagedStoreSaysRunItAgain: a write that failed as a join ran (a disk
// error while bbolt made raft.db) left a store the next Open refused as damaged,
// with the advice for a member's damaged store: remove the node and join it with a
// new token. Running the same join again worked. The refusal now says so first.
func TestAJoinsDamagedStoreSaysRunItAgain(t *testing.T) {
	d := joinerDir(t)
	if err := os.MkdirAll(d.Path(datadir.RaftDir), 0o700); err != nil {
		t.Fatal(err)
	}
	// What a failed flush of bbolt's first pages leaves: a file that is not one.
	if err := os.WriteFile(filepath.Join(d.Path(datadir.RaftDir), "raft.db"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &run{o: Options{Dir: d, Out: &strings.Builder{}}}
	cfg := datadir.Config{Mesh: "m", Node: "cp-2", RaftListen: "127.0.0.1:0", Brokers: []string{"127.0.0.1:1"}, Joining: true}
	err := r.member(t.Context(), cfg, &api.ControlAdmission{})
	if !errors.Is(err, replication.ErrDamaged) || !strings.Contains(err.Error(), "run the same meshctl join again first") {
		t.Fatalf("want the damaged store refused with the advice to run the join again, got %v", err)
	}
}

// joinerDir is a data directory holding what a joiner has once admitted: the CA's
// certificate and cp-2's TLS certificate and key, for 127.0.0.1.
func joinerDir(t *testing.T) datadir.Dir {
	t.Helper()
	d := datadir.Dir(t.TempDir())
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("control cp-2", []net.IP{net.IPv4(127, 0, 0, 1)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{datadir.CACertFile: ca.CertPEM, datadir.TLSCertFile: leaf.CertPEM, datadir.TLSKeyFile: leaf.KeyPEM} {
		if err := datadir.WriteFile(d.Path(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
