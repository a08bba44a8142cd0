package harness

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mesh/broker"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
)

// Impostor is a real nats-server under a CA of its own that accepts any credential: the
// thing a host must refuse before it sends anything.
type Impostor struct {
	Server   *broker.Server
	attempts atomic.Int64
}

// Authenticate accepts every client and counts it.
func (i *Impostor) Authenticate(broker.Client) (broker.Grant, error) {
	i.attempts.Add(1)
	return broker.Grant{User: "victim", Account: broker.AccountControl, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

// CredentialsSeen is how many clients reached its authentication hook.
func (i *Impostor) CredentialsSeen() int64 { return i.attempts.Load() }

// AppBytes is how many application bytes the impostor received from clients.
func (i *Impostor) AppBytes(t testing.TB) int64 {
	_, in, err := i.Server.Traffic()
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// Addr is where it listens.
func (i *Impostor) Addr() string { return i.Server.Addr() }

// StartImpostor starts an impostor broker on addr (ip:port; port 0 picks one).
func StartImpostor(t testing.TB, addr string) *Impostor {
	t.Helper()
	cfg := OtherCATLS(t, addr)
	imp := &Impostor{}
	srv, err := broker.Start(context.Background(), broker.Config{Name: "impostor", Mesh: "impostor", Listen: addr, TLS: cfg, Auth: imp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("impostor: %v", err)
	}
	imp.Server = srv
	t.Cleanup(srv.Shutdown)
	return imp
}

// OtherCATLS is a server TLS configuration under a freshly made CA that is not the
// mesh's.
func OtherCATLS(t testing.TB, addr string) *tls.Config {
	t.Helper()
	ca, _, err := pki.NewCA("impostor", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(addr)
	leaf, err := ca.IssueLeaf("impostor", []net.IP{net.ParseIP(host)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Proxy is a TCP relay between a listen address and a target, with faults on command:
// added latency, a stall (bytes held, nothing forwarded), and cutting or resetting
// every connection. It is transparent: TLS passes through it untouched.
type Proxy struct {
	ln     net.Listener
	target atomic.Value // string
	delay  atomic.Int64 // one-way latency, ns
	stall  atomic.Bool
	refuse atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
	bytes atomic.Int64
	// dropOver, when positive, cuts every connection instead of forwarding the first
	// server-to-client read at least that large (once).
	dropOver atomic.Int64
	dropped  atomic.Int64
}

// CutOnLargeReply arms a one-shot fault: once a connection has carried n bytes from
// the server after its TLS handshake flight, the read that crosses n is not forwarded
// and every connection is cut. During enrolment the server sends, after the handshake,
// INFO and a PONG (together under 1 kB) and then the enrolment reply (CA, keyring,
// declaration: about 1.9 kB encrypted), so n = 1200 loses exactly the reply, after the
// mesh committed the enrolment.
func (p *Proxy) CutOnLargeReply(n int) { p.dropOver.Store(int64(n)) }

// Dropped reports how many times CutOnLargeReply fired.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// StartProxy listens on listen (ip:port, port 0 picks one) and relays to target.
func StartProxy(t testing.TB, listen, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(target)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's listen address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes where new connections go.
func (p *Proxy) SetTarget(target string) { p.target.Store(target) }

// SetLatency adds d in each direction (a round trip costs 2d).
func (p *Proxy) SetLatency(d time.Duration) { p.delay.Store(int64(d)) }

// Stall holds every byte until Unstall: connections stay open, nothing moves.
func (p *Proxy) Stall()   { p.stall.Store(true) }
func (p *Proxy) Unstall() { p.stall.Store(false) }

// Partition cuts every connection and refuses new ones until Heal.
func (p *Proxy) Partition() {
	p.refuse.Store(true)
	p.CutAll()
}

// Heal lets connections through again.
func (p *Proxy) Heal() { p.refuse.Store(false) }

// CutAll closes every relayed connection (a clean FIN both ways).
func (p *Proxy) CutAll() { p.closeAll(false) }

// ResetAll resets every relayed connection (RST).
func (p *Proxy) ResetAll() { p.closeAll(true) }

// Bytes is how many bytes went through, both directions.
func (p *Proxy) Bytes() int64 { return p.bytes.Load() }

func (p *Proxy) closeAll(reset bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok && reset {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		delete(p.conns, c)
	}
}

// Close stops the proxy and every connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.closeAll(false)
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.refuse.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", p.target.Load().(string), 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.track(c)
		p.track(up)
		go p.pipe(c, up, true)
		go p.pipe(up, c, false)
	}
}

func (p *Proxy) pipe(dst, src net.Conn, fromServer bool) {
	buf := make([]byte, 32<<10)
	reads, after := 0, int64(0)
	for {
		n, err := src.Read(buf)
		reads++
		// The first read from the server is its TLS handshake flight (certificates
		// included); the fault counts what comes after it.
		if fromServer && reads > 1 {
			after += int64(n)
		}
		if limit := p.dropOver.Load(); fromServer && reads > 1 && limit > 0 && after >= limit && p.dropOver.CompareAndSwap(limit, 0) {
			p.dropped.Add(1)
			p.CutAll()
			break
		}
		if n > 0 {
			for p.stall.Load() {
				time.Sleep(10 * time.Millisecond)
			}
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
			p.bytes.Add(int64(n))
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

// TLSRelay ends a client's TLS session with a certificate and relays the plaintext to
// the real broker over a TLS session of its own: a man in the middle. It records what
// clients sent it and what the broker answered.
type TLSRelay struct {
	ln   net.Listener
	mu   sync.Mutex
	sent []byte
	got  []byte
}

// StartTLSRelay listens on listen with a certificate from some CA, just not the
// mesh's, and relays to the broker at target.
func StartTLSRelay(t testing.TB, listen, target string) *TLSRelay {
	t.Helper()
	return startRelay(t, listen, OtherCATLS(t, listen), target)
}

// StartLeafRelay stands for a control node that was removed but kept its leaf of the
// mesh CA: it listens on a free loopback port with cp's own TLS identity, which passes
// a client's pin check, and relays to cp's broker, the broker's nonce included.
func StartLeafRelay(t testing.TB, cp *ControlPlane) *TLSRelay {
	t.Helper()
	return startRelay(t, "127.0.0.1:0", meshServerTLS(t, cp), cp.Listen)
}

func startRelay(t testing.TB, listen string, cfg *tls.Config, target string) *TLSRelay {
	ln, err := tls.Listen("tcp", listen, cfg)
	if err != nil {
		t.Fatalf("relay listen: %v", err)
	}
	r := &TLSRelay{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.relay(c, target)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return r
}

// meshIdentity is cp's own TLS identity: its leaf of the mesh CA, and the CA.
func meshIdentity(t testing.TB, cp *ControlPlane) (pki.Leaf, []byte) {
	t.Helper()
	dir := datadir.Dir(cp.Dir)
	leaf, err := dir.LoadLeaf()
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := dir.ReadFile(datadir.CACertFile)
	if err != nil {
		t.Fatal(err)
	}
	return leaf, caPEM
}

// meshServerTLS is the server configuration of cp's own TLS identity.
func meshServerTLS(t testing.TB, cp *ControlPlane) *tls.Config {
	t.Helper()
	cfg, err := pki.ServerConfig(meshIdentity(t, cp))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Addr is where it listens.
func (r *TLSRelay) Addr() string { return r.ln.Addr().String() }

// PlaintextBytes is how many decrypted application bytes it read from clients.
func (r *TLSRelay) PlaintextBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.sent))
}

// Sent is every plaintext byte clients sent it, in arrival order.
func (r *TLSRelay) Sent() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sent)
}

// Answered is every plaintext byte the broker sent back through it.
func (r *TLSRelay) Answered() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

type recorder struct {
	mu  *sync.Mutex
	buf *[]byte
}

func (w recorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	*w.buf = append(*w.buf, p...)
	w.mu.Unlock()
	return len(p), nil
}

func (r *TLSRelay) relay(c net.Conn, target string) {
	defer c.Close()
	if err := c.(*tls.Conn).Handshake(); err != nil {
		return
	}
	up, err := tls.Dial("tcp", target, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // an attacker does not verify
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, io.TeeReader(c, recorder{&r.mu, &r.sent}))
		up.Close()
	}()
	_, _ = io.Copy(c, io.TeeReader(up, recorder{&r.mu, &r.got}))
}
