package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// stallingConn stops reading while stall is set: a client that leaves what the broker
// sends it in the broker's buffers.
type stallingConn struct {
	net.Conn
	stall *atomic.Bool
}

func (c stallingConn) Read(b []byte) (int, error) {
	for c.stall.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	return c.Conn.Read(b)
}

type stallingDialer struct{ stall *atomic.Bool }

func (d stallingDialer) Dial(network, addr string) (net.Conn, error) {
	c, err := net.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return stallingConn{c, d.stall}, nil
}

// stalledHostBound is what docs/security.md (Budgets) says one host can make a broker
// hold for connections that do not read: what its budget pays to have sent to it
// within nats-server's 10 s write deadline, 25 MiB, and a little more for the answers
// too large to be paid in full.
const stalledHostBound = 32 << 20

// TestAStalledHostHoldsLittleOfItsBroker: a host with the largest declaration holds
// its 4 connections with 4 subscriptions each on its declaration subject, reads
// nothing, and asks for its declaration 15 times a second (within its message rate)
// from one of them. The broker keeps what it cannot write for up to its 10 s write
// deadline; what it is sent is paid from its budget for every copy, so serve's heap
// grows by less than the bound security.md states. Before, charged a copy a
// connection while each subscription got one (16 a connection then), the heap grew
// by 130 MiB in 2 s and stayed near 190 MiB.
func TestAStalledHostHoldsLittleOfItsBroker(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "stalled")
	serve := cp.Serve()
	h := harness.NewHost(t, bin, "evil")
	if r := h.Enrol(cp.Token("evil")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// Three files of random bytes in hex: an envelope of just under the 1 MiB cap.
	var files []string
	for i := range 3 {
		noise := make([]byte, 126<<10)
		for j := range noise {
			noise[j] = byte(rand.Uint32())
		}
		files = append(files, fmt.Sprintf(`{"path":"etc/blob-%d","content":"%x"}`, i, noise))
	}
	body := filepath.Join(t.TempDir(), "big.json")
	writeFile(t, body, `{"files":[`+strings.Join(files, ",")+`]}`)
	if r := cp.Ctl("declare", "--node", "evil", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	kp, pin := h.KeyPair(t), pinOf(t, cp)
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	var stall atomic.Bool
	var conns []*nats.Conn
	for range 4 {
		nc, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
			nats.Nkey(pub, kp.Sign), nats.NoReconnect(), nats.SetCustomDialer(stallingDialer{&stall}),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		for range 4 {
			if _, err := nc.Subscribe(api.DeclarationSubject("evil"), func(*nats.Msg) {}); err != nil {
				t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
	}
	harness.Eventually(t, 10*time.Second, "the control plane counts the host's 4 connections", func() bool {
		return cp.Counter("mesh_control_host_connections") >= 4
	})
	t.Cleanup(func() { stall.Store(false) })
	heap := func() float64 { return harness.Sum(cp.Scrape(), "go_memstats_heap_inuse_bytes") }
	stall.Store(true)
	base := heap()
	peak := base

	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion, KeyringEpoch: 1})
	start := time.Now()
	syncs := 0
	for time.Since(start) < 12*time.Second {
		// Its own inbox, which it does not read either.
		if err := conns[0].PublishRequest(api.SyncSubject("evil"), api.NodeInbox("evil")+".unread", req); err != nil {
			t.Fatalf("sync %d: %v", syncs+1, err)
		}
		syncs++
		peak = max(peak, heap())
		time.Sleep(time.Until(start.Add(time.Duration(syncs) * time.Second / 15)))
	}
	refused := cp.Counter("mesh_control_requests_refused_total", "subject=sync", "reason=rate")
	slow := strings.Count(serve.Output(), "Slow Consumer Detected")
	t.Logf("%d syncs in 12 s, %.0f refused; serve's heap %.1f MiB, at most %.1f MiB (+%.1f, the bound %d MiB); stalled connections closed: %d",
		syncs, refused, base/(1<<20), peak/(1<<20), (peak-base)/(1<<20), stalledHostBound>>20, slow)
	if slow == 0 {
		t.Fatal("the broker closed no stalled connection at its write deadline: it held nothing for them, and the test tells nothing")
	}
	if peak-base > stalledHostBound {
		t.Errorf("a host that reads nothing grew serve's heap by %.1f MiB, more than the %d MiB its budget bounds it to", (peak-base)/(1<<20), stalledHostBound>>20)
	}
}
