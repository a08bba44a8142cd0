package daemon

import (
	"strings"
	"testing"
)

// TestNotReadySaysWhy: /readyz names the condition that fails, not "one of the two".
func TestNotReadySaysWhy(t *testing.T) {
	if why := notReady("cp-1", true); why != "" {
		t.Fatalf("a leader and a running broker: %q, want ready", why)
	}
	cases := []struct {
		leader  string
		running bool
		want    []string
		notWant string
	}{
		{"", true, []string{"no Raft leader is known", "meshctl control status"}, "broker"},
		{"cp-1", false, []string{"the broker does not accept clients"}, "Raft"},
		{"", false, []string{"no Raft leader is known", "the broker does not accept clients"}, ""},
	}
	for _, c := range cases {
		why := notReady(c.leader, c.running)
		for _, w := range c.want {
			if !strings.Contains(why, w) {
				t.Errorf("leader %q, broker running %v: %q lacks %q", c.leader, c.running, why, w)
			}
		}
		if c.notWant != "" && strings.Contains(why, c.notWant) {
			t.Errorf("leader %q, broker running %v: %q names %q, which holds", c.leader, c.running, why, c.notWant)
		}
	}
}
