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
// refusal an earlier sending may still overtake (an enrolment being committed,
// refused "expired" to its second sending by a leader that has not yet applied it)
// is held while an earlier sending may still answer, and said not to be final when
// it is the answer.
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
	// Timeout bounds the whole wait, every sending within it; it must be positive.
	Timeout time.Duration
	// Resend is how long the first sending goes unanswered before the request is
	// sent again; each wait after is twice the one before (a control plane slow
	// to commit is not sent more and more of the same). Zero sends it once, and
	// again only after "no responders".
	Resend time.Duration
	// Settles reports whether an answer ends the wait while another sending is
	// unanswered, and is final: an acceptance, or a refusal no sending still under
	// way can overtake. One that does not is held, and is the answer if nothing
	// settles before every sending is answered or the timeout. nil: every answer
	// settles.
	Settles func(data []byte) bool
	// Pending reports whether an answer that does not settle says its own sending
	// may still be carried out (a commit that could not be confirmed), as against
	// one refused before anything was done: only those count in Unsettled. nil:
	// every answer that does not settle.
	Pending func(data []byte) bool
}

// Answer is the answer taken and how the request fared.
type Answer struct {
	Msg *nats.Msg
	// Sent counts the sendings published; Reached those that reached a
	// subscriber (not answered "no responders").
	Sent, Reached int
	// Unsettled counts the other sendings that may still have been carried out
	// when Msg was taken: unanswered, or answered that they may (Request.Pending). A refusal taken while it is above zero
	// is not final: what those sendings did may overtake it.
	Unsettled int
}

// Errors of Send besides the connection's and ctx's.
var (
	// ErrUnanswered: no sending was answered within the timeout; the request may
	// have been carried out.
	ErrUnanswered = errors.New("no answer")
	// ErrNotSent: the request could not be published; nothing reached the broker.
	ErrNotSent = errors.New("the request could not be sent")
)

// noRespondersPause is the first wait before a request that reached nobody is sent
// again; it doubles up to a second.
const noRespondersPause = 50 * time.Millisecond

