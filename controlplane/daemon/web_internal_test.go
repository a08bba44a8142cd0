package daemon

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"mesh/integration/freeport"
)

// What the metrics endpoint's HTTP server reports itself reaches the node's log as a
// structured warning; it was written bare to standard error, outside the log.
func TestTheMetricsServersOwnErrorsAreLogged(t *testing.T) {
	addr := freeport.Addrs(t, 1)[0]
	var out lockedBuffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	// A handler that answers twice: net/http reports the second answer on its own.
	twice := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusTeapot)
	})
	e, err := startWeb(addr, twice, log)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var line struct{ Level, Msg string }
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if json.Unmarshal([]byte(l), &line) == nil && strings.Contains(line.Msg, "superfluous") {
			if line.Level != "WARN" {
				t.Fatalf("the server's report was logged at %s, want WARN: %s", line.Level, l)
			}
			return
		}
	}
	t.Fatalf("the server's own report is not in the node's log: %q", out.String())
}
