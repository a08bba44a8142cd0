package daemon

import (
	"testing"
	"time"
)

// TestRouteWatch: a missing route is told once routeGrace has passed, once an
// episode, and its return after that (not an episode ended by no longer needing
// one); a route that is not needed (no leader
// elsewhere, or one Raft has not heard from) or comes back in time is never told.
func TestRouteWatch(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	var w routeWatch
	look := func(after time.Duration, needed, up bool) (bool, bool) {
		at = at.Add(after)
		return w.observe(at, needed, up)
	}
	if warn, rec := look(0, false, false); warn || rec {
		t.Fatal("no route needed: nothing to tell")
	}
	if warn, _ := look(time.Hour, false, false); warn {
		t.Fatal("a route not needed for an hour is not missing")
	}
	// Missing, then back within the grace: nothing told.
	look(0, true, false)
	if warn, rec := look(routeGrace-time.Second, true, false); warn || rec {
		t.Fatal("told before the grace passed")
	}
	if warn, rec := look(time.Second, true, true); warn || rec {
		t.Fatal("a route back within the grace is told")
	}
	// Missing for the whole grace: told once.
	look(time.Second, true, false)
	if warn, _ := look(routeGrace-time.Second, true, false); warn {
		t.Fatal("the grace restarted when the route came back; told too early")
	}
	if warn, _ := look(time.Second, true, false); !warn {
		t.Fatal("a route missing for the grace is not told")
	}
	if warn, _ := look(time.Minute, true, false); warn {
		t.Fatal("told twice in one episode")
	}
	if _, rec := look(time.Second, true, true); !rec {
		t.Fatal("the route's return after a warning is not told")
	}
	if _, rec := look(time.Second, true, true); rec {
		t.Fatal("the return is told twice")
	}
	// A new episode is told again. One that ends because no route is needed any
	// more (this node leads) ends without a word, and the next is told anew.
	look(0, true, false)
	if warn, _ := look(routeGrace, true, false); !warn {
		t.Fatal("a second episode is not told")
	}
	if warn, rec := look(time.Second, false, false); warn || rec {
		t.Fatal("an episode ended by no longer needing a route is told as a route back")
	}
	look(time.Second, true, false)
	if warn, _ := look(routeGrace, true, false); !warn {
		t.Fatal("the episode after one that ended unneeded is not told")
	}
}
