package operator

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// startBroker runs a real nats-server on a loopback port; the operator client's
// retry logic depends only on how the broker answers a request nobody listens to.
func startBroker(t *testing.T) *nats.Conn {
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
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func TestCallWaitsForALeader(t *testing.T) {
	nc := startBroker(t)
	c := newClient(nc, 5*time.Second, 5*time.Second)
	// The API appears 300 ms after the call is made, as when a daemon is still
	// starting or an election is under way.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = nc.Subscribe(api.AdminSubject(api.OpPing), func(m *nats.Msg) {
			out, _ := json.Marshal(api.AdminResponse{Result: json.RawMessage(`{"mesh":"m"}`)})
			_ = m.Respond(out)
		})
	}()
	var res struct{ Mesh string }
	if err := c.Call(api.OpPing, struct{}{}, &res); err != nil {
		t.Fatalf("call during a leaderless moment: %v", err)
	}
	if res.Mesh != "m" {
		t.Fatalf("result %+v", res)
	}
}

func TestCallGivesUpWithoutALeader(t *testing.T) {
	nc := startBroker(t)
	for _, tc := range []struct {
		wait, atLeast, atMost time.Duration
	}{
		{wait: 400 * time.Millisecond, atLeast: 250 * time.Millisecond, atMost: 5 * time.Second},
		{wait: -1, atLeast: 0, atMost: 5 * time.Second},
	} {
		c := newClient(nc, 5*time.Second, tc.wait)
		start := time.Now()
		err := c.Call(api.OpPing, struct{}{}, nil)
		took := time.Since(start)
		if !errors.Is(err, ErrNoLeader) {
			t.Fatalf("wait %s: want ErrNoLeader, got %v", tc.wait, err)
		}
		if took < tc.atLeast || took > tc.atMost {
			t.Fatalf("wait %s: gave up after %s", tc.wait, took)
		}
	}
}

// A control node that takes a request and never answers (it stopped while serving
// it): the call ends after its timeout with ErrNoAnswer, and a change says that it
// may have been carried out.
func TestCallNobodyAnswers(t *testing.T) {
	nc := startBroker(t)
	for _, op := range []string{api.OpNodes, api.OpTokenCreate} {
		sub, err := nc.Subscribe(api.AdminSubject(op), func(*nats.Msg) {})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(nc, 300*time.Millisecond, time.Second)
		start := time.Now()
		err = c.Call(op, struct{}{}, nil)
		if !errors.Is(err, ErrNoAnswer) || errors.Is(err, ErrNoLeader) {
			t.Fatalf("%s: want ErrNoAnswer, got %v", op, err)
		}
		if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
			t.Fatalf("%s: gave up after %s, the timeout is 300ms", op, took)
		}
		mayHave := strings.Contains(err.Error(), "may have been carried out, or may still be")
		if mayHave == api.ReadOnly(op) {
			t.Fatalf("%s: %v", op, err)
		}
		_ = sub.Unsubscribe()
	}
}

// A leader that stops takes the requests it was serving with it. A read, or a token
// creation (answered with the token already minted, see state.TestCreateTokenRepeated),
// is sent again and the next control node answers it; a declaration is sent again
// under the request id of its first sending, marked as sent again (the control plane
// carries out one per id: daemon/TestADeclarationSentAgainIsCarriedOutOnce); any
// other change is never sent twice, because the one that took it may have carried
// it out.
func TestOnlyRepeatableRequestsAreSentAgain(t *testing.T) {
	nc := startBroker(t)
	for _, op := range []string{api.OpNodes, api.OpProgress, api.OpTokenCreate, api.OpDeclare, api.OpRevoke} {
		var (
			seen atomic.Int32
			mu   sync.Mutex
			got  []*nats.Msg
		)
		sub, err := nc.Subscribe(api.AdminSubject(op), func(m *nats.Msg) {
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
			if seen.Add(1) == 1 {
				return // the leader that stopped
			}
			out, _ := json.Marshal(api.AdminResponse{Result: json.RawMessage(`{}`)})
			_ = m.Respond(out)
		})
		if err != nil {
			t.Fatal(err)
		}
		c := newClient(nc, 2*time.Second, time.Second)
		c.firstAttempt = 100 * time.Millisecond
		start := time.Now()
		err = c.Call(op, struct{}{}, nil)
		took := time.Since(start)
		_ = sub.Unsubscribe()
		if api.Repeatable(op) {
			if err != nil || seen.Load() != 2 || took < 100*time.Millisecond || took > time.Second {
				t.Fatalf("repeatable %s: %v after %s, %d requests; want an answer to the second of 2", op, err, took, seen.Load())
			}
			continue
		}
		if api.Resendable(op) {
			if err != nil || seen.Load() != 2 || took < 250*time.Millisecond || took > time.Second {
				t.Fatalf("resendable %s: %v after %s, %d requests; want an answer to the second of 2, sent after 250 ms", op, err, took, seen.Load())
			}
			mu.Lock()
			first, second := got[0], got[1]
			mu.Unlock()
			id := first.Header.Get(api.RequestHeader)
			if api.CheckRequestID(id) != nil || second.Header.Get(api.RequestHeader) != id {
				t.Fatalf("%s: request ids %q then %q; want one id, the same at both sendings", op, id, second.Header.Get(api.RequestHeader))
			}
			var a, b api.AdminRequest
			if json.Unmarshal(first.Data, &a) != nil || json.Unmarshal(second.Data, &b) != nil || a.Again || !b.Again {
				t.Fatalf("%s: sent as %s then %s; want the second alone marked again", op, first.Data, second.Data)
			}
			continue
		}
		if !errors.Is(err, ErrNoAnswer) || seen.Load() != 1 || took < 2*time.Second {
			t.Fatalf("change %s: %v after %s, %d requests; want ErrNoAnswer after the 2s timeout and 1 request", op, err, took, seen.Load())
		}
	}
}

