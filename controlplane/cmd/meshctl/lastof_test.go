package main

import (
	"slices"
	"strings"
	"testing"
)

// TestControlRemoveDialsTheRemovedBrokerLast: the answer to control remove comes back
// only through the broker the request went in by, and the removed node's stops with
// the removal: sent through it (its broker first in --servers or MESH_SERVERS), the
// removal was done and the command ended exit 3, "look" (a docs walkthrough). Its
// broker goes last, however the address is written; a list without it, or with it
// alone, is dialled as given.
func TestControlRemoveDialsTheRemovedBrokerLast(t *testing.T) {
	for _, c := range []struct {
		servers    []string
		last, want string
	}{
		{[]string{"10.0.0.3:7300", "10.0.0.1:7300", "10.0.0.2:7300"}, "10.0.0.3:7300", "10.0.0.1:7300 10.0.0.2:7300 10.0.0.3:7300"},
		{[]string{"[::1]:7300", "[::2]:7300"}, "[0:0::1]:7300", "[::2]:7300 [::1]:7300"},
		{[]string{"10.0.0.1:7300", "10.0.0.2:7300"}, "10.0.0.3:7300", "10.0.0.1:7300 10.0.0.2:7300"},
		{[]string{"10.0.0.3:7300"}, "10.0.0.3:7300", "10.0.0.3:7300"},
		{[]string{"cp3.example:7300", "10.0.0.1:7300"}, "", "cp3.example:7300 10.0.0.1:7300"},
		{[]string{"10.0.0.3:7301", "10.0.0.3:7300", "10.0.0.1:7300"}, "10.0.0.3:7300", "10.0.0.3:7301 10.0.0.1:7300 10.0.0.3:7300"},
	} {
		got := lastOf(slices.Clone(c.servers), c.last)
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("servers %v, last %q: %s, want %s", c.servers, c.last, s, c.want)
		}
	}
}
