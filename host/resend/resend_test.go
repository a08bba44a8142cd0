package resend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// broker is a real nats-server on loopback and a client connection to it: what
// matters here is how a broker carries requests and their answers, and says "no
// responders".
func broker(t *testing.T) *nats.Conn {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	return connect(t, s.ClientURL())
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// server answers requests on subject with what answer returns for the n-th
// (1-based); nil drops it unanswered, as a control node that stopped leading did.
func serve(t *testing.T, nc *nats.Conn, subject string, answer func(n int) []byte) *atomic.Int32 {
	t.Helper()
	var got atomic.Int32
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		if a := answer(int(got.Add(1))); a != nil {
			_ = m.Respond(a)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &got
}

const (
	ok      = "ok"
	refused = "refused for now"
	final   = "refused for good"
)

// settles: an acceptance and a final refusal settle; "refused for now" does not.
func settles(data []byte) bool { return string(data) != refused }

func req(timeout, resend time.Duration) Request {
	return Request{Subject: "mesh.enrol.web-1", Data: []byte("{}"), Timeout: timeout, Resend: resend, Settles: settles}
}

func TestAnAnsweredRequestIsSentOnce(t *testing.T) {
	nc := broker(t)
	got := serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return []byte(ok) })
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok || a.Sent != 1 || a.Unsettled != 0 || got.Load() != 1 {
		t.Fatalf("%+v, %v after %d received; want ok, sent once", a, err, got.Load())
	}
}

// TestAnUnansweredRequestIsSentAgain: a request a control node took and never
// answered left an enrolment waiting its whole timeout, and failing (seen in a
// partition test). Unanswered for Resend, it is sent again and answered.
func TestAnUnansweredRequestIsSentAgain(t *testing.T) {
	nc := broker(t)
	got := serve(t, nc, "mesh.enrol.web-1", func(n int) []byte {
		if n == 1 {
			return nil
		}
		return []byte(ok)
	})
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok || a.Sent < 2 || int(got.Load()) != a.Sent {
		t.Fatalf("%+v, %v after %d received; want a later sending answered", a, err, got.Load())
	}
	if a.Unsettled < 1 {
		t.Fatalf("unsettled %d, want the first sending counted", a.Unsettled)
	}
}

// TestALateAnswerToAnEarlierSendingIsTaken: a mesh slower than Resend answers the
// first sending after the second went; the reverted resend dropped that answer
// (a new inbox each sending), and an enrolment that took longer than Resend to
// commit failed where it had succeeded before.
func TestALateAnswerToAnEarlierSendingIsTaken(t *testing.T) {
	nc := broker(t)
	release := make(chan struct{})
	var once sync.Once
	var got atomic.Int32
	if _, err := nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) {
		if got.Add(1) == 1 {
			// Answered only once the second sending has come, which is never
			// answered.
			go func() { <-release; _ = m.Respond([]byte(ok)) }()
			return
		}
		once.Do(func() { close(release) })
	}); err != nil {
		t.Fatal(err)
	}
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok || a.Sent < 2 {
		t.Fatalf("%+v, %v; want the first sending's late answer", a, err)
	}
}

// TestARefusalAnEarlierSendingMayOvertakeIsHeld: the second sending is refused in a
// way the first, still under way, can overtake (an enrolment being committed, seen
// as not yet recorded); the first's acceptance that follows is what is taken.
func TestARefusalAnEarlierSendingMayOvertakeIsHeld(t *testing.T) {
	nc := broker(t)
	release := make(chan struct{})
	var got atomic.Int32
	var once sync.Once
	if _, err := nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) {
		if got.Add(1) == 1 {
			go func() { <-release; _ = m.Respond([]byte(ok)) }()
			return
		}
		_ = m.Respond([]byte(refused))
		time.AfterFunc(300*time.Millisecond, func() { once.Do(func() { close(release) }) })
	}); err != nil {
		t.Fatal(err)
	}
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok || a.Sent < 2 {
		t.Fatalf("%+v, %v; want the first sending's acceptance over the second's refusal", a, err)
	}
}

