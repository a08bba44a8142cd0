package replication

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"mesh/controlplane/pki"
	"mesh/host/busyaddr"
	"mesh/logging"
)

// tlsStream is a raft.StreamLayer over mutual TLS. Both ends present a CA-signed leaf
// and verify the other's; a host holds no such certificate, so a host's credentials
// are refused here by construction. When allowed is set, a leaf of the CA is not
// enough: its pin must be a current control node's, since Raft believes whatever
// leader and term an RPC claims.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	cfg       *tls.Config
	allowed   func(pin string) bool // Config.PeerAllowed; nil allows every leaf
	members   func() []byte         // Config.Members; nil answers no members question
	log       *slog.Logger
	repeats   *logging.Limiter
	handshake time.Duration

	conns     chan net.Conn
	gate      *handshakeGate
	closeOnce sync.Once
	done      chan struct{}

	mu    sync.Mutex
	peers map[*peerConn]struct{} // open connections, accepted and dialled, when allowed is set

	// notMembers counts the connections, accepted or dialled, closed because the
	// peer's pin is not allowed; failedHandshakes, those accepted that did not
	// complete a handshake with a leaf of the mesh CA.
	notMembers, failedHandshakes atomic.Uint64
}

// errNotMember is why a peer with a leaf of the mesh CA is refused.
var errNotMember = errors.New("its certificate is not a current control node's")

func newTLSStream(bind string, advertise net.Addr, cfg *tls.Config, allowed func(pin string) bool, members func() []byte, log *slog.Logger, repeats *logging.Limiter, handshake time.Duration) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, busyaddr.Listened(bind, err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	s := &tlsStream{ln: ln, advertise: advertise, cfg: cfg, allowed: allowed, members: members, log: log, repeats: repeats, handshake: handshake,
		conns: make(chan net.Conn), gate: newHandshakeGate(), done: make(chan struct{}), peers: map[*peerConn]struct{}{}}
	go s.acceptLoop()
	return s, nil
}

// errBusySource is why a connection is closed before its handshake: its address has
// maxHandshakesPerSource in progress.
var errBusySource = errors.New("its address has too many handshakes in progress")

// acceptLoop handshakes each incoming connection on its own goroutine, under a
// deadline and within the gate's bounds, and hands over only the connections that
// completed it.
func (s *tlsStream) acceptLoop() {
	for {
		raw, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		in, displaced := s.gate.enter(raw)
		if displaced != nil {
			// Its handshake fails, and is counted and logged as such.
			_ = displaced.Close()
		}
		if in == nil {
			s.failedHandshakes.Add(1)
			s.refused(raw.RemoteAddr(), errBusySource)
			_ = raw.Close()
			continue
		}
		go s.accept(raw, in)
	}
}

// accept hands raw over once it completed the handshake with a peer allowed.
func (s *tlsStream) accept(raw net.Conn, in *gated) {
	c := tls.Server(raw, s.cfg)
	_ = c.SetDeadline(time.Now().Add(s.handshake))
	err := c.Handshake()
	s.gate.leave(in)
	if err != nil {
		s.failedHandshakes.Add(1)
		s.refused(raw.RemoteAddr(), err)
		_ = raw.Close()
		return
	}
	pc, err := s.admit(raw, c, true)
	if err != nil {
		s.refused(raw.RemoteAddr(), err)
		_ = raw.Close()
		return
	}
	// A member's address from now on: its handshakes are not pushed out by
	// strangers'.
	if tcp, ok := raw.RemoteAddr().(*net.TCPAddr); ok {
		s.gate.learnPeer(tcp.AddrPort().Addr())
	}
	_ = c.SetDeadline(time.Time{})
	select {
	case s.conns <- pc:
	case <-s.done:
		_ = pc.Close()
	}
}

// refused logs a connection that failed the handshake or whose peer is not allowed;
// a peer that keeps trying (or a scanner) is logged once an interval, with a count.
func (s *tlsStream) refused(remote net.Addr, err error) {
	const msg = "refused a connection on the Raft port"
	s.repeats.Log(context.Background(), s.log, slog.LevelWarn, "raft", msg, msg,
		slog.String("remote", remote.String()), slog.String("reason", err.Error()))
}

