package daemon

import (
	"testing"
	"time"
)

// TestCutOff: only a node that hears no leader and routes to fewer brokers than a
// quorum needs is cut off.
func TestCutOff(t *testing.T) {
	for _, c := range []struct {
		heard          bool
		voters, routed int
		want           bool
	}{
		{false, 3, 0, true},  // the minority of three
		{false, 3, 1, false}, // an election among two of three
		{true, 3, 0, false},  // Raft hears the leader: the routes are the route watch's
		{false, 1, 0, false}, // one voter: nowhere else to go
		{false, 2, 0, true},  // two voters, each alone
		{false, 5, 1, true},  // two of five
		{false, 5, 2, false}, // three of five
	} {
		if got := cutOff(c.heard, c.voters, c.routed); got != c.want {
			t.Errorf("cutOff(leader heard %v, %d voters, %d routed) = %v, want %v", c.heard, c.voters, c.routed, got, c.want)
		}
	}
}

// TestIsolation: hosts are shed once the node has been cut off for the grace, once
// an episode, and admitted again as soon as it is not.
func TestIsolation(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	var w isolation
	look := func(after time.Duration, cut bool) (bool, bool) {
		at = at.Add(after)
		return w.observe(at, cut)
	}
	if shed, unshed := look(0, false); shed || unshed {
		t.Fatal("not cut off: nothing to do")
	}
	look(0, true)
	if shed, _ := look(isolationGrace-time.Second, true); shed {
		t.Fatal("shed before the grace passed")
	}
	if shed, unshed := look(time.Second, false); shed || unshed {
		t.Fatal("back within the grace, yet told to shed or unshed")
	}
	look(time.Second, true)
	if shed, _ := look(isolationGrace-time.Second, true); shed {
		t.Fatal("the grace did not start again")
	}
	if shed, _ := look(time.Second, true); !shed {
		t.Fatal("cut off for the grace, and not shed")
	}
	if shed, _ := look(time.Minute, true); shed {
		t.Fatal("shed twice in one episode")
	}
	if _, unshed := look(time.Second, false); !unshed {
		t.Fatal("no longer cut off, and not told to admit hosts again")
	}
	if _, unshed := look(time.Second, false); unshed {
		t.Fatal("told to admit hosts again twice")
	}
}
