package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestNodeBudgets: a node that sends a message over its subject's size budget, or
// more messages than its rate budget, or holds more connections than its budget, is
// disconnected, on whichever broker holds it; each is counted, the log stays short,
// and the node can connect again afterwards: after a cooldown, during which the
// broker refuses its key (node_cooldown), a second, then twice as long after each
// disconnection that follows (decision 0038).
func TestNodeBudgets(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "budgets")
	serve := cp.Serve()
	t.Cleanup(func() {
		if t.Failed() { // what the control plane made of it
			for _, l := range strings.Split(serve.Output(), "\n") {
				if strings.Contains(l, "dropped") {
					t.Log(l)
				}
			}
		}
	})
	h := harness.NewHost(t, bin, "flood")
	if r := h.Enrol(cp.Token("flood")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	closedBy := func(nc *nats.Conn) bool { return nc.IsClosed() || !nc.IsConnected() }
	status := func(pad int) []byte {
		b, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "flood", Agent: strings.Repeat("x", pad)})
		return b
	}

	// Size: a status report over 8 KiB (well under the broker's 64 KiB cap).
	nc := nodeConn(t, cp.Dir, h.State, cp.Listen, make(chan error, 8))
	if err := nc.Publish("mesh.node.flood.status", status(9<<10)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	harness.Eventually(t, 10*time.Second, "the oversized report's sender disconnected", func() bool { return closedBy(nc) })
	if got := cp.Counter("mesh_control_budget_disconnects_total", "reason=too_large"); got != 1 {
		t.Errorf("disconnects for size: %v, want 1", got)
	}
	// Disconnected for its budget, the key is refused on this broker for a while.
	refusedNow := func(when string) {
		t.Helper()
		if c, err := dialNode(t, h.KeyPair(t), pinOf(t, cp), cp.Listen); err == nil {
			c.Close()
			t.Errorf("%s: the key was admitted again at once", when)
		}
	}
	refusedNow("disconnected for a message over its size")
	time.Sleep(authn.KickCooldown)
	// Over the broker's own cap for hosts (64 KiB), nats-server closes the connection
	// itself (or nats.go, told the cap, refuses to send): the control plane never
	// sees the message.
	nc = nodeConn(t, cp.Dir, h.State, cp.Listen, make(chan error, 8))
	if err := nc.Publish("mesh.node.flood.status", make([]byte, 100<<10)); !errors.Is(err, nats.ErrMaxPayload) {
		nc.Flush()
		harness.Eventually(t, 10*time.Second, "the broker closes a connection over its payload cap", func() bool { return closedBy(nc) })
	} else if got := nc.MaxPayload(); got != 64<<10 {
		t.Errorf("the client was told a payload cap of %d, want the hosts account's 64 KiB", got)
	}
	if got := cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=too_large"); got != 1 {
		t.Errorf("%v reports counted as too large: the control plane saw what the broker should have stopped", got)
	}

	// Rate: far more reports than the budget allows, as fast as it can.
	nc = nodeConn(t, cp.Dir, h.State, cp.Listen, make(chan error, 8))
	for range 400 {
		if err := nc.Publish("mesh.node.flood.status", status(0)); err != nil {
			break
		}
	}
	nc.Flush()
	harness.Eventually(t, 10*time.Second, "the flooding node disconnected", func() bool { return closedBy(nc) })
	if got := cp.Counter("mesh_control_budget_disconnects_total", "reason=rate"); got < 1 {
		t.Errorf("disconnects for rate: %v, want at least 1", got)
	}
	if dropped := cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=rate"); dropped < 1 {
		t.Errorf("no report counted as over the rate budget")
	}
	if lines := strings.Count(serve.Output(), "message dropped"); lines > 10 {
		t.Errorf("%d log lines for a flood: the log is not bounded", lines)
	}

	// Connections: the budget is 4 at once; the fifth is closed.
	time.Sleep(10 * time.Second) // the rate budget refills (20 per second, 200 at once)
	harness.Eventually(t, 10*time.Second, "no host connection left open", func() bool { return cp.Counter("mesh_control_host_connections") == 0 })
	var conns []*nats.Conn
	for range 4 {
		conns = append(conns, nodeConn(t, cp.Dir, h.State, cp.Listen, make(chan error, 8)))
		time.Sleep(100 * time.Millisecond)
	}
	// The fifth is closed as soon as nats-server announces it, which can be before
	// the client has finished connecting.
	if fifth, err := dialNode(t, h.KeyPair(t), pinOf(t, cp), cp.Listen); err == nil {
		harness.Eventually(t, 10*time.Second, "the fifth connection closed", func() bool { return closedBy(fifth) })
	}
	time.Sleep(500 * time.Millisecond)
	for i, c := range conns {
		if closedBy(c) {
			t.Errorf("connection %d of 4 was closed", i+1)
		}
	}
	if got := cp.Counter("mesh_control_budget_disconnects_total", "reason=connections"); got != 1 {
		t.Errorf("disconnects for connections: %v, want 1", got)
	}
	// The broker that admitted the fifth refuses the key for a while: the third
	// disconnection in a row, 4 s. The four connections stay.
	refusedNow("disconnected for a fifth connection")
	if got := cp.Counter("mesh_broker_connections_refused_total", "reason="+authn.ErrNodeCooldown.Code); got != 2 {
		t.Errorf("logins refused in a cooldown: %v, want 2", got)
	}
	for i, c := range conns {
		if closedBy(c) {
			t.Errorf("connection %d of 4 was closed by the cooldown", i+1)
		}
	}
	for _, c := range conns {
		c.Close()
	}

	// Enrolling clients: a flood of requests on one node's enrolment subject is
	// dropped after the budget, cheaply, before anything is decoded.
	fresh := parseToken(t, cp.Token("fresh"))
	kp, _ := nkeys.CreateUser()
	enc := enrollingConn(t, cp, fresh, kp)
	for range 300 {
		enc.Publish("mesh.enrol.fresh", []byte("{}"))
	}
	enc.Flush()
	harness.Eventually(t, 10*time.Second, "the enrolment flood counted", func() bool {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason=rate") >= 100
	})
	// The flood goes on, on the subject every client enrolling the node shares; the
	// machine enrolling it asks on the subject bound to its own key, whose budget
	// the flood cannot spend, and is admitted.
	stop, flooded := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flooded)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				enc.Publish("mesh.enrol.fresh", []byte("{}"))
			}
		}
	}()
	r := harness.NewHost(t, bin, "fresh").Enrol(tokenText(fresh))
	close(stop)
	<-flooded
	if r.Code != 0 {
		t.Fatalf("a flood on the node's shared enrolment subject kept its machine out (exit %d): %s", r.Code, r.Combined())
	}

	// The node is not locked out: its agent connects and converges (refused while
	// the cooldown lasts, it tries again).
	h.Run()
	cp.WaitConverged("flood", 0, 20*time.Second)
}

