// Package framing guards a NATS client against a server it reached over the pinned
// TLS but trusts for delivery only: it reads the protocol's framing as it passes and
// ends the connection on the first announcement no mesh broker makes. The host's
// agent reads through it, and so do the control plane's clients (operator, join),
// which may import the host's packages (never the other way round).
package framing

import (
	"bytes"
	"errors"
	"fmt"
	"net"
)

// A broker that passes the pin check is trusted for delivery only, and nats.go
// trusts what a server announces: it allocates a message's buffer at the size the
// MSG line gives before a byte of it arrives (an overflowing size panics its read
// loop, a huge one exhausts memory), and it grows a control line without bound
// until its newline. A removed control node that kept its TLS leaf and sits on the
// path could so crash every agent it reaches, at every restart. Guard reads the
// protocol's framing as it passes and ends the connection on the first
// announcement no mesh broker makes.

const (
	// MaxMessage is the largest message a client accepts from a broker: a mesh
	// broker delivers at most its max payload (2 MiB, a declaration being 1 MiB
	// at most); the margin keeps a broker configured a little larger working.
	MaxMessage = 4 << 20
	// MaxControlLine bounds one protocol line (INFO, MSG, -ERR, ...). A mesh
	// broker's INFO, the longest, lists the brokers of the mesh in a few KiB.
	MaxControlLine = 64 << 10
)

// ErrHostile is the guard's refusal: the broker announced a message or a
// line no mesh broker sends. The connection is closed; nats.go reconnects, to
// another broker if the list has one.
var ErrHostile = errors.New("the broker sent a protocol frame no mesh broker sends")

// Guard returns c reading through the guard: the broker's bytes pass to nats.go
// unchanged, their framing checked (the size each MSG and HMSG line announces, the
// length of every control line; payloads are skipped, not scanned). Give nats.go
// the guarded connection from a custom dialer that made the TLS session itself.
func Guard(c net.Conn) net.Conn { return &guard{Conn: c} }

type guard struct {
	net.Conn
	s stream
}

func (g *guard) Read(p []byte) (int, error) {
	if g.s.err != nil {
		return 0, g.s.err
	}
	n, err := g.Conn.Read(p)
	if n > 0 {
		if ferr := g.s.feed(p[:n]); ferr != nil {
			g.Conn.Close()
			return 0, ferr
		}
	}
	return n, err
}

// stream is the guard's reading of the server's protocol stream.
type stream struct {
	skip int    // payload bytes, with their CRLF, still to pass
	line []byte // the start of a control line split across reads
	err  error
}

// feed reads b, the next bytes from the server, and returns the first violation.
func (f *stream) feed(b []byte) error {
	for len(b) > 0 {
		if f.skip > 0 {
			k := min(f.skip, len(b))
			f.skip -= k
			b = b[k:]
			continue
		}
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(f.line)+len(b) > MaxControlLine {
				return f.fail(fmt.Errorf("%w: a protocol line longer than %d bytes", ErrHostile, MaxControlLine))
			}
			f.line = append(f.line, b...)
			return nil
		}
		if len(f.line)+i > MaxControlLine {
			return f.fail(fmt.Errorf("%w: a protocol line longer than %d bytes", ErrHostile, MaxControlLine))
		}
		line := b[:i]
		if len(f.line) > 0 {
			line = append(f.line, line...)
		}
		size, err := announced(line)
		if err != nil {
			return f.fail(err)
		}
		if size >= 0 {
			f.skip = size + 2 // the payload and its CRLF
		}
		f.line = f.line[:0]
		b = b[i+1:]
	}
	return nil
}

func (f *stream) fail(err error) error {
	f.err = err
	f.line = nil
	return err
}

// announced returns the payload size a MSG or HMSG line announces (for HMSG, the
// total of headers and payload: the line's last field in both), or -1 for any
// other line. nats.go refuses a line whose fields are otherwise wrong, so only the
// size is read here, as nats.go reads it.
func announced(line []byte) (int, error) {
	var op, last []byte
	fields := 0
	for f := range bytes.FieldsSeq(line) {
		if fields == 0 {
			if !bytes.EqualFold(f, []byte("MSG")) && !bytes.EqualFold(f, []byte("HMSG")) {
				return -1, nil
			}
			op = f
		}
		fields++
		last = f
	}
	if fields < 4 {
		if op == nil {
			return -1, nil
		}
		return 0, fmt.Errorf("%w: a %s line without its size", ErrHostile, bytes.ToUpper(op))
	}
	size := 0
	for _, c := range last {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %s announces a size that is not a number", ErrHostile, bytes.ToUpper(op))
		}
		size = size*10 + int(c-'0')
		if size > MaxMessage {
			return 0, fmt.Errorf("%w: %s announces more than %d bytes", ErrHostile, bytes.ToUpper(op), MaxMessage)
		}
	}
	return size, nil
}
