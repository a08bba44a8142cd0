package daemon

import (
	"log/slog"
	"strings"
	"testing"

	"mesh/broker"
)

// TestAMaxHostsAboveTheOpenFileLimitIsSaid: --max-hosts above what the open-file
// limit allows was ignored without a word (a review): the lower cap applies, and
// the log says so at warning level, with what was asked; one within it is logged
// as the capacity, as before.
func TestAMaxHostsAboveTheOpenFileLimitIsSaid(t *testing.T) {
	for _, c := range []struct {
		asked int
		warns bool
	}{{999999, true}, {50, false}, {0, false}} {
		var log lockedBuffer
		d := &Daemon{opts: Options{MaxHosts: c.asked}, log: slog.New(slog.NewTextHandler(&log, nil))}
		capped := 100 // what 200 open files allow
		if c.asked > 0 && c.asked < capped {
			capped = c.asked
		}
		d.logCapacity(broker.Capacity{MaxHosts: capped, MaxConnections: 120, OpenFiles: 200})
		out := log.String()
		if warned := strings.Contains(out, "level=WARN") && strings.Contains(out, "max_hosts_asked=999999"); warned != c.warns {
			t.Errorf("--max-hosts %d: warned %t, want %t:\n%s", c.asked, warned, c.warns, out)
		}
	}
}
