package presence

import (
	"testing"
	"time"
)

// TestSharedSinceIsWhenTheSecondConnectionCame: a key held by more than one
// connection is shared since the second of those open now was first seen; one
// replaced meanwhile starts the count again, and one connection, or none, is not
// shared. Holders lists the connections, the oldest first, with the address their
// broker gave, and forgets a closed one's.
func TestSharedSinceIsWhenTheSecondConnectionCame(t *testing.T) {
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{}}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	a, b, c := Conn{Server: "S1", CID: 1}, Conn{Server: "S2", CID: 9}, Conn{Server: "S1", CID: 2}
	shared := func(what string, want time.Time) {
		t.Helper()
		got, ok := tr.SharedSince("U1")
		if want.IsZero() {
			if ok {
				t.Fatalf("%s: shared since %s, want not shared", what, got)
			}
			return
		}
		if !ok || !got.Equal(want) {
			t.Fatalf("%s: shared since %s (%v), want %s", what, got, ok, want)
		}
	}
	shared("no connection", time.Time{})
	tr.add("U1", a, "192.0.2.1", t0)
	tr.add("U2", Conn{Server: "S1", CID: 3}, "192.0.2.3", t0) // another key's
	shared("one connection", time.Time{})
	tr.add("U1", b, "192.0.2.2", t0.Add(5*time.Second))
	shared("a second connection", t0.Add(5*time.Second))
	tr.add("U1", c, "", t0.Add(10*time.Second))
	shared("a third", t0.Add(5*time.Second))
	tr.add("U1", b, "192.0.2.99", t0.Add(time.Minute)) // a listing of one known: its address stays
	hs := tr.Holders("U1")
	if len(hs) != 3 || hs[0].Conn != a || hs[0].Addr != "192.0.2.1" || !hs[0].Since.Equal(t0) ||
		hs[1].Conn != b || hs[1].Addr != "192.0.2.2" || hs[2].Conn != c || hs[2].Addr != "" {
		t.Fatalf("holders = %+v, want a, b and c oldest first with their addresses", hs)
	}
	tr.add("U1", c, "192.0.2.4", t0.Add(time.Minute)) // a listing says what the event did not
	if hs := tr.Holders("U1"); hs[2].Addr != "192.0.2.4" || !hs[2].Since.Equal(t0.Add(10*time.Second)) {
		t.Fatalf("after a listing: %+v", hs[2])
	}
	tr.remove(a, t0.Add(20*time.Second))
	shared("the oldest closed", t0.Add(10*time.Second))
	tr.remove(b, t0.Add(30*time.Second))
	shared("one left", time.Time{})
	if _, known := tr.addrs[b]; known {
		t.Fatal("a closed connection's address is kept")
	}
	if hs := tr.Holders("U1"); len(hs) != 1 || hs[0].Conn != c {
		t.Fatalf("holders = %+v, want c alone", hs)
	}
	// In whatever order the map yields them, the second oldest of many.
	for i := range 8 {
		tr.add("U3", Conn{Server: "S3", CID: uint64(i)}, "", t0.Add(time.Duration(8-i)*time.Second))
	}
	for range 100 {
		if got, ok := tr.SharedSince("U3"); !ok || !got.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("eight connections: shared since %s, want the second oldest's %s", got, t0.Add(2*time.Second))
		}
	}
}
