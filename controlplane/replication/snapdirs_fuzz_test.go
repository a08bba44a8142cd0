package replication

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// FuzzSnapshotDirs: the snapshot directories of raft/snapshots/ and their
// meta.json are what a disk fault, a copy or a hand left there; checkStores judges
// the store by what snapshotDirs says of them, and claims to read "what Raft will
// read at start". For any names and meta.json contents, snapshotDirs must not
// panic, must list every directory that is not a temporary (".tmp") once, newest
// first (term, then index, then name), take term and index from a readable
// meta.json and otherwise from a name of three numbers; and the snapshots it calls
// readable must be, in the same order, the ones hashicorp/raft's own file
// snapshot store lists (differential: a snapshot raft skips taken for the one it
// restores, or one raft restores taken for damage, is a wrong verdict of
// `meshctl check` and of serve's start).
func FuzzSnapshotDirs(f *testing.F) {
	meta := func(id string, term, index uint64, extra string) string {
		return `{"Version":1,"ID":"` + id + `","Index":` + strconv.FormatUint(index, 10) + `,"Term":` + strconv.FormatUint(term, 10) +
			`,"Peers":null,"Configuration":{"Servers":[{"Suffrage":0,"ID":"cp-1","Address":"10.0.0.1:7301"}]},"ConfigurationIndex":1,"Size":10,"CRC":"AAAAAAAAAAA="` + extra + `}` + "\n"
	}
	f.Add("2-10-1700000000000", meta("2-10-1700000000000", 2, 10, ""), "2-12-1700000000001", meta("2-12-1700000000001", 2, 12, ""), "3-5-1", "")
	f.Add("2-10-1700000000000", meta("2-10-1700000000000", 2, 10, ""), "2-12-1700000000001.tmp", meta("2-12-1700000000001.tmp", 2, 12, ""), "x", "{")
	f.Add("2-10-1", meta("other", 2, 10, ""), "1-1-1", meta("1-1-1", 1, 1, ""), "9-9-9", "not json")
	f.Add("2-10-1", meta("2-10-1", 2, 10, "")+"trailing", "1-1-1", meta("1-1-1", 1, 1, ""), "", "")
	f.Add("2-10-1", strings.Replace(meta("2-10-1", 2, 10, ""), `"Version":1`, `"Version":7`, 1), "1-1-1", meta("1-1-1", 1, 1, ""), "", "")
	f.Add("2-10-1", meta("2-10-1", 2, 10, `,"ID":"1-1-1"`), "1-1-1", meta("1-1-1", 1, 1, ""), "18446744073709551616-1-1", "[]")
	f.Add("a-b-c", meta("a-b-c", 0, 0, ""), "-1--", meta("-1--", 5, 5, ""), "1-2", "null")
	f.Add("2-10-1", `{"version":1,"id":"2-10-1","index":10,"term":2}`, "2-10-0", `{"Version":1,"ID":"2-10-0","Index":10,"Term":2}`, "", "")

	f.Fuzz(func(t *testing.T, name1, meta1, name2, meta2, name3, meta3 string) {
		dir := t.TempDir()
		snaps := filepath.Join(dir, "snapshots")
		if err := os.MkdirAll(snaps, 0o700); err != nil {
			t.Fatal(err)
		}
		made := map[string]bool{}
		for _, s := range [][2]string{{name1, meta1}, {name2, meta2}, {name3, meta3}} {
			name := s[0]
			if name == "" || name == "." || name == ".." || len(name) > 200 || strings.ContainsAny(name, "/\x00") || made[name] {
				continue
			}
			if err := os.Mkdir(filepath.Join(snaps, name), 0o700); err != nil {
				continue
			}
			made[name] = true
			if s[1] != "" {
				if err := os.WriteFile(filepath.Join(snaps, name, "meta.json"), []byte(s[1]), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		got, err := snapshotDirs(dir)
		if err != nil {
			t.Fatal(err)
		}
		// Every directory but the temporaries, once.
		var names []string
		for _, s := range got {
			names = append(names, s.name)
		}
		var want []string
		for n := range made {
			if !strings.HasSuffix(n, ".tmp") {
				want = append(want, n)
			}
		}
		slices.Sort(want)
		sorted := slices.Sorted(slices.Values(names))
		if !slices.Equal(sorted, want) {
			t.Fatalf("listed %q, want %q", names, want)
		}
		for i, s := range got {
			if i > 0 {
				p := got[i-1]
				if p.term < s.term || p.term == s.term && (p.index < s.index || p.index == s.index && p.name < s.name) {
					t.Fatalf("not newest first: %+v before %+v", p, s)
				}
			}
			if !s.metaReadable {
				parts := strings.Split(s.name, "-")
				wantTerm, wantIndex := uint64(0), uint64(0)
				if len(parts) == 3 {
					wantTerm, _ = strconv.ParseUint(parts[0], 10, 64)
					wantIndex, _ = strconv.ParseUint(parts[1], 10, 64)
				}
				if s.term != wantTerm || s.index != wantIndex {
					t.Fatalf("unreadable %q placed at term %d index %d", s.name, s.term, s.index)
				}
			}
		}
		// The readable ones are those raft's own file snapshot store reads, each as
		// itself: raft opens a snapshot by the ID its meta.json gives, so one whose ID
		// names another directory (or none) is not restored as itself by raft either.
		for _, s := range got {
			m, ok := raftReads(t, dir, s.name)
			if s.metaReadable != ok {
				if s.metaReadable && !crcDecodes(t, filepath.Join(snaps, s.name, "meta.json")) {
					continue // raft skips it, the check finds it not whole: passed over alike
				}
				t.Fatalf("snapshot %q: readable to the check %v, to raft %v (%+v)", s.name, s.metaReadable, ok, m)
			}
			if ok && (m.Term != s.term || m.Index != s.index) {
				t.Fatalf("%q placed at term %d index %d, raft reads term %d index %d", s.name, s.term, s.index, m.Term, m.Index)
			}
		}
	})
}

// raftReads is what hashicorp/raft's file snapshot store reads of the snapshot
// directory name of dir alone: its meta, when it lists it under its own name.
func raftReads(t *testing.T, dir, name string) (*raft.SnapshotMeta, bool) {
	t.Helper()
	alone := t.TempDir()
	if err := os.MkdirAll(filepath.Join(alone, "snapshots", name), 0o700); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "snapshots", name, "meta.json")); err == nil {
		if err := os.WriteFile(filepath.Join(alone, "snapshots", name, "meta.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	store, err := raft.NewFileSnapshotStoreWithLogger(alone, 1, hclog.New(&hclog.LoggerOptions{Output: io.Discard}))
	if err != nil {
		t.Fatal(err)
	}
	listed, err := store.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].ID != name {
		return nil, false
	}
	return listed[0], true
}

// crcDecodes reports whether the CRC member of the meta.json at path is one raft's
// decoder takes (base64); the check's meta reading ignores it, and its opening,
// as raft's, refuses it.
func crcDecodes(t *testing.T, path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var m struct{ CRC []byte }
	return json.NewDecoder(bytes.NewReader(data)).Decode(&m) == nil
}
