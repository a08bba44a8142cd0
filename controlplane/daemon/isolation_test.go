package daemon

import (
	"testing"
	"time"
)

// TestCutOff: a node is cut off when it routes to fewer brokers than a quorum needs.
func TestCutOff(t *testing.T) {
	for _, c := range []struct {
		voters, routed int
		want           bool
	}{
		{3, 0, true},  // the minority of three
		{3, 1, false}, // two of three
		{1, 0, false}, // one voter: nowhere else to go
		{2, 0, true},  // two voters, each alone
		{5, 1, true},  // two of five
		{5, 2, false}, // three of five
	} {
		if got := cutOff(c.voters, c.routed); got != c.want {
			t.Errorf("cutOff(%d voters, %d routed) = %v, want %v", c.voters, c.routed, got, c.want)
		}
	}
}

// TestIsolation: hosts are shed once the node has heard no leader for the grace
// (isolationGrace when cut off, the stranded grace otherwise), once an episode,
// and admitted again as soon as a leader is heard.
func TestIsolation(t *testing.T) {
	stranded := strandedGrace(500 * time.Millisecond)
	if stranded != 30*time.Second || strandedGrace(10*time.Second) != 150*time.Second {
		t.Fatalf("strandedGrace: %s for 500ms, %s for 10s", stranded, strandedGrace(10*time.Second))
	}
	at := time.Unix(1_800_000_000, 0)
	var w isolation
	look := func(after time.Duration, heard, cut bool) (bool, bool) {
		at = at.Add(after)
		routed := 2 // two of three: a quorum
		if cut {
			routed = 0
		}
		return w.observe(at, heard, 3, routed, stranded)
	}
	if shed, unshed := look(0, true, false); shed || unshed {
		t.Fatal("a leader heard: nothing to do")
	}
	// Cut off: shed after isolationGrace without a leader.
	look(0, false, false)
	if shed, _ := look(isolationGrace-time.Second, false, true); shed {
		t.Fatal("shed before the grace passed")
	}
	if shed, unshed := look(time.Second, true, true); shed || unshed {
		t.Fatal("a leader heard within the grace, yet told to shed or unshed")
	}
	look(time.Second, false, true)
	if shed, _ := look(isolationGrace-time.Second, false, true); shed {
		t.Fatal("the grace did not start again")
	}
	if shed, _ := look(time.Second, false, true); !shed {
		t.Fatal("cut off for the grace, and not shed")
	}
	if shed, _ := look(time.Minute, false, true); shed {
		t.Fatal("shed twice in one episode")
	}
	if _, unshed := look(time.Second, true, false); !unshed {
		t.Fatal("a leader heard again, and hosts not admitted again")
	}
	if _, unshed := look(time.Second, true, false); unshed {
		t.Fatal("told to admit hosts again twice")
	}
	// Not cut off (an election, or the leader alone lost): only after the
	// stranded grace.
	look(0, false, false)
	if shed, _ := look(stranded-time.Second, false, false); shed {
		t.Fatal("a node routed to a quorum shed its hosts before the stranded grace")
	}
	if shed, _ := look(time.Second, false, false); !shed {
		t.Fatal("no leader heard for the stranded grace, and not shed")
	}
}

// TestALoneVoterNeverSheds: a mesh of one control node keeps its hosts however long it
// hears no leader (its own disk full, say): they have no other broker to go to. A node
// that was shed when the others were removed admits its hosts again.
func TestALoneVoterNeverSheds(t *testing.T) {
	stranded := strandedGrace(500 * time.Millisecond)
	at := time.Unix(1_800_000_000, 0)
	var w isolation
	for range 10 {
		at = at.Add(stranded)
		if shed, unshed := w.observe(at, false, 1, 0, stranded); shed || unshed {
			t.Fatalf("one voter, no leader heard: shed %v, unshed %v", shed, unshed)
		}
	}
	at = at.Add(time.Second)
	w.observe(at, false, 3, 0, stranded)
	if shed, _ := w.observe(at.Add(isolationGrace), false, 3, 0, stranded); !shed {
		t.Fatal("cut off among three voters for the grace, and not shed")
	}
	if _, unshed := w.observe(at.Add(isolationGrace+time.Second), false, 1, 0, stranded); !unshed {
		t.Fatal("the only voter left, and its hosts not admitted again")
	}
}
