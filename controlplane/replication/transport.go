package replication

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"mesh/logging"
)

// tlsStream is a raft.StreamLayer over mutual TLS. Both ends present a CA-signed leaf
// and verify the other's; a host holds no such certificate, so a host's credentials
// are refused here by construction.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	cfg       *tls.Config
	log       *slog.Logger
	repeats   *logging.Limiter
	handshake time.Duration

	conns     chan net.Conn
	closeOnce sync.Once
	done      chan struct{}
}

func newTLSStream(bind string, advertise net.Addr, cfg *tls.Config, log *slog.Logger, repeats *logging.Limiter, handshake time.Duration) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	s := &tlsStream{ln: ln, advertise: advertise, cfg: cfg, log: log, repeats: repeats, handshake: handshake, conns: make(chan net.Conn), done: make(chan struct{})}
	go s.acceptLoop()
	return s, nil
}

// acceptLoop handshakes each incoming connection on its own goroutine, under a
// deadline, and hands over only the connections that completed it.
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
		go func() {
			c := tls.Server(raw, s.cfg)
			_ = c.SetDeadline(time.Now().Add(s.handshake))
			if err := c.Handshake(); err != nil {
				s.refused(raw.RemoteAddr(), err)
				_ = raw.Close()
				return
			}
			_ = c.SetDeadline(time.Time{})
			select {
			case s.conns <- c:
			case <-s.done:
				_ = c.Close()
			}
		}()
	}
}

// refused logs a connection that failed the handshake; a peer that keeps trying (or a
// scanner) is logged once an interval, with a count.
func (s *tlsStream) refused(remote net.Addr, err error) {
	const msg = "refused a connection on the Raft port"
	s.repeats.Log(context.Background(), s.log, slog.LevelWarn, "raft", msg, msg,
		slog.String("remote", remote.String()), slog.String("reason", err.Error()))
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
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
