package presence

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A closed connection stays closed for tombstoneFor, so a listing that started before
// it closed cannot bring it back; after that it is forgotten.
func TestClosedConnectionIsRememberedForAWhile(t *testing.T) {
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := Conn{Server: "S1", CID: 7}
	if n, added := tr.add("U1", c, "", t0); !added || n != 1 {
		t.Fatalf("add = %d, %v; want 1, true", n, added)
	}
	if _, n, removed := tr.remove(c, t0.Add(time.Second)); !removed || n != 0 {
		t.Fatalf("remove = %d, %v; want 0, true", n, removed)
	}
	if _, added := tr.add("U1", c, "", t0.Add(time.Minute)); added {
		t.Fatal("a late listing brought a closed connection back")
	}
	// Another close, long after, expires the first tombstone.
	tr.remove(Conn{Server: "S1", CID: 8}, t0.Add(time.Second+tombstoneFor+time.Millisecond))
	if tr.gone.has(c) {
		t.Fatal("a tombstone older than tombstoneFor is still kept")
	}
	if _, added := tr.add("U1", c, "", t0.Add(3*tombstoneFor)); !added {
		t.Fatal("a connection id forgotten after tombstoneFor is refused")
	}
}

// A connection closed again later keeps its later tombstone when the earlier one's
// turn to expire comes.
func TestTombstoneClosedTwiceKeepsTheLaterTime(t *testing.T) {
	var g tombstones
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c := Conn{Server: "S1", CID: 1}
	g.add(c, t0, "")
	g.add(c, t0.Add(tombstoneFor/2), "")
	g.add(Conn{Server: "S1", CID: 2}, t0.Add(tombstoneFor+time.Second), "")
	if !g.has(c) {
		t.Fatal("the first close's expiry removed the second close's tombstone")
	}
	g.add(Conn{Server: "S1", CID: 3}, t0.Add(tombstoneFor/2+tombstoneFor+time.Second), "")
	if g.has(c) {
		t.Fatal("the second close's tombstone did not expire")
	}
}

// The queue holds no more than the tombstones still young, plus what compaction has
// not reclaimed yet: a steady stream of closes does not grow it.
func TestTombstonesStayBounded(t *testing.T) {
	var g tombstones
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const perSecond = 100
	for i := range 20 * 60 * perSecond { // 20 minutes of closes
		g.add(Conn{Server: "S1", CID: uint64(i)}, t0.Add(time.Duration(i)*time.Second/perSecond), "")
	}
	young := int(tombstoneFor/time.Second)*perSecond + 1
	if len(g.at) != young {
		t.Errorf("%d tombstones kept, want the %d of the last %s", len(g.at), young, tombstoneFor)
	}
	if live := len(g.order) - g.head; live != young {
		t.Errorf("the queue holds %d live entries, want %d", live, young)
	}
	if cap(g.order) > 4*young {
		t.Errorf("the queue's array has room for %d entries, for %d young tombstones", cap(g.order), young)
	}
}

// BenchmarkRemoveInAStorm closes connections as a fleet's enrolment does: 20,000 in
// half a minute, every tombstone still young. The baseline is the map write alone.
func BenchmarkRemoveInAStorm(b *testing.B) {
	for _, kept := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("tracker/%d-young", kept), func(b *testing.B) {
			tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{}}
			t0 := time.Now()
			for i := range kept {
				tr.remove(Conn{Server: "S1", CID: uint64(i)}, t0)
			}
			b.ResetTimer()
			for i := range b.N {
				c := Conn{Server: "S1", CID: uint64(kept + i)}
				tr.add("U", c, "", t0)
				tr.remove(c, t0)
			}
		})
		b.Run(fmt.Sprintf("baseline-map/%d-young", kept), func(b *testing.B) {
			m := map[Conn]time.Time{}
			t0 := time.Now()
			for i := range kept {
				m[Conn{Server: "S1", CID: uint64(i)}] = t0
			}
			b.ResetTimer()
			for i := range b.N {
				m[Conn{Server: "S1", CID: uint64(kept + i)}] = t0
			}
		})
	}
}

// A broker gone from the mesh takes its connections with it, and only its own; none
// is remembered as closed, so a broker that was only cut off brings them back with
// its next listing.
func TestForgetServer(t *testing.T) {
	var changes []string
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{},
		cfg: Config{OnChange: func(user string, c Conn, _ time.Time, opened bool, open int) {
			changes = append(changes, fmt.Sprintf("%s %s/%d opened=%t open=%d", user, c.Server, c.CID, opened, open))
		}}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	gone, kept := Conn{Server: "S1", CID: 1}, Conn{Server: "S2", CID: 1}
	tr.add("U1", gone, "", t0)
	tr.add("U1", kept, "", t0)
	tr.add("U2", Conn{Server: "S1", CID: 2}, "", t0)
	tr.kicking[gone] = true
	if n := tr.forgetServer("S1"); n != 2 {
		t.Fatalf("forgetServer dropped %d connections, want 2", n)
	}
	if tr.Count() != 1 || tr.Open("U1") != 1 || tr.Open("U2") != 0 || len(tr.Users()) != 1 || tr.kicking[gone] {
		t.Fatalf("after forgetting S1: %d connections, U1 %d, U2 %d, users %v, kicking %v",
			tr.Count(), tr.Open("U1"), tr.Open("U2"), tr.Users(), tr.kicking)
	}
	if len(changes) != 2 {
		t.Fatalf("OnChange calls %q, want one per connection dropped", changes)
	}
	for _, c := range changes {
		if !strings.Contains(c, "opened=false") || !strings.Contains(c, " S1/") {
			t.Fatalf("OnChange calls %q, want S1's connections closed", changes)
		}
	}
	if _, added := tr.add("U1", gone, "", t0.Add(time.Second)); !added {
		t.Fatal("a forgotten broker's connection, listed again, is refused")
	}
	if n := tr.forgetServer("S3"); n != 0 || tr.Count() != 2 {
		t.Fatalf("forgetting an unknown broker dropped %d, left %d", n, tr.Count())
	}
}

// TestStranded: the brokers whose connections are counted though they are not
// reachable, which the daemon lists at once; none without Config.Reachable.
func TestStranded(t *testing.T) {
	reachable := map[string]bool{"S1": true}
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{},
		cfg: Config{Reachable: func(s string) bool { return reachable[s] }}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if s := tr.Stranded(); len(s) != 0 {
		t.Fatalf("no connections: stranded %v", s)
	}
	tr.add("U1", Conn{Server: "S1", CID: 1}, "", t0)
	tr.add("U2", Conn{Server: "S2", CID: 1}, "", t0)
	tr.add("U3", Conn{Server: "S2", CID: 2}, "", t0)
	if s := tr.Stranded(); !slices.Equal(s, []string{"S2"}) {
		t.Fatalf("stranded %v, want [S2]", s)
	}
	reachable["S2"] = true
	if s := tr.Stranded(); len(s) != 0 {
		t.Fatalf("S2 reachable again: stranded %v", s)
	}
	reachable["S1"], reachable["S2"] = false, false
	tr.forgetServer("S2")
	if s := tr.Stranded(); !slices.Equal(s, []string{"S1"}) {
		t.Fatalf("S2 forgotten, S1 gone: stranded %v, want [S1]", s)
	}
	tr.cfg.Reachable = nil
	if s := tr.Stranded(); s != nil {
		t.Fatalf("without Reachable: stranded %v", s)
	}
}
