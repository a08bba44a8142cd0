package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// The applied state's file holds two slots of equal size, each a multiple of the page
// size, one after the other. A slot holds one record: a header line, then the
// applied state as JSON. The agent writes each new record over the older of the two
// slots and flushes it, so that the newer record is either whole and checked by its
// digest, or torn and ignored, the other slot then holding the one before:
//
//	meshhost-applied-state seq=000000000000002a len=0000037f sha256=<64 hex digits>
//	{"format":1,"have_applied":true,"version":41,...}
//
// seq orders the records (the higher whole one is the applied state), len is the
// JSON's length in bytes, and the digest is SHA-256 over the header up to "sha256="
// followed by the JSON. Bytes after a record, to the end of its slot, are zero.
const (
	recordMagic = "meshhost-applied-state"
	// prefixLen is the header up to the digest: the part the digest covers.
	prefixLen = len(recordMagic + " seq=0000000000000000 len=00000000 ")
	// headerLen is the whole header line.
	headerLen = prefixLen + len("sha256=") + 2*sha256.Size + 1
	// pageSize is the unit of a slot's size, so that a torn write of one slot
	// never reaches into the other.
	pageSize = 4096
)

// appendRecord appends the record of json under sequence seq to dst.
func appendRecord(dst []byte, seq uint64, json []byte) []byte {
	start := len(dst)
	dst = fmt.Appendf(dst, "%s seq=%016x len=%08x ", recordMagic, seq, len(json))
	sum := sha256.New()
	sum.Write(dst[start:])
	sum.Write(json)
	dst = append(dst, "sha256="...)
	dst = hex.AppendEncode(dst, sum.Sum(nil))
	dst = append(dst, '\n')
	return append(dst, json...)
}

// slotSizeFor is the slot size of a new file for a record of json bytes: room for
// twice the record, so that the state can grow before the file must be made anew.
func slotSizeFor(json int) int {
	need := 2 * (headerLen + json)
	return (need + pageSize - 1) / pageSize * pageSize
}

// readRecord reads the record in slot. It returns the reason it holds none (never
// written, torn, or not a record), without quoting the slot's content.
func readRecord(slot []byte) (seq uint64, json []byte, reason string) {
	if len(slot) < headerLen {
		return 0, nil, "it is shorter than a record's header"
	}
	if allZero(slot[:headerLen]) {
		return 0, nil, "it was never written"
	}
	h := slot[:headerLen]
	if !bytes.HasPrefix(h, []byte(recordMagic+" seq=")) {
		return 0, nil, "it does not start with a record's header"
	}
	fields := bytes.Fields(h[len(recordMagic):])
	if len(fields) != 3 || h[headerLen-1] != '\n' {
		return 0, nil, "its header is not seq, len and sha256"
	}
	seq, ok1 := hexField(fields[0], "seq=", 16)
	n, ok2 := hexField(fields[1], "len=", 8)
	digest, ok3 := fields[2], bytes.HasPrefix(fields[2], []byte("sha256=")) && len(fields[2]) == len("sha256=")+2*sha256.Size
	if !ok1 || !ok2 || !ok3 {
		return 0, nil, "its header is not seq, len and sha256"
	}
	if n > uint64(len(slot)-headerLen) {
		return 0, nil, "its length runs past the end of its slot"
	}
	json = slot[headerLen : headerLen+int(n)]
	sum := sha256.New()
	sum.Write(h[:prefixLen])
	sum.Write(json)
	if hex.EncodeToString(sum.Sum(nil)) != string(digest[len("sha256="):]) {
		return 0, nil, "its digest does not match (a write torn by a crash, or damage)"
	}
	return seq, json, ""
}

