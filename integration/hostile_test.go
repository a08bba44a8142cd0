package integration

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// enrollingConn connects as an enrolling client holding tok, presenting kp as the node
// key it would register: the only way the broker admits one.
func enrollingConn(t *testing.T, cp *harness.ControlPlane, tok tokenfmt.Token, kp nkeys.KeyPair) *nats.Conn {
	t.Helper()
	return enrollingConnWithErrors(t, cp, tok, kp, nil)
}

// TestHostileMessagesToTheControlPlane: malformed, truncated, oversized, wrong-version
// and forged messages on the enrolment, sync and status subjects. A request whose
// reply subject cannot be shown to be the requester's own (no proof of the key its
// inbox is bound to) is dropped unanswered; every other one is answered with a
// refusal naming the fault. Nothing is recorded, every refusal is counted in the
// metrics, the log gets lines at a bounded rate, and the control plane keeps serving.
func TestHostileMessagesToTheControlPlane(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hostile")
	serve := cp.Serve()
	text := cp.Token("web-1")
	tok, err := tokenfmt.Parse(text, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	nc := enrollingConn(t, cp, tok, kp)
	ask := func(data []byte, wait time.Duration) (api.EnrolResponse, error) {
		t.Helper()
		m, err := nc.Request("mesh.enrol.web-1", data, wait)
		if err != nil {
			return api.EnrolResponse{}, err
		}
		var r api.EnrolResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r, nil
	}
	proof := func(key nkeys.KeyPair, mesh, node string) string {
		p, _ := key.PublicKey()
		sig, _ := key.Sign(api.KeyProofMessage(mesh, node, p))
		return base64.StdEncoding.EncodeToString(sig)
	}
	good := api.EnrolRequest{V: api.ProtocolVersion, Mesh: "hostile", Node: "web-1", Role: "worker", Secret: hexSecret(tok),
		PublicKey: pub, KeyProof: proof(kp, "hostile", "web-1"),
		CAPin: hex.EncodeToString(tok.CAPin[:]), SigningKey: hex.EncodeToString(tok.SigningKey)}
	mk := func(edit func(*api.EnrolRequest)) []byte {
		r := good
		edit(&r)
		b, _ := json.Marshal(r)
		return b
	}
	someone, _ := nkeys.CreateUser()
	someonePub, _ := someone.PublicKey()

	// Requests that cannot show the reply is theirs: no answer, counted.
	dropped := []struct {
		name   string
		data   []byte
		reason string
	}{
		{"garbage", []byte("\x00\x01 not json"), "malformed"},
		{"truncated", []byte(`{"v":2,"mesh":"hostile","node":"web-`), "malformed"},
		{"another protocol version", mk(func(r *api.EnrolRequest) { r.V = 1 }), "malformed"},
		{"oversized", []byte(`{"v":2,"pad":"` + strings.Repeat("x", 20<<10) + `"}`), "too_large"},
		{"another key than the inbox's", mk(func(r *api.EnrolRequest) { r.PublicKey, r.KeyProof = someonePub, proof(someone, "hostile", "web-1") }), "foreign_reply"},
		{"a key it cannot prove", mk(func(r *api.EnrolRequest) { r.KeyProof = proof(someone, "hostile", "web-1") }), "bad_proof"},
	}
	for _, c := range dropped {
		before := cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason="+c.reason)
		if r, err := ask(c.data, 700*time.Millisecond); err == nil {
			t.Errorf("%s: answered %+v, want no answer", c.name, r)
		}
		harness.Eventually(t, 5*time.Second, c.name+" counted as "+c.reason, func() bool {
			return cp.Counter("mesh_control_messages_dropped_total", "subject=enrol", "reason="+c.reason) == before+1
		})
	}

	// Requests it can answer, each refused with the reason.
	otherPin := tok.CAPin
	otherPin[0] ^= 1
	answered := []struct {
		name, code, want string
		data             []byte
	}{
		{"another node on this subject", api.CodeBadRequest, "names node", mk(func(r *api.EnrolRequest) {
			r.Node, r.KeyProof = "web-2", proof(kp, "hostile", "web-2")
		})},
		{"a malformed secret", api.CodeBadRequest, "secret", mk(func(r *api.EnrolRequest) { r.Secret = "zz" })},
		{"the pin of another mesh", api.CodeTokenOtherMesh, "another CA", mk(func(r *api.EnrolRequest) { r.CAPin = hex.EncodeToString(otherPin[:]) })},
		{"a signing key the mesh does not hold", api.CodeTokenStaleKey, "signing key", mk(func(r *api.EnrolRequest) { r.SigningKey = strings.Repeat("ab", 32) })},
	}
	for _, c := range answered {
		r, err := ask(c.data, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", c.name, err)
		}
		if r.OK || r.Error == nil || r.Error.Code != c.code || !strings.Contains(r.Error.Message, c.want) {
			t.Errorf("%s: answered %+v, want %s mentioning %q", c.name, r.Error, c.code, c.want)
		}
		if cp.Counter("mesh_control_requests_refused_total", "subject=enrol", "reason="+c.code) == 0 {
			t.Errorf("%s: the refusal is not counted", c.name)
		}
	}
	if _, ok := cp.Node("web-1"); ok {
		t.Fatal("a hostile enrolment request recorded the node")
	}

	// A node sends hostile sync and status messages on its own subjects.
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(text); r.Code != 0 {
		t.Fatalf("the genuine enrolment after the hostile ones (a token refused for its pin or key is not consumed): %s", r.Combined())
	}
	errs := make(chan error, 4)
	node := nodeConn(t, cp.Dir, h.State, cp.Listen, errs)
	for _, data := range [][]byte{[]byte("garbage"), []byte(`{"v":9}`), []byte(`{"v":2,"applied_version":`)} {
		m, err := node.Request("mesh.node.web-1.sync", data, 10*time.Second)
		if err != nil {
			t.Fatalf("sync %q: %v", data, err)
		}
		var r api.SyncResponse
		json.Unmarshal(m.Data, &r)
		if r.Error == nil || r.Error.Code != api.CodeBadRequest || r.Sent != 0 {
			t.Errorf("sync %q answered %+v", data, r)
		}
	}
	before := cp.Counter("mesh_control_messages_dropped_total", "subject=status")
	for _, data := range [][]byte{
		[]byte("garbage"),
		[]byte(`{"v":2,"node":"web-2","have_applied":true,"applied_version":7}`), // claims another node
	} {
		node.Publish("mesh.node.web-1.status", data)
	}
	node.Flush()
	harness.Eventually(t, 10*time.Second, "the refused reports counted", func() bool {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=malformed") >= 1 &&
			cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=other_node") >= 1
	})
	if got := cp.Counter("mesh_control_messages_dropped_total", "subject=status"); got != before+2 {
		t.Errorf("%v status reports counted as dropped, want %v", got, before+2)
	}
	if n, _ := cp.Node("web-1"); n.Applied != nil && *n.Applied == 7 {
		t.Fatal("a forged status was recorded")
	}
	// Bounded logging: many more refusals than log lines.
	for range 50 {
		node.Publish("mesh.node.web-1.status", []byte("garbage"))
	}
	node.Flush()
	harness.Eventually(t, 10*time.Second, "the flood counted", func() bool {
		return cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=malformed") >= 51
	})
	if lines := strings.Count(serve.Output(), "message dropped"); lines > 15 {
		t.Errorf("%d log lines for about 60 dropped messages: the log is not bounded", lines)
	}

	// A node's error text is read by operators in a terminal: a code that is not a
	// short word is refused, escape sequences in a message are kept written out
	// and the message cut. Before, a 7 KiB code and these bytes went to
	// `meshctl nodes` as they were: the screen cleared, a line overwritten, the
	// window's title set.
	malformed := cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=malformed")
	escapes := "\x1b]0;pwned\x07\x1b[2J\x1b[H"
	report := func(code, message string) []byte {
		b, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "web-1", Error: &api.StatusError{Code: code, Message: message, Version: 99}})
		return b
	}
	node.Publish("mesh.node.web-1.status", report(escapes+"fake_ok"+strings.Repeat("a", 7000), "x"))
	node.Publish("mesh.node.web-1.status", report("apply_failed", "line\rOVERWRITTEN "+escapes+"\u202egnp.exe "+strings.Repeat("b", 7000)))
	node.Flush()
	harness.Eventually(t, 10*time.Second, "the report with a hostile code refused, the other recorded", func() bool {
		n, _ := cp.Node("web-1")
		return cp.Counter("mesh_control_messages_dropped_total", "subject=status", "reason=malformed") == malformed+1 &&
			n.LastError != nil && n.LastError.Code == "apply_failed"
	})
	n, _ := cp.Node("web-1")
	if m := n.LastError.Message; len(m) > api.MaxStatusMessageLen || strings.ContainsAny(m, "\x1b\x07\r\u202e") ||
		!strings.HasPrefix(m, `line OVERWRITTEN \x1b]0;pwned\a\x1b[2J\x1b[H\u202egnp.exe bbb`) {
		t.Errorf("the message kept is %q", m)
	}
	r := cp.Ctl("nodes")
	if r.Code != 0 {
		t.Fatalf("the control plane stopped serving: %s", r.Combined())
	}
	if strings.ContainsAny(r.Stdout, "\x1b\x07\r\u202e") || strings.Contains(r.Stdout, "fake_ok") {
		t.Errorf("meshctl nodes printed what a node sent as it was:\n%q", r.Stdout)
	}
}