// TestSlowHookDoesNotStallTheAgent: a hook that hangs (and leaves a child holding its
// output) does not keep the agent from applying and reporting the next
// declarations; the hook is killed, whole, at its timeout, and reported.
func TestSlowHookDoesNotStallTheAgent(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hooks")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	hooksFile := filepath.Join(t.TempDir(), "hooks.json")
	// The hang's command line is this run's own, so that the check below sees no
	// other test process's (a second run of the package beside this one).
	hang := fmt.Sprintf("sleep 300.%06d", rand.IntN(1_000_000))
	writeFile(t, hooksFile, `{"hooks":[{"name":"hang","paths":["slow.conf"],"run":["sh","-c","`+hang+` & `+hang+`"],"timeout":"4s"}]}`)
	h.Run("--hooks", hooksFile)
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(files string) {
		t.Helper()
		writeFile(t, body, `{"files":[`+files+`]}`)
		if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	declare(`{"path":"slow.conf","content":"1"}`)
	cp.WaitConverged("web-1", 1, 20*time.Second)
	harness.Eventually(t, 10*time.Second, "the hook hangs", func() bool { return processRunning(hang) })
	// While the hook hangs, the next declaration applies at once.
	start := time.Now()
	declare(`{"path":"slow.conf","content":"1"},{"path":"other.conf","content":"2"}`)
	cp.WaitConverged("web-1", 2, 20*time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("v2 applied %s after it was declared, while the hook hung", took)
	}
	if got, _ := h.ReadManaged("other.conf"); got != "2" {
		t.Fatalf("other.conf = %q", got)
	}
	harness.Eventually(t, 20*time.Second, "the hook's timeout reported", func() bool {
		n, _ := cp.Node("web-1")
		return n.LastError != nil && n.LastError.Code == "hook_failed" && strings.Contains(n.LastError.Message, "timed out")
	})
	// The hook's process group is gone: no sleep 300 left behind.
	harness.Eventually(t, 10*time.Second, "the hook's children killed", func() bool { return !processRunning(hang) })
}

// processRunning reports whether a process with this command line runs.
func processRunning(cmdline string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") == cmdline {
			stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
			if !strings.Contains(string(stat), ") Z ") {
				return true
			}
		}
	}
	return false
}