// hexField parses name followed by exactly width lower-case hex digits.
func hexField(f []byte, name string, width int) (uint64, bool) {
	if !bytes.HasPrefix(f, []byte(name)) || len(f) != len(name)+width {
		return 0, false
	}
	digits := f[len(name):]
	for _, c := range digits {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(string(digits), 16, 64)
	return v, err == nil
}

// addedTo says why data, a state file whose size is not two whole slots, is not one
// cut short but one with bytes added to it (a copy appended to, a file extended),
// or "" when it may be cut short. A file cut short is the start of one the agent
// wrote: a record, zeros to the end of its slot, then the second slot's record (or
// zeros) from a page boundary, and zeros to the end of the file's two slots. Calling
// a file of 3 MB "truncated" sent the operator looking for what was missing.
func addedTo(data []byte) string {
	_, first, reason := readRecord(data)
	if reason != "" {
		return "" // the first record is torn: cut short, or damaged where it was
	}
	end := headerLen + len(first)
	next := nonZero(data, end)
	if next < 0 {
		return ""
	}
	if next%pageSize != 0 || !startsRecord(data[next:]) {
		return fmt.Sprintf("it is %d bytes, and from byte %d on it holds what no state file holds: something was added to it (it is not cut short)", len(data), next)
	}
	// The second slot starts at next: the file the agent wrote is two slots of
	// that size.
	size := next
	if len(data) > 2*size {
		return fmt.Sprintf("it is %d bytes, more than its two slots of %d bytes each: something was added after them (it is not cut short)", len(data), size)
	}
	_, second, reason := readRecord(data[size:])
	if reason != "" {
		return ""
	}
	if extra := nonZero(data, size+headerLen+len(second)); extra >= 0 {
		return fmt.Sprintf("it is %d bytes, and from byte %d on, after its second record, it holds what no state file holds: something was added to it (it is not cut short)", len(data), extra)
	}
	return ""
}

// startsRecord reports whether b starts with a record's magic, or is cut short
// within it.
func startsRecord(b []byte) bool {
	magic := []byte(recordMagic + " ")
	if len(b) < len(magic) {
		return bytes.HasPrefix(magic, b)
	}
	return bytes.HasPrefix(b, magic)
}

// nonZero is the offset of the first byte of data at or after from that is not
// zero, or -1.
func nonZero(data []byte, from int) int {
	for i := from; i < len(data); i++ {
		if data[i] != 0 {
			return i
		}
	}
	return -1
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// slots is what a state file holds: its slot size, and the newest whole record.
type slots struct {
	size int    // of one slot
	cur  int    // the slot of the newest whole record
	seq  uint64 // its sequence
	json []byte
	used [2]int // bytes of each slot up to the end of its record (0: none)
}

// fileFault is why a state file's content cannot be used: it ends early, or it is
// wrong. Exactly one is set.
type fileFault struct {
	truncated bool
	corrupt   string
}

// readSlots finds the newest whole record of a state file's content.
func readSlots(data []byte) (slots, *fileFault) {
	if len(data) == 0 || allZero(data) {
		// Empty, or zero-filled as some file systems leave a file after a crash.
		return slots{}, &fileFault{truncated: true}
	}
	if len(data)%(2*pageSize) != 0 {
		if !bytes.HasPrefix(data, []byte(recordMagic+" ")) {
			// Not a state file cut short but something else: JSON written by hand,
			// say, taking it for the legacy file.
			return slots{}, &fileFault{corrupt: "it does not start with a record's header, and it is not two whole slots"}
		}
		if reason := addedTo(data); reason != "" {
			return slots{}, &fileFault{corrupt: reason}
		}
		return slots{}, &fileFault{truncated: true}
	}
	s := slots{size: len(data) / 2, cur: -1}
	var reasons [2]string
	for i := range 2 {
		slot := data[i*s.size : (i+1)*s.size]
		seq, json, reason := readRecord(slot)
		if reason != "" {
			reasons[i] = reason
			if !allZero(slot) {
				s.used[i] = s.size // whatever is there is cleared by the next record
			}
			continue
		}
		s.used[i] = headerLen + len(json)
		if s.cur >= 0 && seq == s.seq {
			return slots{}, &fileFault{corrupt: fmt.Sprintf("both its records have sequence %d", seq)}
		}
		if s.cur < 0 || seq > s.seq {
			s.cur, s.seq, s.json = i, seq, json
		}
	}
	if s.cur < 0 {
		return slots{}, &fileFault{corrupt: fmt.Sprintf("neither of its two records is whole (the first: %s; the second: %s)", reasons[0], reasons[1])}
	}
	return s, nil
}