// admit checks the peer of c, a connection over raw that completed its handshake,
// and returns the connection to hand to Raft. It tracks the connection before it
// asks whether the peer is allowed: a DropPeersNotAllowed that starts once the
// allowed set shrank then either finds the connection, or follows the tracking, in
// which case the question is asked of the shrunk set. The other way round, a
// connection checked before the change and tracked after the drop would stay.
func (s *tlsStream) admit(raw net.Conn, c *tls.Conn, accepted bool) (net.Conn, error) {
	if s.allowed == nil && s.members == nil {
		return c, nil
	}
	certs := c.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		s.failedHandshakes.Add(1)
		return nil, errors.New("it presented no certificate")
	}
	pin := pki.PinOf(certs[0])
	pc := &peerConn{Conn: c, raw: raw, pin: hex.EncodeToString(pin[:]), stream: s, mayAsk: accepted && s.members != nil}
	if s.allowed == nil {
		return pc, nil
	}
	s.track(pc)
	if !s.allowed(pc.pin) {
		s.untrack(pc)
		s.notMembers.Add(1)
		return nil, errNotMember
	}
	return pc, nil
}

func (s *tlsStream) track(c *peerConn) {
	s.mu.Lock()
	s.peers[c] = struct{}{}
	s.mu.Unlock()
}

func (s *tlsStream) untrack(c *peerConn) {
	s.mu.Lock()
	delete(s.peers, c)
	s.mu.Unlock()
}

// dropNotAllowed closes the open connections whose peer is no longer allowed and
// returns how many it closed. allowed is asked outside the lock (it may block, and
// may be slow), once per pin.
func (s *tlsStream) dropNotAllowed() int {
	if s.allowed == nil {
		return 0
	}
	s.mu.Lock()
	open := make([]*peerConn, 0, len(s.peers))
	for c := range s.peers {
		open = append(open, c)
	}
	s.mu.Unlock()
	verdicts := map[string]bool{}
	closed := 0
	for _, c := range open {
		ok, asked := verdicts[c.pin]
		if !asked {
			ok = s.allowed(c.pin)
			verdicts[c.pin] = ok
		}
		if !ok && c.drop() {
			closed++
		}
	}
	return closed
}

// peerConn is a peer's connection on the Raft port, tracked with the pin of the leaf
// the peer presented while it is open.
type peerConn struct {
	net.Conn          // the TLS connection
	raw      net.Conn // the TCP connection under it
	pin      string
	stream   *tlsStream
	dropped  atomic.Bool
	// mayAsk is set on an accepted connection until its first read: a peer's first
	// byte may be a members question (AskMembers) instead of a Raft RPC. Only Raft's
	// goroutine for the connection reads it, so the flag needs no lock.
	mayAsk bool
}

func (c *peerConn) Close() error {
	c.stream.untrack(c)
	return c.Conn.Close()
}

// drop closes the connection of a peer no longer allowed, and reports whether this
// call closed it. It closes the TCP connection under TLS: a TLS close first sends
// an alert, which can wait seconds on a peer that stopped reading.
func (c *peerConn) drop() bool {
	if c.dropped.Swap(true) {
		return false
	}
	c.stream.untrack(c)
	_ = c.raw.Close()
	return true
}

// Read reports the end of the stream on a dropped connection: hashicorp/raft logs
// any other read error on an accepted connection as a command it failed to
// decode, and a drop is no such failure.
func (c *peerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.dropped.Load() {
		err = io.EOF
	}
	if c.mayAsk && n > 0 {
		c.mayAsk = false
		if p[0] == membersQuery {
			// Answered here, on Raft's goroutine for the connection, which then
			// sees the end of the stream and closes it.
			c.answerMembers()
			return 0, io.EOF
		}
	}
	return n, err
}

// answerMembers writes the members answer and leaves the close to Raft.
func (c *peerConn) answerMembers() {
	answer := c.stream.members()
	if len(answer) > maxMembersAnswer {
		return
	}
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.stream.handshake))
	_, _ = c.Conn.Write(answer)
}

func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *tlsStream) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		err = s.ln.Close()
	})
	return err
}

func (s *tlsStream) Addr() net.Addr { return s.advertise }

func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 || timeout > s.handshake {
		timeout = s.handshake
	}
	if ap, err := netip.ParseAddrPort(string(address)); err == nil {
		s.gate.learnPeer(ap.Addr()) // a member it dials: its dials back come from there
	}
	d := net.Dialer{Timeout: timeout}
	raw, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	cfg := s.cfg.Clone()
	if host, _, err := net.SplitHostPort(string(address)); err == nil {
		cfg.ServerName = host // checked against the peer's IP SAN
	}
	c := tls.Client(raw, cfg)
	_ = c.SetDeadline(time.Now().Add(timeout))
	if err := c.Handshake(); err != nil {
		_ = raw.Close()
		return nil, err
	}
	pc, err := s.admit(raw, c, false)
	if err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	_ = c.SetDeadline(time.Time{})
	return pc, nil
}
