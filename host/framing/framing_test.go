package framing

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A stream a mesh broker could send: INFO, PING, messages with and without reply
// and headers, payloads that hold what looks like protocol, one of MaxMessage.
func legitimateStream() string {
	big := strings.Repeat("x", MaxMessage)
	return `INFO {"server_id":"S","max_payload":2097152,"connect_urls":["127.0.0.1:7300"]}` + "\r\n" +
		"PING\r\n+OK\r\nPONG\r\n" +
		"MSG mesh.node.web-1.decl 1 5\r\nhello\r\n" +
		"msg mesh.node.web-1.decl 1 _INBOX.x 27\r\nMSG a 1 99999999999999\r\n\n\r\n\r\n" +
		"HMSG mesh.node.web-1.decl 2 22 27\r\nNATS/1.0\r\nA: b\r\n\r\nhello\r\n" +
		"HMSG\tmesh.node.web-1.decl\t2\t_INBOX.y\t12\t12\r\nNATS/1.0\r\n\r\n\r\n" +
		"MSG mesh.node.web-1.decl 1 0\r\n\r\n" +
		"MSG mesh.node.web-1.decl 1 " + fmt.Sprint(len(big)) + "\r\n" + big + "\r\n" +
		"-ERR 'Permissions Violation for Publish to \"x\"'\r\n"
}

// TestFramingPassesWhatAMeshBrokerSends: every split of a legitimate stream into two
// reads (and one byte at a time) passes, whatever a payload holds.
func TestFramingPassesWhatAMeshBrokerSends(t *testing.T) {
	s := []byte(legitimateStream())
	for _, cut := range []int{0, 1, 5, 40, 90, 100, 101, 120, 160, 200, 260, 300, len(s) - 60, len(s) - 2, len(s)} {
		var f stream
		if err := f.feed(s[:cut]); err != nil {
			t.Fatalf("cut at %d, first part: %v", cut, err)
		}
		if err := f.feed(s[cut:]); err != nil {
			t.Fatalf("cut at %d, second part: %v", cut, err)
		}
		if f.skip != 0 || len(f.line) != 0 {
			t.Fatalf("cut at %d: the stream ended mid-frame by the guard's reading (skip %d, line %q)", cut, f.skip, f.line)
		}
	}
	small := s[:len(s)-MaxMessage-200]
	var f stream
	for i := range small {
		if err := f.feed(small[i : i+1]); err != nil {
			t.Fatalf("byte %d, one at a time: %v", i, err)
		}
	}
}

// TestFramingRefusesWhatNoMeshBrokerSends: a size past MaxMessage (or past what an
// int holds, which panics nats.go's read loop), a size that is no number, a line
// without end; refused at the first read that shows it, and every read after.
func TestFramingRefusesWhatNoMeshBrokerSends(t *testing.T) {
	for name, in := range map[string]string{
		"one byte too many":    "MSG a 1 " + fmt.Sprint(MaxMessage+1) + "\r\n",
		"overflowing size":     "MSG a 1 99999999999999999999\r\n",
		"a terabyte":           "MSG a 1 _INBOX.r 1099511627776\r\n",
		"headers, huge total":  "HMSG a 1 10 9223372036854775807\r\n",
		"lower case":           "msg a 1 9999999999\r\n",
		"not a number":         "MSG a 1 -5\r\n",
		"no size":              "MSG a\r\n",
		"endless line":         "INFO {" + strings.Repeat("a", MaxControlLine+1),
		"endless line, ended":  "-ERR " + strings.Repeat("a", MaxControlLine+1) + "\r\n",
		"after a good message": "MSG a 1 2\r\nok\r\nMSG a 1 99999999999\r\n",
	} {
		var f stream
		err := f.feed([]byte(in))
		if !errors.Is(err, ErrHostile) {
			t.Errorf("%s: %v, want ErrHostile", name, err)
		}
		if err := f.feed([]byte("PING\r\n")); !errors.Is(err, ErrHostile) && f.err == nil {
			t.Errorf("%s: the guard forgot its refusal", name)
		}
	}
	// An endless line arriving in small reads is refused as soon as it is too long,
	// not kept.
	var f stream
	chunk := []byte(strings.Repeat("a", 1000))
	var err error
	for i := 0; err == nil && i < 1000; i++ {
		err = f.feed(chunk)
	}
	if !errors.Is(err, ErrHostile) || len(f.line) != 0 {
		t.Fatalf("an endless line in reads of 1000 bytes: %v, %d bytes kept", err, len(f.line))
	}
}

// FuzzFraming: no input panics the guard or makes it keep more than a line's worth;
// whatever it lets through announces no message larger than MaxMessage.
func FuzzFraming(f *testing.F) {
	f.Add([]byte(legitimateStream()[:300]), 7)
	f.Add([]byte("MSG a 1 99999999999999999999\r\n"), 3)
	f.Add([]byte("HMSG a 1 2 3\r\nabc\r\nMSG"), 1)
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		var g stream
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		err := g.feed(in[:cut])
		if err == nil {
			err = g.feed(in[cut:])
		}
		if err != nil && !errors.Is(err, ErrHostile) {
			t.Fatalf("an error that is not the guard's: %v", err)
		}
		if len(g.line) > MaxControlLine || g.skip > MaxMessage+2 {
			t.Fatalf("the guard keeps %d bytes of a line, skips %d", len(g.line), g.skip)
		}
	})
}

// BenchmarkFraming: what the guard adds to reading one declaration (its MSG line and
// an envelope-sized payload).
func BenchmarkFraming(b *testing.B) {
	msg := []byte("MSG mesh.node.web-1.decl 1 1500\r\n" + strings.Repeat("x", 1500) + "\r\n")
	b.ReportAllocs()
	var f stream
	for b.Loop() {
		if err := f.feed(msg); err != nil {
			b.Fatal(err)
		}
	}
}
