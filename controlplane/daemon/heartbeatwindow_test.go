package daemon

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
)

// TestAnAgentsReportIntervalSetsWhenItCountsOffline: an agent run with --heartbeat
// 1m (allowed: 1s to 10m) was shown offline for most of each minute under serve's
// default --offline-after of 45 s, though connected and reporting. The leader counts
// a node offline after three of the intervals its agent says it has, or after
// --offline-after if longer; an interval said above api.MaxHeartbeat counts as that;
// a node that says none keeps --offline-after. The interval is kept in the
// replicated record, so a control node that leads after a restart knows it before
// the node reports again.
func TestAnAgentsReportIntervalSetsWhenItCountsOffline(t *testing.T) {
	dir := bootstrapped(t, "heartbeatwindow")
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	opts := Options{Dir: dir, Now: now, ReadyTimeout: 20 * time.Second, OfflineAfter: 45 * time.Second}
	d, stop := runDaemon(t, opts)
	report := func(node string, every uint32) {
		t.Helper()
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: node, HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1, HeartbeatSeconds: every})
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(node), Data: data})
		d.status.flush()
	}
	nodes := map[string]uint32{"slow": 60, "usual": 0, "liar": 1 << 31}
	keys, pairs := map[string]string{}, map[string]nkeys.KeyPair{}
	for node, every := range nodes {
		pairs[node] = enrolledKey(t, d, node)
		dialAs(t, d, node, pairs[node])
		keys[node] = d.fsmNode(t, node).PublicKey
		waitFor(t, 10*time.Second, node+"'s connection counted", func() bool { return d.presence.Open(keys[node]) == 1 })
		report(node, every)
	}
	if got := d.fsmNode(t, "liar").Applied.HeartbeatSeconds; got != uint32(api.MaxHeartbeat/time.Second) {
		t.Fatalf("an interval of 2^31 s is recorded as %d s, want the cap %d", got, api.MaxHeartbeat/time.Second)
	}
	check := func(when string, silent time.Duration, want map[string]bool) {
		t.Helper()
		for node, alive := range want {
			if got := d.alive(d.fsmNode(t, node), now().Add(silent)); got != alive {
				t.Errorf("%s, %s silent for %s: alive %v, want %v", when, node, silent, got, alive)
			}
		}
	}
	// A report that changes only the interval is held back as one that changes
	// only text (textEvery): a host changing it at every report committed a log
	// entry at every flush.
	data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "slow", HaveApplied: true, AppliedVersion: 1, KeyringEpoch: 1, HeartbeatSeconds: 61})
	if err != nil {
		t.Fatal(err)
	}
	d.handleStatus(&nats.Msg{Subject: api.StatusSubject("slow"), Data: data})
	d.status.mu.Lock()
	p, pending := d.status.pending["slow"]
	d.status.mu.Unlock()
	if !pending || p.kind != reportText {
		t.Errorf("a report changing only the interval: pending %v, held back as text %v; want both", pending, p.kind == reportText)
	}
	d.status.mu.Lock()
	delete(d.status.pending, "slow")
	d.status.mu.Unlock()
	check("reporting", 50*time.Second, map[string]bool{"slow": true, "usual": false, "liar": true})
	check("reporting", 179*time.Second, map[string]bool{"slow": true, "liar": true})
	check("reporting", 181*time.Second, map[string]bool{"slow": false, "liar": true})
	check("reporting", 31*time.Minute, map[string]bool{"liar": false})

	// Restarted, the control node has heard from no one: it counts from when it
	// took the lead, with the interval it finds in the state.
	stop()
	d, _ = runDaemon(t, opts)
	for node := range nodes {
		dialAs(t, d, node, pairs[node])
		waitFor(t, 10*time.Second, node+"'s connection counted again", func() bool { return d.presence.Open(keys[node]) >= 1 })
	}
	check("after a restart", 100*time.Second, map[string]bool{"slow": true, "usual": false})
}