// TestAHeldRefusalIsTheAnswerAtTheTimeout: the first sending never answers; a later
// one's refusal is the answer once the timeout passes, saying a sending may still
// have been carried out.
func TestAHeldRefusalIsTheAnswerAtTheTimeout(t *testing.T) {
	nc := broker(t)
	serve(t, nc, "mesh.enrol.web-1", func(n int) []byte {
		if n == 1 {
			return nil
		}
		return []byte(refused)
	})
	start := time.Now()
	a, err := Send(context.Background(), nc, req(time.Second, 200*time.Millisecond))
	if err != nil || a.Msg == nil || string(a.Msg.Data) != refused || a.Sent < 2 || a.Unsettled < 1 {
		t.Fatalf("%+v, %v; want the held refusal, a sending unsettled", a, err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("answered after %s, want at the 1 s timeout", took)
	}
}

// TestAHeldRefusalDoesNotStopTheSendings: "unavailable" is most often a moment (a
// leader change under the commit): the request is sent again after it, and the
// acceptance of a later sending is the answer (a review: the first version stopped
// sending, and failed at the timeout what one more sending carried out).
func TestAHeldRefusalDoesNotStopTheSendings(t *testing.T) {
	nc := broker(t)
	got := serve(t, nc, "mesh.enrol.web-1", func(n int) []byte {
		switch n {
		case 1:
			return nil
		case 2:
			return []byte(refused)
		}
		return []byte(ok)
	})
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok || got.Load() < 3 {
		t.Fatalf("%+v, %v after %d sendings; want a third sending's acceptance", a, err, got.Load())
	}
}

// TestARefusalAfterAnUnconfirmedAnswerIsNotFinal: the first sending was answered
// "could not confirm" (its commit may still land), the later ones refused for good
// by their look: every sending answered, yet the refusal is not final (a review:
// it was taken as final, and the host deleted the key the first may have enrolled).
func TestARefusalAfterAnUnconfirmedAnswerIsNotFinal(t *testing.T) {
	nc := broker(t)
	release := make(chan struct{})
	var once sync.Once
	var got atomic.Int32
	if _, err := nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) {
		if got.Add(1) == 1 {
			go func() { <-release; _ = m.Respond([]byte(refused)) }()
			return
		}
		once.Do(func() { close(release) })
		time.Sleep(100 * time.Millisecond) // after the first's answer
		_ = m.Respond([]byte(refused))
	}); err != nil {
		t.Fatal(err)
	}
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != refused || a.Unsettled < 1 {
		t.Fatalf("%+v, %v; want the refusal, another sending unsettled", a, err)
	}
}

// TestARefusalNoEarlierSendingCanOvertakeIsFinal: a refusal that settles is taken
// at once, though an earlier sending is unanswered.
func TestARefusalNoEarlierSendingCanOvertakeIsFinal(t *testing.T) {
	nc := broker(t)
	serve(t, nc, "mesh.enrol.web-1", func(n int) []byte {
		if n == 1 {
			return nil
		}
		return []byte(final)
	})
	start := time.Now()
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != final || a.Unsettled != 1 {
		t.Fatalf("%+v, %v; want the final refusal", a, err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s, want it at once", took)
	}
}

// TestTheOnlySendingsRefusalIsFinal: sent once, any answer is the answer.
func TestTheOnlySendingsRefusalIsFinal(t *testing.T) {
	nc := broker(t)
	serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return []byte(refused) })
	a, err := Send(context.Background(), nc, req(5*time.Second, time.Second))
	if err != nil || string(a.Msg.Data) != refused || a.Sent != 1 || a.Unsettled != 0 {
		t.Fatalf("%+v, %v; want the one sending's refusal", a, err)
	}
}

// TestARequestNobodyServesIsSentAgainOnceServed: "no responders" (a leader
// election) sends the request again after a pause until a control node serves.
func TestARequestNobodyServesIsSentAgainOnceServed(t *testing.T) {
	nc := broker(t)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) { _ = m.Respond([]byte(ok)) })
	}()
	a, err := Send(context.Background(), nc, req(5*time.Second, time.Second))
	if err != nil || string(a.Msg.Data) != ok || a.Sent < 2 {
		t.Fatalf("%+v, %v; want the answer once a control node serves", a, err)
	}
}

// TestNobodyServingUntilTheTimeoutIsNoResponders: said as nats.ErrNoResponders, so
// a caller can tell "nothing received it" from "unanswered".
func TestNobodyServingUntilTheTimeoutIsNoResponders(t *testing.T) {
	nc := broker(t)
	start := time.Now()
	_, err := Send(context.Background(), nc, req(500*time.Millisecond, 200*time.Millisecond))
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("want no responders, got %v", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up after %s, want about the 500 ms timeout", took)
	}
}

