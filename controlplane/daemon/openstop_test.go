package daemon

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/state"
)

// TestAStopWhileOpeningIsNotReady: a stop asked for while Open runs its last steps,
// which do not wait on ctx, was logged "control node ready", then serve stopped as
// before ready (exit 9): the journal said ready to a node that never was (a
// review). Open gives the stop back instead, and logs no "ready".
func TestAStopWhileOpeningIsNotReady(t *testing.T) {
	var log lockedBuffer
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stopped := errors.New("interrupted by SIGTERM")
	// The stop comes as the broker's capacity is said, after the last step that
	// waits on ctx, as the review's signal did.
	h := stopOn{Handler: slog.NewTextHandler(&log, nil), msg: "broker capacity", stop: func() { cancel(stopped) }}
	d, err := Open(ctx, Options{Dir: bootstrapped(t, "openstop"), Logger: slog.New(h), ReadyTimeout: 20 * time.Second})
	if !strings.Contains(log.String(), "broker capacity") {
		t.Fatalf("the broker's capacity was not said, so no stop came late:\n%s", log.String())
	}
	if err == nil {
		d.Close()
		t.Fatal("Open stopped as it ended gave a daemon")
	}
	if !errors.Is(err, stopped) {
		t.Errorf("Open stopped as it ended: %v, want the stop's cause", err)
	}
	if strings.Contains(log.String(), "control node ready") {
		t.Errorf("logged ready while stopping:\n%s", log.String())
	}
}

// stopOn calls stop when a record's message starts with msg.
type stopOn struct {
	slog.Handler
	msg  string
	stop func()
}

func (h stopOn) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) {
		h.stop()
	}
	return h.Handler.Handle(ctx, r)
}

func (h stopOn) WithAttrs(as []slog.Attr) slog.Handler {
	return stopOn{Handler: h.Handler.WithAttrs(as), msg: h.msg, stop: h.stop}
}

func (h stopOn) WithGroup(name string) slog.Handler {
	return stopOn{Handler: h.Handler.WithGroup(name), msg: h.msg, stop: h.stop}
}

// TestOtherBrokersLeaveOutThisNodesOwn: a node joined with --listen behind NAT
// listens on one address and advertises another; asked whether it was removed, it
// dialled its own broker at the first, heard no leader, and never stopped (a docs
// walkthrough). Neither is asked.
func TestOtherBrokersLeaveOutThisNodesOwn(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "others")})
	cfg, err := d.opts.Dir.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	advertised := cfg.Brokers[0]
	cfg.Listen = "127.0.0.71:17480"
	cfg.Brokers = []string{advertised, "127.0.0.9:7300"}
	if err := d.opts.Dir.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	d.cfg.Listen = cfg.Listen
	if got := d.otherBrokers(); !slices.Equal(got, []string{"127.0.0.9:7300"}) {
		t.Errorf("the other brokers: %v, want 127.0.0.9:7300 alone (not the address listened on, %s, nor the one advertised, %s)", got, cfg.Listen, advertised)
	}
}

// TestPendingTokensOfARemovalEndAtIt: a removal's advice names the nodes whose
// pending tokens list the removed node's broker, those minted while it was a
// member; a rerun named those minted after the removal too, whose tokens list the
// mesh as it was then, and cancelling them as advised would have cancelled a new
// machine's valid token (a docs walkthrough).
func TestPendingTokensOfARemovalEndAtIt(t *testing.T) {
	d := servingDaemon(t, Options{Dir: bootstrapped(t, "tokensuntil")})
	created := func(node string) (at time.Time) {
		d.fsm.Read(func(s *state.State) {
			for _, tk := range s.PendingTokens(node, d.now()) {
				at = tk.CreatedAt
			}
		})
		return at
	}
	mintFor(t, d, "web-1")
	first := created("web-1")
	time.Sleep(1100 * time.Millisecond) // creation times may be whole seconds
	mintFor(t, d, "web-2")
	if second := created("web-2"); !second.After(first) {
		t.Fatalf("minted %s, then %s: not later", first, second)
	}
	since := first.Add(-time.Minute)
	if got := d.pendingTokenNodes(since, first); !slices.Equal(got, []string{"web-1"}) {
		t.Errorf("tokens minted until the removal: %v, want web-1 alone", got)
	}
	if got := d.pendingTokenNodes(since, time.Time{}); !slices.Equal(got, []string{"web-1", "web-2"}) {
		t.Errorf("tokens minted since, no end: %v, want both", got)
	}
}
