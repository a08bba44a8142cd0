// Package resend sends a request over NATS until it is answered, sending it again
// when it goes unanswered, and hears every sending's answer on one inbox.
//
// A request to a queue of control nodes can be taken and never answered: the leader
// that took it stopped leading before its turn came (its subscription's queue is
// dropped), or a control node cut off from the rest took it while the broker still
// counted its subscription (its route not yet found dead). One sending waited its
// whole timeout for nothing. Sent again, the control node serving now answers. Each
// sending has a reply subject of its own under one subscription, so the answer of
// an earlier sending that comes late is taken as much as the latest's; and a
// refusal an earlier sending still under way may have caused (an enrolment being
// committed, refused "expired" to its second sending by a leader that has not yet
// applied it) is held while an earlier sending may still answer.
package resend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Request is a request and how it is sent.
type Request struct {
	Subject string
	Data    []byte
	// Timeout bounds the whole wait, every sending within it.
	Timeout time.Duration
	// Resend is how long the latest sending goes unanswered before the request is
	// sent again; zero sends it once (and again only after "no responders").
	Resend time.Duration
	// Settles reports whether an answer ends the wait while an earlier sending is
	// unanswered. One that does not is held, and returned if no other answer
	// settles before every sending is answered or the timeout. nil: every answer
	// settles.
	Settles func(data []byte) bool
}

// Answer is the answer taken and how the request fared.
type Answer struct {
	Msg *nats.Msg
	// Sent counts the sendings; Unanswered those unanswered when Msg was taken.
	// A refusal taken while a sending is unanswered may be overtaken by what that
	// sending is doing: an enrolment it carries may still be recorded.
	Sent, Unanswered int
}

// ErrUnanswered means no sending was answered within the timeout; the request may
// have been carried out.
var ErrUnanswered = errors.New("no answer")

// noRespondersPause is the first wait before a request that reached nobody is sent
// again; it doubles up to a second.
const noRespondersPause = 50 * time.Millisecond

// Send sends r on nc and waits for its answer. nc's inbox prefix (nats.CustomInboxPrefix)
// decides where answers are heard, as for nc.Request. "No responders" for every
// sending (nothing received the request: an election, a control plane starting)
// sends it again after a short pause, until the timeout, and is then
// nats.ErrNoResponders. ctx ending ends the wait with ctx's cause.
func Send(ctx context.Context, nc *nats.Conn, r Request) (Answer, error) {
	inbox := nc.NewInbox()
	// A channel subscription, not a synchronous one: nats.go's NextMsg turns the
	// broker's "no responders" into an error that does not say which sending it
	// answers. Few sendings are made, so the channel never fills.
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(inbox+".*", msgs)
	if err != nil {
		return Answer{}, err
	}
	defer sub.Unsubscribe()

	deadline := time.NewTimer(r.Timeout)
	defer deadline.Stop()
	var (
		sent        int
		unanswered  = map[string]bool{}
		held        *nats.Msg
		latest      string
		noResponder bool
		pause       = noRespondersPause
	)
	send := func() error {
		sent++
		latest = inbox + "." + strconv.Itoa(sent)
		unanswered[latest] = true
		return nc.PublishRequest(r.Subject, latest, r.Data)
	}
	if err := send(); err != nil {
		return Answer{}, err
	}
	// next fires when the request is to be sent again: after Resend unanswered, or
	// after a pause once every sending reached nobody.
	next := time.NewTimer(never(r.Resend))
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return Answer{Sent: sent, Unanswered: len(unanswered)}, context.Cause(ctx)
		case <-deadline.C:
			if held != nil {
				return Answer{Msg: held, Sent: sent, Unanswered: len(unanswered)}, nil
			}
			if noResponder && len(unanswered) == 0 {
				return Answer{Sent: sent}, nats.ErrNoResponders
			}
			return Answer{Sent: sent, Unanswered: len(unanswered)}, fmt.Errorf("%w within %s (sent %d time(s))", ErrUnanswered, r.Timeout, sent)
		case <-next.C:
			if err := send(); err != nil {
				return Answer{Sent: sent, Unanswered: len(unanswered)}, err
			}
			next.Reset(never(r.Resend))
		case m := <-msgs:
			if !unanswered[m.Subject] {
				continue // a second answer to one sending (a broker's 503 after it)
			}
			delete(unanswered, m.Subject)
			if isNoResponders(m) {
				noResponder = true
				if held != nil && len(unanswered) == 0 {
					return Answer{Msg: held, Sent: sent}, nil
				}
				if m.Subject == latest {
					// Nobody serves now (an election): sent again shortly,
					// while an earlier sending may still answer.
					next.Reset(pause)
					pause = min(2*pause, time.Second)
				}
				continue
			}
			if len(unanswered) == 0 || r.Settles == nil || r.Settles(m.Data) {
				return Answer{Msg: m, Sent: sent, Unanswered: len(unanswered)}, nil
			}
			held = m
			if m.Subject == latest {
				// A control node serves: sending again would be answered the
				// same. What is left is the earlier sendings' answers.
				next.Stop()
			}
		}
	}
}

// never is d, or as good as never for zero.
func never(d time.Duration) time.Duration {
	if d <= 0 {
		return 1<<63 - 1
	}
	return d
}

// isNoResponders reports whether m is the broker's "no responders" status: the
// sending it answers reached no subscriber. (nats.go keeps the header's name to
// itself; a request it sends reads the same header.)
func isNoResponders(m *nats.Msg) bool {
	return len(m.Data) == 0 && m.Header != nil && strings.HasPrefix(m.Header.Get("Status"), "503")
}