// Send sends r on nc and waits for its answer. nc's inbox prefix (nats.CustomInboxPrefix)
// decides where answers are heard, as for nc.Request. "No responders" for every
// sending (nothing received the request: an election, a control plane starting)
// sends it again after a short pause, until the timeout, and is then
// nats.ErrNoResponders. ctx ending ends the wait with ctx's cause; the connection
// closing ends it with nats.ErrConnectionClosed.
func Send(ctx context.Context, nc *nats.Conn, r Request) (Answer, error) {
	if r.Timeout <= 0 {
		return Answer{}, fmt.Errorf("%w: a timeout of %s", ErrNotSent, r.Timeout)
	}
	s := &sending{r: r, nc: nc, inbox: nc.NewInbox(), unanswered: map[string]bool{}, settles: r.Settles, pending: r.Pending}
	if s.settles == nil {
		s.settles = func([]byte) bool { return true }
	}
	if s.pending == nil {
		s.pending = func([]byte) bool { return true }
	}
	closed := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(closed)
	// A channel subscription, not a synchronous one: nats.go's NextMsg turns the
	// broker's "no responders" into an error that does not say which sending it
	// answers. Few sendings are made, so the channel never fills.
	msgs := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe(s.inbox+".*", msgs)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	defer sub.Unsubscribe()
	if err := s.send(); err != nil {
		return Answer{}, fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	deadline := time.NewTimer(r.Timeout)
	defer deadline.Stop()
	resend := r.Resend
	// next fires when the request is to be sent again: after a wait unanswered
	// (each twice the one before), or after a pause once the latest sending
	// reached nobody (paused).
	next := time.NewTimer(never(resend))
	defer next.Stop()
	pause, paused := noRespondersPause, false
	// drain takes up what already arrived: an answer and the deadline (or ctx)
	// ready together are not left to the select's draw.
	drain := func() (Answer, bool) {
		for {
			select {
			case m := <-msgs:
				if a, done, _ := s.take(m); done {
					return a, true
				}
			default:
				return Answer{}, false
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			if a, done := drain(); done {
				return a, nil
			}
			return s.answer(nil), context.Cause(ctx)
		case <-closed:
			if a, done := drain(); done {
				return a, nil
			}
			return s.answer(nil), nats.ErrConnectionClosed
		case <-deadline.C:
			if a, done := drain(); done {
				return a, nil
			}
			if s.held != nil {
				return s.answer(s.held), nil
			}
			if s.noResponder && len(s.unanswered) == 0 {
				return s.answer(nil), nats.ErrNoResponders
			}
			return s.answer(nil), fmt.Errorf("%w within %s (sent %d time(s), %d reaching a control node)", ErrUnanswered, r.Timeout, s.sent, s.reached())
		case <-next.C:
			if err := s.send(); err != nil {
				return s.answer(nil), err
			}
			if !paused {
				// Only a sending that reached a control node and went
				// unanswered doubles the wait: an election's "no responders"
				// pushed it past the timeout, and a sending the new leader
				// took and dropped was never sent again (a review).
				resend *= 2
			}
			paused = false
			next.Reset(never(resend))
		case m := <-msgs:
			a, done, nobody := s.take(m)
			if done {
				return a, nil
			}
			if nobody {
				// Nobody serves now (an election): sent again shortly, while an
				// earlier sending may still answer.
				next.Reset(pause)
				pause, paused = min(2*pause, time.Second), true
			}
		}
	}
}

// sending is what Send knows of its sendings.
type sending struct {
	r                Request
	nc               *nats.Conn
	inbox            string
	settles, pending func([]byte) bool

	sent        int
	unanswered  map[string]bool
	latest      string
	noResponder bool
	nobody      int // sendings answered "no responders"
	// held is the latest answer that does not settle; pendingCount counts those
	// that say their sending may still be carried out.
	held         *nats.Msg
	heldPending  bool
	pendingCount int
}

func (s *sending) send() error {
	s.sent++
	s.latest = s.inbox + "." + strconv.Itoa(s.sent)
	s.unanswered[s.latest] = true
	if err := s.nc.PublishRequest(s.r.Subject, s.latest, s.r.Data); err != nil {
		delete(s.unanswered, s.latest)
		s.sent--
		return err
	}
	return nil
}

func (s *sending) reached() int { return s.sent - s.nobody }

// answer is Send's answer with m taken (nil: none).
func (s *sending) answer(m *nats.Msg) Answer {
	a := Answer{Msg: m, Sent: s.sent, Reached: s.reached(), Unsettled: len(s.unanswered) + s.pendingCount}
	if m != nil && m == s.held && s.heldPending {
		a.Unsettled-- // m itself
	}
	return a
}

// take takes answer m: done when it is Send's answer; nobody when it said its
// sending, the latest, reached no subscriber.
func (s *sending) take(m *nats.Msg) (a Answer, done, nobody bool) {
	if !s.unanswered[m.Subject] {
		return Answer{}, false, false // a second answer to one sending (a broker's 503 after it)
	}
	delete(s.unanswered, m.Subject)
	if isNoResponders(m) {
		s.noResponder = true
		s.nobody++
		if s.held != nil && len(s.unanswered) == 0 {
			return s.answer(s.held), true, false
		}
		return Answer{}, false, m.Subject == s.latest
	}
	if len(s.unanswered) == 0 && s.held == nil {
		// The one sending out, or the last, and nothing held: the answer
		// whatever it says, looked at by nobody here (an enrolment's answer is
		// a few KiB of JSON that Settles would decode for nothing).
		return s.answer(m), true, false
	}
	if s.settles(m.Data) {
		return s.answer(m), true, false
	}
	s.held, s.heldPending = m, s.pending(m.Data)
	if s.heldPending {
		s.pendingCount++
	}
	if len(s.unanswered) == 0 {
		return s.answer(m), true, false
	}
	return Answer{}, false, false
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