// TestARequestTakenThenNobodyServesIsUnanswered: the first sending was taken and
// dropped, and nobody serves afterwards: the request may have been carried out, so
// the error is ErrUnanswered, not "no responders".
func TestARequestTakenThenNobodyServesIsUnanswered(t *testing.T) {
	nc := broker(t)
	var sub *nats.Subscription
	var err error
	sub, err = nc.Subscribe("mesh.enrol.web-1", func(*nats.Msg) { _ = sub.Unsubscribe() })
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	a, err := Send(context.Background(), nc, req(time.Second, 200*time.Millisecond))
	if !errors.Is(err, ErrUnanswered) || errors.Is(err, nats.ErrNoResponders) || a.Unsettled != 1 || a.Sent < 2 || a.Reached != 1 {
		t.Fatalf("%+v, %v; want unanswered, the first sending counted", a, err)
	}
}

func TestNeverAnsweredEndsAtTheTimeout(t *testing.T) {
	nc := broker(t)
	got := serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return nil })
	start := time.Now()
	a, err := Send(context.Background(), nc, req(700*time.Millisecond, 200*time.Millisecond))
	if !errors.Is(err, ErrUnanswered) {
		t.Fatalf("want unanswered, got %v", err)
	}
	if took := time.Since(start); took < 600*time.Millisecond || took > 3*time.Second {
		t.Fatalf("gave up after %s, want about the 700 ms timeout", took)
	}
	// At 0, 200 and 600 ms (each wait twice the one before), the last one
	// perhaps late on a loaded machine.
	if a.Sent < 2 || a.Sent > 3 || int(got.Load()) < a.Sent-1 || a.Unsettled != a.Sent {
		t.Fatalf("%+v, %d received; want two or three sendings, each unanswered", a, got.Load())
	}
}

func TestCancelledEndsTheWait(t *testing.T) {
	nc := broker(t)
	serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return nil })
	ctx, cancel := context.WithCancelCause(context.Background())
	stop := errors.New("interrupted")
	time.AfterFunc(200*time.Millisecond, func() { cancel(stop) })
	if _, err := Send(ctx, nc, req(5*time.Second, time.Second)); !errors.Is(err, stop) {
		t.Fatalf("want the context's cause, got %v", err)
	}
}

