package backup

import (
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/tokenfmt"
)

// FuzzBackupNames: the names in a backup directory are operator-reachable input
// (anything may be put in the directory: another node's backups, another mesh's,
// hand-made copies, garbage), and retain and removeTemporary remove what the name
// patterns match. For any valid node id, mesh tag, time and index:
//
//   - Name's output matches the node's namePattern and gives back the stamp and
//     index it was made of, and no tempPattern; a tempPrefix name matches the
//     tempPattern and no namePattern;
//   - a backup of another (node, tag) matches this node's namePattern only when
//     node-tag is the same text (another node whose id begins with this one's, or
//     another mesh's node of the same id, is never taken for this node's);
//   - an arbitrary directory entry is never both a temporary of one node and a
//     backup of another (removeTemporary never removes a backup);
//   - slot (the interval a backup counts in) follows the time in the names:
//     a later stamp never falls in an earlier interval;
//   - list, over a directory holding the fuzzed entry besides real backups,
//     returns only names the pattern matches, newest first.
func FuzzBackupNames(f *testing.F) {
	f.Add("cp-1", "cp-10", []byte{0x3f, 0x2a, 0x9c, 0x1e}, []byte{0x3f, 0x2a, 0x9c, 0x1e}, int64(1796550741), int64(3600), uint64(10), int64(3600), "cp-1-3f2a9c1e-20200101T000000Z-i1")
	f.Add("cp", "cp-1", []byte{1, 2, 3, 4}, []byte{1, 2, 3, 4}, int64(0), int64(1), uint64(0), int64(1), ".tmp-cp-01020304-20200101T000000Z-old")
	f.Add("cp-1", "cp-1", []byte{0x0b, 0xad, 0xf0, 0x0d}, []byte{0x3f, 0x2a, 0x9c, 0x1e}, int64(253402300799), int64(-1), uint64(1<<64-1), int64(60), "cp-1-0badf00d-99991231T235959Z-i18446744073709551616")
	f.Add("a", "a-12345678", []byte{0x12, 0x34, 0x56, 0x78}, []byte{0x12, 0x34, 0x56, 0x78}, int64(-62135596800), int64(86400), uint64(7), int64(86400), "a-12345678-12345678-20200101T000000Z-i1")
	f.Add("cp-1", "cp-1", []byte{0x3f, 0x2a, 0x9c, 0x1e}, []byte{0x3f, 0x2a, 0x9c, 0x1e}, int64(1796550741), int64(0), uint64(5), int64(1), "cp-1-3f2a9c1e-20261306T256199Z-i00005")
	f.Add("x", "y", []byte{0, 0, 0, 0}, []byte{0xff, 0xff, 0xff, 0xff}, int64(9223372036), int64(1), uint64(1), int64(1), "x-00000000-22620411T234736Z-i1")
	f.Add("x", "y", []byte{0, 0, 0, 0}, []byte{0xff, 0xff, 0xff, 0xff}, int64(1), int64(1), uint64(1), int64(7200), "x-00000000-19691231T233000Z-i1")

	f.Fuzz(func(t *testing.T, node, other string, pin, otherPin []byte, sec, later int64, index uint64, everySec int64, entry string) {
		if tokenfmt.CheckNodeID(node) != nil || tokenfmt.CheckNodeID(other) != nil || len(pin) < 4 || len(otherPin) < 4 {
			return
		}
		// The tag is the first MeshTagLen hex digits of the CA pin, lower case (New).
		tag := hex.EncodeToString(pin)[:MeshTagLen]
		otherTag := hex.EncodeToString(otherPin)[:MeshTagLen]
		// Times a stamp can hold: years 0000 to 9999.
		const minSec, maxSec = -62167219200, 253402300799
		if sec < minSec || sec > maxSec {
			return
		}
		at := time.Unix(sec, 0).UTC()
		stamp := at.Format(stampLayout)

		pat, tmp := namePattern(node, tag), tempPattern(node, tag)
		opat, otmp := namePattern(other, otherTag), tempPattern(other, otherTag)

		name := Name(node, tag, at, index)
		m := pat.FindStringSubmatch(name)
		if m == nil {
			t.Fatalf("Name %q does not match its own node's pattern", name)
		}
		if m[1] != stamp || m[2] != strconv.FormatUint(index, 10) {
			t.Fatalf("Name %q read back as stamp %q index %q, want %q %d", name, m[1], m[2], stamp, index)
		}
		if back, err := time.Parse(stampLayout, m[1]); err != nil || !back.Equal(at) {
			t.Fatalf("stamp %q of %v reads back as %v, %v", m[1], at, back, err)
		}
		if tmp.MatchString(name) || otmp.MatchString(name) {
			t.Fatalf("backup %q matches a temporary pattern: removeTemporary would remove it", name)
		}
		temp := tempPrefix(node, tag, stamp) + "old"
		if !tmp.MatchString(temp) || pat.MatchString(temp) || opat.MatchString(temp) {
			t.Fatalf("temporary %q: own temp pattern %v, name patterns %v %v", temp, tmp.MatchString(temp), pat.MatchString(temp), opat.MatchString(temp))
		}

		// Isolation between nodes and meshes.
		otherName := Name(other, otherTag, at, index)
		same := other+"-"+otherTag == node+"-"+tag
		if pat.MatchString(otherName) != same {
			t.Fatalf("backup %q of (%s, %s) matches the pattern of (%s, %s): %v", otherName, other, otherTag, node, tag, !same)
		}

		// An arbitrary entry: never a temporary of one and a backup of another.
		for _, p := range []struct{ temp, name bool }{
			{tmp.MatchString(entry), opat.MatchString(entry)},
			{otmp.MatchString(entry), pat.MatchString(entry)},
			{tmp.MatchString(entry), pat.MatchString(entry)},
		} {
			if p.temp && p.name {
				t.Fatalf("entry %q is both a temporary and a backup", entry)
			}
		}

		// slot follows the time in the names.
		if everySec <= 0 || everySec > 400*24*3600 {
			return
		}
		w := &Writer{cfg: Config{Node: node, Every: time.Duration(everySec) * time.Second, Keep: 3}, tag: tag,
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		later2 := sec + later
		if later >= 0 && later2 >= sec && later2 <= maxSec {
			next := time.Unix(later2, 0).UTC()
			a, b := w.slot(name), w.slot(Name(node, tag, next, index))
			if a > b {
				t.Fatalf("a backup at %v is in interval %d, one at %v (later) in interval %d (every %v)", at, a, next, b, w.cfg.Every)
			}
			if a == b && next.Sub(at) >= w.cfg.Every {
				t.Fatalf("backups at %v and %v, %v apart, share interval %d (every %v)", at, next, next.Sub(at), a, w.cfg.Every)
			}
			if w.newer(stored{at: next.Format(stampLayout)}, name) != next.After(at) {
				t.Fatalf("newer(%v than %v) = %v", next, at, !next.After(at))
			}
		}

		// list over a real directory holding the entry.
		if entry == "" || entry == "." || entry == ".." || len(entry) > 255 || strings.ContainsAny(entry, "/\x00") {
			return
		}
		dir := t.TempDir()
		w.cfg.Dir = dir
		for _, n := range []string{name, otherName, entry} {
			if err := os.Mkdir(filepath.Join(dir, n), 0o700); err != nil && !os.IsExist(err) {
				return // a name the file system refuses
			}
		}
		got, err := w.list()
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range got {
			mm := pat.FindStringSubmatch(s.name)
			if mm == nil || mm[1] != s.at || strconv.FormatUint(s.index, 10) != strings.TrimLeft(mm[2], "0") && !(s.index == 0 && strings.Trim(mm[2], "0") == "") {
				t.Fatalf("list returned %+v, which the pattern reads as %q", s, mm)
			}
			if i > 0 && (got[i-1].at < s.at || got[i-1].at == s.at && got[i-1].index < s.index) {
				t.Fatalf("list is not newest first: %+v before %+v", got[i-1], s)
			}
		}
		found := false
		for _, s := range got {
			found = found || s.name == name
		}
		if !found {
			t.Fatalf("list of %v left out the backup %q", got, name)
		}
	})
}
