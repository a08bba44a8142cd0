package daemon

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/operator"
	"mesh/controlplane/state"
	"mesh/host/enrol"
	"mesh/host/identity"
	"mesh/tokenfmt"
)

// TestAnEnrolmentTakenByALeaderThatStoppedIsSentAgain: a leader that stops leading
// drops the enrolment requests its subscription held, and a control node cut off
// takes requests its broker still routes to it; the host waited its whole timeout
// and failed (seen in TestMinorityPartition). Here the request is taken by a
// member of the control plane's queue that drops it and hands the queue back, as a
// leader stepping down and a new one stepping up would. The real agent's
// enrolment, through the real broker over pinned TLS, sends it again unanswered and
// is admitted by the control node serving.
func TestAnEnrolmentTakenByALeaderThatStoppedIsSentAgain(t *testing.T) {
	// Run, not only opened: its broker's TLS and its leadership are the real ones.
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "resend"), wrapAuth: withObserver})
	nc := servedToOperators(t, d)
	tok, err := operator.NewClient(nc, 0).MintToken("web-1", tokenfmt.RoleWorker, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	d.stopAPI()
	obs, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(observerToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(obs.Close)
	var (
		taken atomic.Int32
		once  sync.Once
		sub   *nats.Subscription
	)
	sub, err = obs.QueueSubscribe("mesh.enrol.>", queueGroup, func(*nats.Msg) {
		taken.Add(1)
		once.Do(func() {
			go func() {
				if err := d.serveAPI(); err != nil {
					t.Error(err)
				}
				_ = sub.Unsubscribe()
			}()
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir() + "/state"
	res, err := enrol.Enrol(t.Context(), enrol.Options{StateDir: dir, Token: tok.Encode(), RequestTimeout: 10 * time.Second, Resend: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("enrol: %v", err)
	}
	if taken.Load() != 1 {
		t.Fatalf("the stopped leader took %d request(s), want the first", taken.Load())
	}
	id, err := identity.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	d.fsm.Read(func(s *state.State) {
		if n, ok := s.Nodes["web-1"]; ok {
			key = n.PublicKey
		}
	})
	if key == "" || key != id.PublicKey || res.Identity.PublicKey != key {
		t.Fatalf("the mesh holds web-1 under %q, the host's key is %q", key, id.PublicKey)
	}
}

// TestAnEnrolmentSentTwiceAtOnceIsRecordedOnce: the host's second sending can come
// while the first is being committed; every sending is answered, the enrolment is
// counted and logged once, and committed once: the others wait for it (a review
// measured one Raft entry a sending, which a slow disk would multiply as hosts send
// again).
func TestAnEnrolmentSentTwiceAtOnceIsRecordedOnce(t *testing.T) {
	d := fleet(t, 0)
	e := newEnrolling(t, d, "web-1")
	req := e.request()
	enrolments := func() float64 {
		return gathered(t, d)["mesh_control_enrolments_total"]["kind="+enrolledHost]
	}
	before, index := enrolments(), d.fsm.AppliedIndex()
	var wg sync.WaitGroup
	resps := make([]bool, 1+maxEnrolmentWaiters)
	for i := range resps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i] = d.enrol("web-1", req).OK
		}()
	}
	wg.Wait()
	for i, ok := range resps {
		if !ok {
			t.Fatalf("sending %d refused", i)
		}
	}
	if got := enrolments() - before; got != 1 {
		t.Fatalf("the enrolment was counted %v times, want once", got)
	}
	if n := d.fsm.AppliedIndex() - index; n != 1 {
		t.Fatalf("%d entries committed for one enrolment sent %d times at once, want 1", n, len(resps))
	}
}

// TestFewSendingsOfOneEnrolmentWait: each waiting sending holds one of the enrolment
// handlers; past maxEnrolmentWaiters a sending is refused at once (unavailable, which
// the host holds while an earlier sending may answer), so that a client flooding its
// own enrolment cannot hold them all while the first is committed (a review).
func TestFewSendingsOfOneEnrolmentWait(t *testing.T) {
	var f enrolmentsInFlight
	done, ok := f.start("k")
	if !ok {
		t.Fatal("the first sending was refused")
	}
	started := make(chan bool, maxEnrolmentWaiters)
	for range maxEnrolmentWaiters {
		go func() {
			d, ok := f.start("k")
			if ok {
				d()
			}
			started <- ok
		}()
	}
	waitFor(t, 5*time.Second, "the waiters wait", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.waiting["k"] == maxEnrolmentWaiters
	})
	if _, ok := f.start("k"); ok {
		t.Fatal("a sending past the waiters' bound was let wait")
	}
	if d, ok := f.start("other"); !ok {
		t.Fatal("another enrolment was refused")
	} else {
		d()
	}
	done()
	for range maxEnrolmentWaiters {
		if !<-started {
			t.Fatal("a waiter was refused")
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.m) != 0 || len(f.waiting) != 0 {
		t.Fatalf("left behind: %v %v", f.m, f.waiting)
	}
}
