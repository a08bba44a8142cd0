package replication

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"mesh/controlplane/datadir"
)

// makeStores writes a member's stores as Raft leaves them: the current term (if
// term), the log entries first..last, and a snapshot at each of snapAt (oldest
// first).
func makeStores(t *testing.T, term bool, first, last uint64, snapAt ...uint64) string {
	t.Helper()
	dir := t.TempDir()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if term {
		if err := bolt.SetUint64(stableCurrentTerm, 2); err != nil {
			t.Fatal(err)
		}
	}
	for i := first; i <= last && last > 0; i++ {
		if err := bolt.StoreLog(&raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte(`{"op":"x"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 10, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.Configuration{Servers: []raft.Server{{ID: "cp-1", Address: "127.0.0.1:1"}}}
	for _, at := range snapAt {
		_, trans := raft.NewInmemTransport("127.0.0.1:1")
		sink, err := snaps.Create(raft.SnapshotVersionMax, at, 2, conf, 1, trans)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write([]byte(strings.Repeat("state ", 200))); err != nil {
			t.Fatal(err)
		}
		if err := sink.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// snapshotFile is a file of the snapshot at index (newest first among equals).
func snapshotFile(t *testing.T, dir string, index uint64, name string) string {
	t.Helper()
	snaps, err := snapshotDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.index == index {
			return filepath.Join(dir, "snapshots", s.name, name)
		}
	}
	t.Fatalf("no snapshot at %d", index)
	return ""
}

// TestDamagedStoresAreRefused: what a power loss on a bad disk, or a hand, leaves
// of a control node's Raft store. bbolt panicked on garbled pages, raft panicked
// ("log not found") on a log that does not continue the snapshot it restored, and
// an emptied or removed raft.db next to snapshots started a node without its log
// and its vote. Each is now refused before Raft opens the stores, with ErrDamaged
// naming the file; a store Raft can start from whole (a newer snapshot damaged, the
// log covering it) still opens.
func TestDamagedStoresAreRefused(t *testing.T) {
	truncate := func(size int64) func(*testing.T, string) string {
		return func(t *testing.T, dir string) string {
			if err := os.Truncate(raftDBPath(dir), size); err != nil {
				t.Fatal(err)
			}
			return raftDBPath(dir)
		}
	}
	garbleSnapshot := func(index uint64, name string) func(*testing.T, string) string {
		return func(t *testing.T, dir string) string {
			f := snapshotFile(t, dir, index, name)
			if err := os.Truncate(f, 10); err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	cases := []struct {
		name        string
		first, last uint64
		snapAt      []uint64
		damage      func(*testing.T, string) string // returns the file the error must name
		passedOver  bool
		noTerm      bool
		healthy     bool // damage is no damage: a change Raft itself makes
	}{
		{name: "whole", first: 1, last: 12, snapAt: []uint64{4, 8}},
		{name: "raft.db emptied", first: 5, last: 12, snapAt: []uint64{4, 8}, damage: truncate(0)},
		{name: "raft.db removed", first: 5, last: 12, snapAt: []uint64{4, 8}, damage: func(t *testing.T, dir string) string {
			if err := os.Remove(raftDBPath(dir)); err != nil {
				t.Fatal(err)
			}
			return raftDBPath(dir)
		}},
		{name: "raft.db cut in its first page", first: 1, last: 12, damage: truncate(4096)},
		// bbolt maps the file: reading the pages cut off is a fault (SIGBUS).
		{name: "raft.db cut after its meta pages", first: 1, last: 12, damage: truncate(2 * 4096)},
		{name: "raft.db pages garbled", first: 1, last: 200, snapAt: []uint64{100}, damage: func(t *testing.T, dir string) string {
			data, err := os.ReadFile(raftDBPath(dir))
			if err != nil {
				t.Fatal(err)
			}
			for off := 2 * 4096; off+16 <= len(data); off += 4096 {
				for i := off; i < off+16; i++ {
					data[i] ^= 0xff
				}
			}
			if err := os.WriteFile(raftDBPath(dir), data, 0o600); err != nil {
				t.Fatal(err)
			}
			return raftDBPath(dir)
		}},
		// A follower that was behind installs its leader's snapshot and keeps the
		// entries it had: its log has a gap before the snapshot.
		{name: "a follower's log with a gap before the snapshot it installed", first: 1, last: 5, snapAt: []uint64{20}, healthy: true,
			damage: func(t *testing.T, dir string) string {
				bolt, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
				if err != nil {
					t.Fatal(err)
				}
				defer bolt.Close()
				for i := uint64(21); i <= 30; i++ {
					if err := bolt.StoreLog(&raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: []byte(`{"op":"x"}`)}); err != nil {
						t.Fatal(err)
					}
				}
				return ""
			}},
		{name: "the entries after the snapshot with a gap", first: 1, last: 5, snapAt: []uint64{3},
			damage: func(t *testing.T, dir string) string {
				bolt, err := raftboltdb.New(raftboltdb.Options{Path: raftDBPath(dir)})
				if err != nil {
					t.Fatal(err)
				}
				defer bolt.Close()
				if err := bolt.StoreLog(&raft.Log{Index: 9, Term: 2, Type: raft.LogCommand, Data: []byte(`{"op":"x"}`)}); err != nil {
					t.Fatal(err)
				}
				return raftDBPath(dir)
			}},
		{name: "newest snapshot torn, the log covers it", first: 3, last: 12, snapAt: []uint64{4, 8}, damage: garbleSnapshot(8, "state.bin"), passedOver: true},
		{name: "newest snapshot torn, the log does not cover it", first: 7, last: 12, snapAt: []uint64{4, 8}, damage: garbleSnapshot(8, "state.bin")},
		{name: "newest snapshot's meta torn, the log does not cover it", first: 7, last: 12, snapAt: []uint64{4, 8}, damage: garbleSnapshot(8, "meta.json")},
		{name: "the only snapshot torn", first: 1, last: 12, snapAt: []uint64{8}, damage: garbleSnapshot(8, "state.bin")},
		// A backup serve took is one snapshot and no log entry: with its snapshot's
		// meta torn, Raft started from nothing, with no configuration, and waited
		// for a leader for good ("a leader needs 1 of the 0 voters"), while check
		// said serve would start.
		{name: "a backup's only snapshot's meta torn", snapAt: []uint64{8}, damage: garbleSnapshot(8, "meta.json")},
		{name: "a backup's only snapshot torn", snapAt: []uint64{8}, damage: garbleSnapshot(8, "state.bin")},
		{name: "newest snapshot's meta torn, an older one and no log", snapAt: []uint64{4, 8}, damage: garbleSnapshot(8, "meta.json")},
		{name: "the log after a gap", first: 6, last: 12, damage: func(t *testing.T, dir string) string { return raftDBPath(dir) }},
		{name: "the term lost", first: 1, last: 12, noTerm: true, damage: func(t *testing.T, dir string) string { return raftDBPath(dir) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makeStores(t, !c.noTerm, c.first, c.last, c.snapAt...)
			var file string
			if c.damage != nil {
				file = c.damage(t, dir)
			}
			var warned strings.Builder
			log := hclog.New(&hclog.LoggerOptions{Output: &warned, Level: hclog.Warn})
			store, _, err := openStores(dir, log, false)
			if store != nil {
				defer store.Close()
			}
			if c.damage == nil || c.passedOver || c.healthy {
				if err != nil {
					t.Fatalf("a store Raft starts from whole was refused: %v", err)
				}
				if got := strings.Contains(warned.String(), "snapshot is damaged"); got != c.passedOver {
					t.Fatalf("warned of a damaged snapshot: %t, want %t:\n%s", got, c.passedOver, warned.String())
				}
				return
			}
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("got %v, want ErrDamaged", err)
			}
			var de *DamageError
			if !errors.As(err, &de) || de.File != file {
				t.Fatalf("the error names %q, want %q: %v", de.File, file, err)
			}
			for _, want := range []string{file, "backup", "meshctl join"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("the error does not say %q: %v", want, err)
				}
			}
			// A recovered fault reads as a crash to a person ("runtime error:
			// invalid memory address"): the problem is said in words.
			if strings.Contains(err.Error(), "runtime error") {
				t.Fatalf("the error quotes the recovered panic: %v", err)
			}
		})
	}
}

// TestRaftDBThatIsNotAFile: a directory where raft.db belongs is said as such, a
// data directory that cannot be used (datadir.ErrNotAFile, exit 7), not "open raft
// log: is a directory" (exit 1).
func TestRaftDBThatIsNotAFile(t *testing.T) {
	dir := makeStores(t, true, 1, 4)
	if err := os.Remove(raftDBPath(dir)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(raftDBPath(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	store, _, err := openStores(dir, hclog.NewNullLogger(), false)
	if store != nil {
		store.Close()
	}
	if !errors.Is(err, datadir.ErrNotAFile) || !strings.Contains(err.Error(), raftDBPath(dir)+" is a directory, not a regular file") {
		t.Fatalf("got %v, want datadir.ErrNotAFile naming %s", err, raftDBPath(dir))
	}
}

// TestFreshStoresOpen: a directory with no store yet (bootstrap, join) opens.
func TestFreshStoresOpen(t *testing.T) {
	store, _, err := openStores(filepath.Join(t.TempDir(), "raft"), hclog.NewNullLogger(), false)
	if err != nil {
		t.Fatal(err)
	}
	store.Close()
}

// TestEndsOfTheLogAreRead: hashicorp/raft reads the log's last entry at start
// whatever the snapshot it restores ("start raft: failed to get last log at index
// N: log not found", exit 1, no advice), and the check read none when that
// snapshot was at or past the log's end. A page copied from another moment than
// its neighbours (a copy of a running node) gives a key the cursor finds and a
// lookup does not: such a log is damage, as is a first or last entry garbled.
func TestEndsOfTheLogAreRead(t *testing.T) {
	logsBucket := []byte("logs") // raft-boltdb's
	key := func(i uint64) []byte { return binary.BigEndian.AppendUint64(nil, i) }
	edit := func(t *testing.T, dir string, f func(*bbolt.Bucket) error) {
		t.Helper()
		db, err := bbolt.Open(raftDBPath(dir), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if err := db.Update(func(tx *bbolt.Tx) error { return f(tx.Bucket(logsBucket)) }); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name        string
		first, last uint64
		snapAt      uint64
		damage      func(*bbolt.Bucket) error
	}{
		{name: "the last key gives no entry, the snapshot past the log", first: 1, last: 12, snapAt: 20, damage: func(b *bbolt.Bucket) error {
			if err := b.Delete(key(12)); err != nil {
				return err
			}
			_, err := b.CreateBucket(key(12)) // a key the cursor lists and Get does not give
			return err
		}},
		{name: "the last entry garbled, the snapshot at it", first: 1, last: 12, snapAt: 12, damage: func(b *bbolt.Bucket) error {
			return b.Put(key(12), []byte{0xc1, 0xc1, 0xc1})
		}},
		{name: "the first entry garbled, before the snapshot", first: 1, last: 12, snapAt: 8, damage: func(b *bbolt.Bucket) error {
			return b.Put(key(1), []byte{0xc1, 0xc1, 0xc1})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makeStores(t, true, c.first, c.last, c.snapAt)
			edit(t, dir, c.damage)
			store, _, err := openStores(dir, hclog.NewNullLogger(), false)
			if store != nil {
				store.Close()
			}
			if !errors.Is(err, ErrDamaged) {
				t.Fatalf("got %v, want ErrDamaged", err)
			}
			var de *DamageError
			if !errors.As(err, &de) || de.File != raftDBPath(dir) {
				t.Fatalf("the error does not name %s: %v", raftDBPath(dir), err)
			}
		})
	}
}

// TestTornFreelistIsRefused: a raft.db copied page by page while serve wrote it
// can list a page in use as free. Every entry reads well, so the node started,
// led, and bbolt panicked ("page N already freed") on its first write. bbolt's
// consistency check finds it before the store is opened for writing.
func TestTornFreelistIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := raftDBPath(dir)
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64(stableCurrentTerm, 2); err != nil {
		t.Fatal(err)
	}
	data := []byte(strings.Repeat("x", 1000))
	for i := uint64(1); i <= 300; i++ {
		if err := bolt.StoreLog(&raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	// A compaction, then a write: the pages it freed are on the freelist.
	if err := bolt.DeleteRange(1, 150); err != nil {
		t.Fatal(err)
	}
	if err := bolt.StoreLog(&raft.Log{Index: 301, Term: 2, Type: raft.LogCommand, Data: data}); err != nil {
		t.Fatal(err)
	}
	if err := bolt.Close(); err != nil {
		t.Fatal(err)
	}

	// The file as bbolt lays it out: two meta pages, the newer (higher txid) in
	// force, naming the root bucket's page and the freelist's page.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096
	le := binary.LittleEndian
	meta := raw[0:pageSize]
	if other := raw[pageSize : 2*pageSize]; le.Uint64(other[64:]) > le.Uint64(meta[64:]) {
		meta = other
	}
	if le.Uint32(meta[24:]) != pageSize {
		t.Fatalf("page size %d, want %d", le.Uint32(meta[24:]), pageSize)
	}
	root, freelist := le.Uint64(meta[32:]), le.Uint64(meta[48:])
	fl := raw[freelist*pageSize : (freelist+1)*pageSize]
	count := uint64(le.Uint16(fl[10:]))
	if count == 0 || count >= 0xffff || 16+(count+1)*8 > pageSize || le.Uint32(fl[12:]) != 0 {
		t.Fatalf("the freelist holds %d pages (overflow %d): this test wants a few, on one page", count, le.Uint32(fl[12:]))
	}
	le.PutUint64(fl[16+count*8:], root) // the root bucket's page, in use, listed as free
	le.PutUint16(fl[10:], uint16(count+1))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	store, _, err := openStores(dir, hclog.NewNullLogger(), false)
	if store != nil {
		store.Close()
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("got %v, want ErrDamaged", err)
	}
	var de *DamageError
	if !errors.As(err, &de) || de.File != path || !strings.Contains(err.Error(), "consistency check") {
		t.Fatalf("the error does not name %s and bbolt's check: %v", path, err)
	}
	if strings.Contains(err.Error(), "runtime error") {
		t.Fatalf("the error quotes a recovered panic: %v", err)
	}
}

// TestABoltFileWithoutARaftLogIsSaidSo (a walkthrough): a raft.db that is a bbolt
// file holding none of Raft's buckets (a file restored from the wrong place) was
// refused as "corrupt or cut short: runtime error: invalid memory address or nil
// pointer dereference", read like a crash. It is damage, said in words.
func TestABoltFileWithoutARaftLogIsSaidSo(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "snapshots", "1-5-1700000000000"), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(raftDBPath(dir), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Inspect(dir, "cp-1", "", func() raft.FSM { return &probeFSM{} }, time.Second)
	if !errors.Is(err, ErrDamaged) || strings.Contains(err.Error(), "runtime error") || strings.Contains(err.Error(), "nil pointer") {
		t.Fatalf("a bbolt file without a Raft log: %v", err)
	}
	t.Log(err)
}
