package replication

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzReadPeersFile: raft/peers.json is written by hand, in a lost quorum, from
// what `meshctl control status --json` lists. For any content, this node's id and
// its Raft address, readPeersFile must not panic; it refuses with ErrPeersFile
// only (the file is there: never "no file"); a file over maxPeersFile is refused;
// and a configuration it accepts is one serve's raft.RecoverCluster takes (the
// checks of hashicorp/raft's checkConfiguration: ids and addresses present and
// unique, a voter), holds no two servers at one address however written,
// lists this node at the address it listens on, and is the
// file's list of servers otherwise unchanged (same ids, same suffrage, same
// addresses for the others). `meshctl check` says "usable" on the same reading.
func FuzzReadPeersFile(f *testing.F) {
	good := `[{"id":"cp-1","address":"10.0.0.1:7301","non_voter":false},{"id":"cp-2","address":"10.0.0.2:7301","non_voter":true}]`
	f.Add([]byte(good), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(good), "cp-1", "")
	f.Add([]byte(good), "cp-2", "10.0.0.2:7301")
	f.Add([]byte(good), "cp-3", "10.0.0.3:7301")
	f.Add([]byte(good[:len(good)/2]), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"[0:0::1]:7301"},{"id":"cp-2","address":"[::1]:7301"}]`), "cp-1", "[::1]:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"10.0.0.1:07301"},{"id":"cp-2","address":"10.0.0.1:7301"}]`), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"[::ffff:10.0.0.1]:7301"},{"id":"cp-2","address":"10.0.0.1:7301"}]`), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"10.0.0.1:7301","non_voter":true}]`), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"10.0.0.1:7301","non_voter":true}] [{"id":"cp-1","address":"10.0.0.1:7301"}]`), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"id":"cp-1","address":"10.0.0.1:7301"},{"id":"cp-1","address":"10.0.0.2:7301"}]`), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[{"ID":"cp-1","Address":"10.0.0.1:7301","NON_VOTER":false,"id":"cp-9"}]`), "cp-9", "")
	f.Add([]byte(`[{"id":"cp-1","address":""}]`), "cp-1", "")
	f.Add([]byte(`{"id":"cp-1"}`), "cp-1", "")
	f.Add([]byte(`[]`), "cp-1", "")
	f.Add([]byte(`null`), "", "")
	f.Add([]byte("\xef\xbb\xbf"+good), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(strings.Repeat(" ", maxPeersFile)+good), "cp-1", "10.0.0.1:7301")
	f.Add([]byte(`[`+strings.Repeat(`{"id":"x","address":"y"},`, 2000)+`{}]`), "x", "y")

	f.Fuzz(func(t *testing.T, data []byte, id, addr string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, PeersFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		conf, ok, err := readPeersFile(dir, id, addr)
		if err != nil {
			if ok || !errors.Is(err, ErrPeersFile) {
				t.Fatalf("ok %v, error of no known kind: %v", ok, err)
			}
			return
		}
		if !ok {
			t.Fatal("a peers file that is there read as none")
		}
		if len(data) > maxPeersFile {
			t.Fatalf("a peers file of %d bytes accepted (at most %d)", len(data), maxPeersFile)
		}
		// What RecoverCluster checks first (hashicorp/raft checkConfiguration).
		ids, addrs, voters := map[raft.ServerID]bool{}, map[raft.ServerAddress]bool{}, 0
		for _, s := range conf.Servers {
			if s.ID == "" || s.Address == "" || ids[s.ID] || addrs[s.Address] {
				t.Fatalf("accepted a configuration RecoverCluster refuses (empty, or the same id or address twice): %+v", conf.Servers)
			}
			ids[s.ID], addrs[s.Address] = true, true
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		// Nor two servers at one address written two ways (sameAddress).
		if len(conf.Servers) <= 200 {
			for a := range conf.Servers {
				for b := a + 1; b < len(conf.Servers); b++ {
					if sameAddress(string(conf.Servers[a].Address), string(conf.Servers[b].Address)) {
						t.Fatalf("accepted two servers at one address: %+v", conf.Servers)
					}
				}
			}
		}
		if voters == 0 {
			t.Fatalf("accepted a configuration without a voter: %+v", conf.Servers)
		}
		i := slices.IndexFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == id })
		if i < 0 {
			t.Fatalf("accepted a configuration without this node %q: %+v", id, conf.Servers)
		}
		if addr != "" && string(conf.Servers[i].Address) != addr {
			t.Fatalf("this node recovers at %q, but listens on %q", conf.Servers[i].Address, addr)
		}
		// Otherwise the file's own list, as hashicorp/raft's reader reads it.
		want, err := raft.ReadConfigJSON(filepath.Join(dir, PeersFile))
		if err != nil || len(want.Servers) != len(conf.Servers) {
			t.Fatalf("the file read again: %+v, %v; accepted %+v", want.Servers, err, conf.Servers)
		}
		for j, s := range conf.Servers {
			w := want.Servers[j]
			if s.ID != w.ID || s.Suffrage != w.Suffrage || j != i && s.Address != w.Address {
				t.Fatalf("server %d accepted as %+v, the file says %+v", j, s, w)
			}
		}
		// And the reading noVoter makes of it agrees on the suffrage.
		var plain []struct {
			NonVoter bool `json:"non_voter"`
		}
		if json.Unmarshal(data, &plain) == nil && len(plain) != len(conf.Servers) {
			t.Fatalf("%d servers in the file as JSON, %d accepted", len(plain), len(conf.Servers))
		}
	})
}
