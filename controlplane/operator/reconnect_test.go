package operator

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/pki"
	"mesh/tokenfmt"
)

// twoBrokers starts two brokers under one CA, and returns their addresses, the
// servers and the CA file.
func twoBrokers(t *testing.T) ([]string, []*server.Server, string) {
	t.Helper()
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	var servers []*server.Server
	for _, name := range []string{"cp-1", "cp-2"} {
		s := brokerOf(t, ca, name, func(*server.Options) {})
		addrs = append(addrs, s.Addr().String())
		servers = append(servers, s)
	}
	return addrs, servers, caFileOf(t, ca)
}

// answer subscribes, on a plain connection to addr, a responder for op: it answers
// with an empty result, or never when silent.
func answer(t *testing.T, addr, caFile, op string, silent bool) {
	t.Helper()
	e, err := CAEndpoint([]string{addr}, credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := c.nc.Subscribe(api.AdminSubject(op), func(m *nats.Msg) {
		if !silent {
			data, _ := json.Marshal(api.AdminResponse{V: api.ProtocolVersion, Result: json.RawMessage(`{}`)})
			_ = m.Respond(data)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestABrokerStoppingUnderACall: the broker meshctl is connected to stops while a
// call waits for its answer. A read (or a token creation) is answered through
// another broker of the list, sent again there; with no broker left, a change says
// the connection was lost and that it may have been carried out (exit 3). Before,
// every call ended "nats: connection closed", exit 1, whether or not a change went
// through, and a token creation was not sent again.
func TestABrokerStoppingUnderACall(t *testing.T) {
	addrs, servers, caFile := twoBrokers(t)
	answer(t, addrs[0], caFile, api.OpNodes, true) // takes it, and stops before answering
	answer(t, addrs[1], caFile, api.OpNodes, false)
	e, err := CAEndpoint(addrs, credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{Timeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.firstAttempt = 500 * time.Millisecond
	time.AfterFunc(200*time.Millisecond, servers[0].Shutdown)
	if err := c.Call(api.OpNodes, api.NodesRequest{}, nil); err != nil {
		t.Fatalf("a read whose broker stopped, another in the list: %v", err)
	}

	// One broker, which stops under a change.
	lone, loneServers, loneCA := twoBrokers(t)
	answer(t, lone[0], loneCA, api.OpRevoke, true)
	e, err = CAEndpoint(lone[:1], credsFile(t), loneCA)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := DialEndpoint(e, Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	time.AfterFunc(200*time.Millisecond, loneServers[0].Shutdown)
	start := time.Now()
	err = c2.Call(api.OpRevoke, api.RevokeRequest{Nodes: []string{"web-1"}}, nil)
	if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "may have carried it out") {
		t.Fatalf("a change whose only broker stopped: %v, want ErrConnectionLost saying it may have been carried out", err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the lost connection was said after %s", took)
	}
}

// TestAChangeWhoseBrokerStopsIsToldAtOnce: the broker meshctl sent a change through
// stops (a control node restarted in a rolling restart) and another broker of the
// list takes the connection over. The answer comes back only through the broker the
// request went in by, so it is lost: the call says so within a few seconds, that the
// connection was lost and the change may have been carried out (exit 3), instead of
// waiting its whole timeout and blaming a control node that stopped. Before, it
// waited the timeout (15 s by default).
func TestAChangeWhoseBrokerStopsIsToldAtOnce(t *testing.T) {
	addrs, servers, caFile := twoBrokers(t)
	answer(t, addrs[0], caFile, api.OpRevoke, true) // takes it, and stops before answering
	e, err := CAEndpoint(addrs, credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	const timeout = 20 * time.Second
	c, err := DialEndpoint(e, Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(200*time.Millisecond, servers[0].Shutdown)
	start := time.Now()
	err = c.Call(api.OpRevoke, api.RevokeRequest{Nodes: []string{"web-1"}}, nil)
	took := time.Since(start)
	if !errors.Is(err, ErrConnectionLost) || !strings.Contains(err.Error(), "may have carried it out") {
		t.Fatalf("a change whose broker stopped, another in the list: %v, want ErrConnectionLost saying it may have been carried out", err)
	}
	if took > timeout/2 {
		t.Errorf("the lost answer was said after %s, the call's timeout being %s", took, timeout)
	}
	if !c.nc.IsConnected() || c.nc.ConnectedAddr() != addrs[1] {
		t.Errorf("the connection is not on the other broker: connected %v to %s", c.nc.IsConnected(), c.nc.ConnectedAddr())
	}
}

// TestADeclarationWhoseBrokerStopsIsSentAgain: as above, with a declaration, which
// goes under a request id the control plane carries out once: it is sent again at
// once through the broker that took the connection over, marked as sent again under
// the same id, and that answer is the call's. Before, the call ended "may have been
// carried out" (exit 3) and the operator looked.
func TestADeclarationWhoseBrokerStopsIsSentAgain(t *testing.T) {
	addrs, servers, caFile := twoBrokers(t)
	answer(t, addrs[0], caFile, api.OpDeclare, true) // takes it, and stops before answering
	got := make(chan *nats.Msg, 4)
	e1, err := CAEndpoint(addrs[1:], credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	other, err := DialEndpoint(e1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.nc.Subscribe(api.AdminSubject(api.OpDeclare), func(m *nats.Msg) {
		got <- m
		res, _ := json.Marshal(api.DeclareResult{Assignments: []api.Assignment{{Node: "web-1", Version: 2}}, Repeated: true})
		data, _ := json.Marshal(api.AdminResponse{V: api.ProtocolVersion, Result: res})
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e, err := CAEndpoint(addrs, credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.nc.ConnectedAddr() != addrs[0] {
		t.Fatalf("connected to %s; the test needs the first broker", c.nc.ConnectedAddr())
	}
	time.AfterFunc(200*time.Millisecond, servers[0].Shutdown)
	start := time.Now()
	var res api.DeclareResult
	err = c.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"web-1"}, Body: json.RawMessage(`{}`)}, &res)
	if err != nil || !res.Repeated || len(res.Assignments) != 1 {
		t.Fatalf("a declaration whose broker stopped: %v, %+v; want the answer to its sending again", err, res)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("answered after %s; want it sent again at once (within the 1 s grace)", took)
	}
	m := <-got
	var req api.AdminRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || !req.Again || api.CheckRequestID(m.Header.Get(api.RequestHeader)) != nil {
		t.Fatalf("sent again as %s (id %q); want it marked again under its request id", m.Data, m.Header.Get(api.RequestHeader))
	}
}

// TestADeclarationSentAgainToAnOlderControlPlane: a control plane older than the mark
// refuses a request it does not know as malformed (bad_request, nothing carried
// out), but the first sending, whose answer was lost, may have been: the call says
// that (ErrConnectionLost, exit 3), not that the declaration is malformed (exit 4).
func TestADeclarationSentAgainToAnOlderControlPlane(t *testing.T) {
	nc := startBroker(t)
	var seen atomic.Int32
	sub, err := nc.Subscribe(api.AdminSubject(api.OpDeclare), func(m *nats.Msg) {
		if seen.Add(1) == 1 {
			return // the leader that stopped
		}
		// As an older control plane decodes it: strictly, without the mark.
		var old struct {
			V    int             `json:"v"`
			Op   string          `json:"op"`
			Args json.RawMessage `json:"args"`
		}
		dec := json.NewDecoder(bytes.NewReader(m.Data))
		dec.DisallowUnknownFields()
		oerr := dec.Decode(&old)
		if oerr == nil {
			t.Errorf("an older control plane would read %s as a declaration", m.Data)
			return
		}
		data, _ := json.Marshal(api.AdminResponse{V: api.ProtocolVersion, Error: &api.Error{Code: api.CodeBadRequest, Message: "not a request for this operation: " + oerr.Error()}})
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c := newClient(nc, 2*time.Second, time.Second)
	c.firstAttempt = 100 * time.Millisecond
	err = c.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"web-1"}, Body: json.RawMessage(`{}`)}, nil)
	var ae *api.Error
	if !errors.Is(err, ErrConnectionLost) || errors.As(err, &ae) || !strings.Contains(err.Error(), "may have been carried out") {
		t.Fatalf("a declaration sent again to an older control plane: %v; want ErrConnectionLost, the first may have been carried out", err)
	}
}

// TestAMintAnsweredWithAnotherCAIsRefused: a token pins the CA hosts will trust, so
// it takes the CA this connection proved, and an answer naming another (a machine
// holding a leaf of the mesh's CA, a removed control node's, answering token
// creations itself) makes no token. Before, the pin was copied from the answer.
func TestAMintAnsweredWithAnotherCAIsRefused(t *testing.T) {
	addrs, _, caFile := twoBrokers(t)
	e, err := CAEndpoint(addrs[:1], credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherPin := pki.PinOf(other.Cert)
	signing := bytes.Repeat([]byte{7}, 32)
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, pin := range [][32]byte{otherPin, e.Pin} {
		sub, err := c.nc.Subscribe(api.AdminSubject(api.OpTokenCreate), func(m *nats.Msg) {
			res, _ := json.Marshal(api.TokenCreateResult{Mesh: "m", Brokers: addrs[:1], CAPin: hex.EncodeToString(pin[:]),
				SigningKey: hex.EncodeToString(signing), Expiry: time.Now().Add(time.Hour)})
			data, _ := json.Marshal(api.AdminResponse{V: api.ProtocolVersion, Result: res})
			_ = m.Respond(data)
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.MintToken("web-1", tokenfmt.RoleWorker, 15*time.Minute, nil)
		if pin == otherPin && !errors.Is(err, ErrPinMismatch) {
			t.Errorf("an answer pinning another CA: %v, want ErrPinMismatch", err)
		}
		if pin == e.Pin && err != nil {
			t.Errorf("an answer pinning the CA the connection proved: %v", err)
		}
		_ = sub.Unsubscribe()
	}
}

// TestAChangeNotDoneIsSentAgain: a control node that no longer leads (it handed its
// leadership over, as a leader stopped in a rolling restart does) refuses a change
// saying nothing was done (AdminResponse.NotDone): the call sends it again, and the
// leader's answer is the call's. A refusal without NotDone (the leadership lost
// after the change reached the log: it may be committed) is not sent again.
func TestAChangeNotDoneIsSentAgain(t *testing.T) {
	addrs, _, caFile := twoBrokers(t)
	e, err := CAEndpoint(addrs[:1], credsFile(t), caFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, notDone := range []bool{true, false} {
		var calls atomic.Int32
		sub, err := c.nc.Subscribe(api.AdminSubject(api.OpRevoke), func(m *nats.Msg) {
			resp := api.AdminResponse{V: api.ProtocolVersion, Result: json.RawMessage(`{"revoked":[]}`)}
			if calls.Add(1) == 1 {
				resp = api.AdminResponse{V: api.ProtocolVersion, NotDone: notDone,
					Error: &api.Error{Code: api.CodeUnavailable, Message: "control node cp-1 no longer leads"}}
			}
			data, _ := json.Marshal(resp)
			_ = m.Respond(data)
		})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Call(api.OpRevoke, api.RevokeRequest{Nodes: []string{"web-1"}}, nil)
		switch {
		case notDone && (err != nil || calls.Load() != 2):
			t.Errorf("a change not done: %v after %d calls, want it sent again and answered", err, calls.Load())
		case !notDone && (err == nil || calls.Load() != 1):
			t.Errorf("a change that may be done: %v after %d calls, want the refusal, sent once", err, calls.Load())
		}
		_ = sub.Unsubscribe()
	}
}