func pinOf(t *testing.T, cp *harness.ControlPlane) [32]byte {
	t.Helper()
	cfg, err := datadir.Dir(cp.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	pin, err := cfg.Pin()
	if err != nil {
		t.Fatal(err)
	}
	return pin
}

// TestSyncAnswersArePaidForBySize: a node's own credentials ask, again and again,
// for a declaration of 800 KB. Each answer costs the node's budget a message for
// each 64 KiB it may send, every copy counted (the hosts account's 4 subscriptions
// on each connection the node holds), so after the burst the answers come at the
// rate the budget refills, and the requests beyond it are answered `unavailable`
// (counted, and the node stays connected); a sync once the budget refilled gets the
// declaration. Before, each request of 70 bytes was answered with the whole
// declaration at the node's message rate: 20 a second on every connection it held,
// 178 MB for 200 requests.
func TestSyncAnswersArePaidForBySize(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "syncbytes")
	// No re-sends meanwhile: the nodes never acknowledge, and a re-send is paid
	// from the same budget (TestResendsArePaidForEveryCopy).
	cp.Serve("--reconcile", "10m")
	h := harness.NewHost(t, bin, "big")
	if r := h.Enrol(cp.Token("big")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	many := harness.NewHost(t, bin, "many") // the same, on three connections at once
	if r := many.Enrol(cp.Token("many")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	noise := make([]byte, 300<<10) // two files of 300 KiB in hex, under the 512 KiB a file may hold
	for i := range noise {
		noise[i] = byte(rand.Uint32())
	}
	body := filepath.Join(t.TempDir(), "big.json")
	writeFile(t, body, fmt.Sprintf(`{"files":[{"path":"etc/blob-1","content":"%x"},{"path":"etc/blob-2","content":"%x"}]}`, noise[:150<<10], noise[150<<10:]))
	if r := cp.Ctl("declare", "--node", "big", "--node", "many", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	nc := nodeConn(t, cp.Dir, h.State, cp.Listen, make(chan error, 8))
	var envelopes, largest int
	var mu sync.Mutex
	if _, err := nc.Subscribe(api.DeclarationSubject("big"), func(m *nats.Msg) {
		mu.Lock()
		envelopes, largest = envelopes+1, max(largest, len(m.Data))
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	ask := func() api.SyncResponse {
		t.Helper()
		req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
		m, err := nc.Request(api.SyncSubject("big"), req, 5*time.Second)
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		var resp api.SyncResponse
		if err := json.Unmarshal(m.Data, &resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Ten requests a second, half the node's message rate: never disconnected.
	const n = 40
	start := time.Now()
	answered, refused := 0, 0
	for range n {
		switch r := ask(); {
		case r.Error == nil && r.Sent > 0:
			answered++
		case r.Error != nil && r.Error.Code == api.CodeUnavailable:
			refused++
		default:
			t.Fatalf("sync answered %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start).Seconds()
	budgets := daemon.DefaultBudgets()
	mu.Lock()
	size := largest
	mu.Unlock()
	// Every request costs a message, and each answer 4·size/SyncAnswerBytes more
	// (one connection, whose 4 subscriptions could each get a copy), from a full
	// budget refilled over the run.
	cost := float64(4 * size / budgets.SyncAnswerBytes)
	bound := int((budgets.Burst+budgets.PerSecond*elapsed-n)/cost) + 1
	t.Logf("%d syncs in %.1f s for an envelope of %d bytes (%v messages more for each answer): %d answered, %d unavailable; at most %d paid for",
		n, elapsed, size, cost, answered, refused, bound)
	if size < 700_000 {
		t.Fatalf("the largest envelope was %d bytes; the test needs its declaration of 800 KB", size)
	}
	if bound >= n {
		t.Skipf("the %d syncs took %.1f s: the budget refilled for every answer, and the test tells nothing", n, elapsed)
	}
	if answered > bound || refused == 0 {
		t.Errorf("%d of %d syncs answered with the declaration, %d refused; the budget pays for at most %d", answered, n, refused, bound)
	}
	if !nc.IsConnected() {
		t.Error("a node syncing at half its message rate was disconnected")
	}
	if got := cp.Counter("mesh_control_requests_refused_total", "subject=sync", "reason=rate"); got != float64(refused) {
		t.Errorf("refusals counted: %v, want %d", got, refused)
	}
	time.Sleep(time.Duration((cost + 1) / budgets.PerSecond * float64(time.Second))) // one answer's worth refilled
	if r := ask(); r.Error != nil || r.Sent == 0 {
		t.Errorf("a sync after the budget refilled: %+v", r)
	}

	// On three connections, each answer may reach all three, 4 times each, and
	// costs twelve times as much: 1 + 12·12 messages, one answer from a full
	// budget, where a copy a connection (1 + 3·12) paid for five and one
	// connection's cost (13) for all eight syncs.
	conns := []*nats.Conn{nodeConn(t, cp.Dir, many.State, cp.Listen, make(chan error, 8))}
	for range 2 {
		c := nodeConn(t, cp.Dir, many.State, cp.Listen, make(chan error, 8))
		if _, err := c.SubscribeSync(api.DeclarationSubject("many")); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	harness.Eventually(t, 10*time.Second, "the control plane counts many's three connections", func() bool {
		return cp.Counter("mesh_control_host_connections") >= 4 // big's one, many's three
	})
	answeredMany := 0
	for range 8 {
		req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
		m, err := conns[0].Request(api.SyncSubject("many"), req, 5*time.Second)
		if err != nil {
			t.Fatalf("sync on three connections: %v", err)
		}
		var r api.SyncResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Error == nil && r.Sent > 0 {
			answeredMany++
		}
	}
	if answeredMany > 2 || answeredMany == 0 {
		t.Errorf("a node on three connections had %d of 8 back-to-back syncs answered with the declaration; its budget pays for 1 (2 with a few seconds' refill)", answeredMany)
	}
}

// TestFloodsOfKeysNoLongerTrustedAreCut: an enrolling client flooding the
// enrolment subject bound to its key, and a revoked key flooding its sync, are
// disconnected once over their budget, as an enrolled node is. Before, their
// messages were only dropped, one by one, for as long as their connections lived
// (30 s and 10 s): 6.4 million enrolment requests from a used token delayed every
// other enrolment by seconds and dropped some from the full queue.
func TestFloodsOfKeysNoLongerTrustedAreCut(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "cutfloods")
	cp.Serve()
	closedBy := func(nc *nats.Conn) bool { return nc.IsClosed() || !nc.IsConnected() }
	// flood sends msg until nc closes, and says how long that took.
	flood := func(what string, nc *nats.Conn, subject, reply string, within time.Duration) {
		t.Helper()
		start := time.Now()
		for !closedBy(nc) {
			if time.Since(start) > within {
				t.Fatalf("%s: still connected %v into its flood", what, time.Since(start))
			}
			for range 100 {
				_ = nc.PublishRequest(subject, reply, []byte("{}"))
			}
			_ = nc.Flush()
		}
		t.Logf("%s: disconnected %v into its flood", what, time.Since(start))
	}

	tok := parseToken(t, cp.Token("keyed"))
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	enc := enrollingConn(t, cp, tok, kp)
	// Its connection may live 30 s.
	flood("an enrolling client", enc, api.EnrolKeySubject("keyed", pub), api.EnrolInbox("keyed", pub)+".x", 15*time.Second)

	h := harness.NewHost(t, bin, "gone")
	if r := h.Enrol(cp.Token("gone")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	if r := cp.Ctl("revoke", "gone"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	nc, err := dialNode(t, h.KeyPair(t), pinOf(t, cp), cp.Listen)
	if err != nil {
		t.Fatalf("the revoked key's connection: %v", err)
	}
	defer nc.Close()
	// Its connection may live 10 s.
	flood("a revoked key", nc, api.SyncSubject("gone"), api.NodeInbox("gone")+".x", 7*time.Second)
	if got := cp.Counter("mesh_control_budget_disconnects_total", "reason=rate"); got < 2 {
		t.Errorf("disconnects for rate: %v, want at least 2", got)
	}
}