// TestAnswersAreHeardUnderTheConnectionsInbox: a connection whose permissions allow
// it to hear only its own inbox prefix (an enrolling host's) hears its answers.
func TestAnswersAreHeardUnderTheConnectionsInbox(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*server.User{
			{Username: "host", Password: "p", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{"mesh.enrol.web-1"}},
				Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.enrol.web-1.K.>"}}}},
			{Username: "cp", Password: "p"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	cp, err := nats.Connect(s.ClientURL(), nats.UserInfo("cp", "p"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	serve(t, cp, "mesh.enrol.web-1", func(int) []byte { return []byte(ok) })
	host, err := nats.Connect(s.ClientURL(), nats.UserInfo("host", "p"), nats.CustomInboxPrefix("_INBOX.enrol.web-1.K"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	a, err := Send(context.Background(), host, req(5*time.Second, time.Second))
	if err != nil || string(a.Msg.Data) != ok {
		t.Fatalf("%+v, %v; want the answer on the host's inbox", a, err)
	}
}

// TestAClosedConnectionEndsTheWait: nats.go does not close a channel subscription's
// channel when the connection closes; the wait ends at once all the same, not at the
// timeout (a review: 4 s where a request took 300 ms).
func TestAClosedConnectionEndsTheWait(t *testing.T) {
	nc := broker(t)
	serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return nil })
	time.AfterFunc(200*time.Millisecond, nc.Close)
	start := time.Now()
	if _, err := Send(context.Background(), nc, req(5*time.Second, 0)); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("want the connection closed, got %v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("took %s", took)
	}
}

// TestNothingIsSentWithoutATimeout: a zero timeout is refused before anything is
// published, and a connection closed before the first sending says nothing was sent.
func TestNothingIsSentWithoutATimeout(t *testing.T) {
	nc := broker(t)
	got := serve(t, nc, "mesh.enrol.web-1", func(int) []byte { return []byte(ok) })
	if _, err := Send(context.Background(), nc, req(0, 0)); !errors.Is(err, ErrNotSent) {
		t.Fatalf("zero timeout: %v, want ErrNotSent", err)
	}
	nc.Flush()
	if got.Load() != 0 {
		t.Fatal("a request with a zero timeout was published")
	}
	nc.Close()
	if _, err := Send(context.Background(), nc, req(time.Second, 0)); !errors.Is(err, ErrNotSent) {
		t.Fatalf("closed connection: %v, want ErrNotSent", err)
	}
}

// TestAnAnswerReadyAtTheDeadlineIsTaken: an acceptance already received when the
// timeout fires is the answer, not the held refusal (a review: the select drew the
// deadline 13 times in 30).
func TestAnAnswerReadyAtTheDeadlineIsTaken(t *testing.T) {
	nc := broker(t)
	var n atomic.Int32
	var second *nats.Msg
	if _, err := nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) {
		switch n.Add(1) {
		case 1: // taken, never answered
		case 2:
			second = m // answered with the third, just before it
		case 3:
			_ = second.Respond([]byte(refused))
			_ = m.Respond([]byte(ok))
		}
	}); err != nil {
		t.Fatal(err)
	}
	// Settles is slow enough that the third sending's acceptance and the
	// deadline are both ready while the second's refusal is being looked at
	// (the third goes out 30 ms in: a second leaves room for a loaded machine).
	r := req(time.Second, 10*time.Millisecond)
	slow := func(data []byte) bool {
		if string(data) == refused {
			time.Sleep(1500 * time.Millisecond)
		}
		return settles(data)
	}
	r.Settles = slow
	for range 5 {
		n.Store(0)
		a, err := Send(context.Background(), nc, r)
		if err != nil || a.Msg == nil {
			t.Fatalf("%+v, %v", a, err)
		}
		if string(a.Msg.Data) == refused && a.Unsettled > 0 {
			t.Fatalf("the held refusal was taken though an acceptance had come: %+v", a)
		}
	}
}

// TestAnElectionDoesNotStretchTheResend: "no responders" (nobody leads) sends the
// request again after short pauses; those sendings reached nobody and do not double
// the wait for the next. The sending the new leader takes and drops is sent again
// (a review: six sendings in an election pushed the next one past the timeout).
func TestAnElectionDoesNotStretchTheResend(t *testing.T) {
	nc := broker(t)
	time.AfterFunc(1600*time.Millisecond, func() {
		serve(t, nc, "mesh.enrol.web-1", func(n int) []byte {
			if n == 1 {
				return nil
			}
			return []byte(ok)
		})
	})
	a, err := Send(context.Background(), nc, req(5*time.Second, 200*time.Millisecond))
	if err != nil || string(a.Msg.Data) != ok {
		t.Fatalf("%+v: the dropped sending was not sent again: %v", a, err)
	}
}

// TestOnlyAnswersThatMayBeCarriedOutCountAsUnsettled: a held refusal whose sending
// was refused before anything was done (Pending false: "expired") does not make a
// later refusal not final; one that may still be committed ("for now") does.
func TestOnlyAnswersThatMayBeCarriedOutCountAsUnsettled(t *testing.T) {
	nc := broker(t)
	release := make(chan struct{})
	var once sync.Once
	var got atomic.Int32
	first := refused
	if _, err := nc.Subscribe("mesh.enrol.web-1", func(m *nats.Msg) {
		if got.Add(1) == 1 {
			go func() { <-release; _ = m.Respond([]byte(first)) }()
			return
		}
		once.Do(func() { close(release) })
		time.Sleep(100 * time.Millisecond) // after the first's answer
		_ = m.Respond([]byte("expired"))
	}); err != nil {
		t.Fatal(err)
	}
	r := req(5*time.Second, 200*time.Millisecond)
	r.Settles = func(data []byte) bool { return string(data) == ok || string(data) == final }
	r.Pending = func(data []byte) bool { return string(data) == refused }
	a, err := Send(context.Background(), nc, r)
	if err != nil || string(a.Msg.Data) != "expired" || a.Unsettled != 1 {
		t.Fatalf("after a sending answered %q: %+v, %v; want expired, one unsettled", first, a, err)
	}
	got.Store(0)
	release = make(chan struct{})
	once = sync.Once{}
	first = "expired"
	a, err = Send(context.Background(), nc, r)
	if err != nil || string(a.Msg.Data) != "expired" || a.Unsettled != 0 {
		t.Fatalf("after a sending answered %q: %+v, %v; want expired, final", first, a, err)
	}
}