// Each attempt of a read waits twice as long as the one before, so a slow leader is
// asked a few times, not once per first attempt's length: within 1 s, attempts of
// 100, 200 and 400 ms and the 300 ms left.
func TestReadAttemptsDouble(t *testing.T) {
	nc := startBroker(t)
	var seen atomic.Int32
	sub, err := nc.Subscribe(api.AdminSubject(api.OpNodes), func(*nats.Msg) { seen.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := newClient(nc, time.Second, time.Second)
	c.firstAttempt = 100 * time.Millisecond
	err = c.Call(api.OpNodes, struct{}{}, nil)
	if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "within 1s") {
		t.Fatalf("want ErrNoAnswer within 1s, got %v", err)
	}
	if n := seen.Load(); n != 4 {
		t.Fatalf("%d requests in 1s; want 4 (100, 200, 400 ms, then the rest)", n)
	}
}

// TestLookAtNamesWhereAChangeShows: a change whose answer was lost says where to
// look for it: the token list for tokens, the keyring's status for the signing key,
// the control plane's status for control nodes, the roster for the rest (every
// message said "meshctl nodes, meshctl token list", an operations audit found).
func TestLookAtNamesWhereAChangeShows(t *testing.T) {
	for op, want := range map[string]string{
		api.OpTokenCreate: "token list", api.OpTokenCancel: "token list",
		api.OpSigningKeyRotate: "signing-key status", api.OpSigningKeyRetire: "signing-key status",
		api.OpControlRemove: "control status", api.OpControlAdd: "control status",
		api.OpDeclare: "meshctl nodes", api.OpRevoke: "meshctl nodes", api.OpLabel: "meshctl nodes",
	} {
		if got := LookAt(op); !strings.Contains(got, want) {
			t.Errorf("%s: look at %s, want %s", op, got, want)
		}
	}
}

// TestAnAnswerOfNeitherResultNorErrorIsSaid: an answer with no result and no error
// (a control plane that could not write its answer) or a result that cannot be
// read ends the call with an internal error saying so, not json's "unexpected end
// of JSON input".
func TestAnAnswerOfNeitherResultNorErrorIsSaid(t *testing.T) {
	nc := startBroker(t)
	for _, c := range []struct{ answer, want string }{
		{`{"v":2}`, "no result and no error"},
		{`{"v":2,"result":[1]}`, "cannot be read"},
	} {
		sub, err := nc.Subscribe(api.AdminSubject(api.OpNodes), func(m *nats.Msg) { _ = m.Respond([]byte(c.answer)) })
		if err != nil {
			t.Fatal(err)
		}
		var res api.NodesResult
		err = newClient(nc, 5*time.Second, 5*time.Second).Call(api.OpNodes, api.NodesRequest{}, &res)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeInternal || !strings.Contains(ae.Message, c.want) {
			t.Errorf("answer %s: %v, want an internal error saying %q", c.answer, err, c.want)
		}
		_ = sub.Unsubscribe()
	}
}

// TestSendingNamesEachChangeSent: the client tells its caller the op of a request
// that may change the mesh before sending it, and not of a read or a dry run: a
// meshctl interrupted before then says it changed nothing.
func TestSendingNamesEachChangeSent(t *testing.T) {
	nc := startBroker(t)
	for _, op := range []string{api.OpNodes, api.OpDeclare, api.OpRevoke} {
		_, err := nc.Subscribe(api.AdminSubject(op), func(m *nats.Msg) { _ = m.Respond([]byte(`{"v":2,"result":{}}`)) })
		if err != nil {
			t.Fatal(err)
		}
	}
	var sent []string
	c := newClient(nc, 5*time.Second, 5*time.Second)
	c.sending = func(op string) { sent = append(sent, op) }
	for _, call := range []struct {
		op  string
		req any
	}{
		{api.OpNodes, api.NodesRequest{}},
		{api.OpDeclare, api.DeclareRequest{All: true, Body: json.RawMessage(`{}`), DryRun: true}},
		{api.OpDeclare, api.DeclareRequest{All: true, Body: json.RawMessage(`{}`)}},
		{api.OpRevoke, api.RevokeRequest{Node: "web-1"}},
	} {
		var res json.RawMessage
		if err := c.Call(call.op, call.req, &res); err != nil {
			t.Fatalf("%s: %v", call.op, err)
		}
	}
	if got := strings.Join(sent, " "); got != "declare revoke" {
		t.Errorf("changes named as sent: %q, want the declaration (not its dry run) and the revocation", got)
	}
}

// TestARequestIDGivenGoesAtEverySending (audit of commands run twice, finding 7): a
// script retrying a declaration across processes had no way to send it under the id
// of its first attempt. CallRequest sends it under the id given, marked, at every
// sending the first included, as one that may repeat an earlier one: a control plane
// that cannot record ids then refuses it rather than carry it out without. One older
// than the mark refuses it, and the call says that nothing was carried out.
func TestARequestIDGivenGoesAtEverySending(t *testing.T) {
	nc := startBroker(t)
	id := "0123456789abcdef0123456789abcdef"
	var got atomic.Pointer[nats.Msg]
	sub, err := nc.Subscribe(api.AdminSubject(api.OpDeclare), func(m *nats.Msg) {
		got.Store(m)
		out, _ := json.Marshal(api.AdminResponse{Result: json.RawMessage(`{}`)})
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(nc, 2*time.Second, time.Second)
	if err := c.CallRequest(api.OpDeclare, id, true, struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	var req api.AdminRequest
	if m := got.Load(); m == nil || m.Header.Get(api.RequestHeader) != id || json.Unmarshal(m.Data, &req) != nil || !req.Again {
		t.Fatalf("sent %+v; want request id %s, marked again", m, id)
	}
	if err := c.CallRequest(api.OpRevoke, id, true, struct{}{}, nil); err == nil {
		t.Fatal("a request id given to a change not sent under one was taken")
	}
	if err := c.CallRequest(api.OpDeclare, "3f6c", true, struct{}{}, nil); !errors.Is(err, api.ErrRequestID) {
		t.Fatalf("a malformed id: %v", err)
	}
	_ = sub.Unsubscribe()
	// A control plane older than the mark.
	if _, err := nc.Subscribe(api.AdminSubject(api.OpDeclare), func(m *nats.Msg) {
		out, _ := json.Marshal(api.AdminResponse{Error: &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: json: unknown field "again"`}})
		_ = m.Respond(out)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.CallRequest(api.OpDeclare, id, true, struct{}{}, nil); !errors.Is(err, ErrRequestIDRefused) || !strings.Contains(err.Error(), "nothing was carried out") {
		t.Fatalf("an older control plane: %v", err)
	}
}

// TestASlowAnswerIsSaid (audit of the command line, finding 11): a leader that hung
// held meshctl silent for the whole --timeout. Once a call has waited SlowAnswer,
// Waiting is told, once, with the op and the call's timeout; a call answered at once
// tells nothing.
func TestASlowAnswerIsSaid(t *testing.T) {
	nc := startBroker(t)
	for op, delay := range map[string]time.Duration{api.OpNodes: 0, api.OpRevoke: SlowAnswer + 500*time.Millisecond} {
		_, err := nc.Subscribe(api.AdminSubject(op), func(m *nats.Msg) {
			time.Sleep(delay)
			_ = m.Respond([]byte(`{"v":2,"result":{}}`))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var told []string
	c := newClient(nc, 10*time.Second, 5*time.Second)
	c.waiting = func(op string, timeout time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, op+" "+timeout.String())
	}
	for _, call := range []struct {
		op  string
		req any
	}{{api.OpNodes, api.NodesRequest{}}, {api.OpRevoke, api.RevokeRequest{Node: "web-1"}}} {
		var res json.RawMessage
		if err := c.Call(call.op, call.req, &res); err != nil {
			t.Fatalf("%s: %v", call.op, err)
		}
	}
	time.Sleep(SlowAnswer + 100*time.Millisecond) // a timer left running would tell now
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(told, ", "); got != "revoke 10s" {
		t.Errorf("told %q, want the slow revocation alone, once, with its timeout", got)
	}
}
