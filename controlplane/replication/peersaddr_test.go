package replication

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAPeersFileGivingThisNodesAddressInAnotherFormRecordsMeshJSONs: the file is
// accepted when it names this node's Raft address however written, and the
// configuration recovered holds the address as mesh.json has it.
func TestAPeersFileGivingThisNodesAddressInAnotherFormRecordsMeshJSONs(t *testing.T) {
	for _, c := range []struct{ file, addr string }{
		{"10.0.0.1:7301", "10.0.0.1:7301"},
		{"[0:0::1]:7301", "[::1]:7301"},
		{"[::ffff:10.0.0.1]:7301", "10.0.0.1:7301"},
		{"10.0.0.1:07301", "10.0.0.1:7301"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, PeersFile), []byte(`[{"id":"cp-2","address":"10.0.0.2:7301","non_voter":false},{"id":"cp-1","address":"`+c.file+`","non_voter":false}]`), 0o600); err != nil {
			t.Fatal(err)
		}
		conf, ok, err := readPeersFile(dir, "cp-1", c.addr)
		if err != nil || !ok {
			t.Fatalf("%s for %s: ok %t, %v", c.file, c.addr, ok, err)
		}
		if got := string(conf.Servers[1].Address); got != c.addr {
			t.Errorf("%s for %s: recorded %s", c.file, c.addr, got)
		}
		if got := string(conf.Servers[0].Address); got != "10.0.0.2:7301" {
			t.Errorf("another member's address changed: %s", got)
		}
	}
}
