package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestHostileMessagesToTheControlPlane: malformed, truncated, oversized, wrong-version
// and forged messages on the enrolment, sync and status subjects each get a clear
// refusal (or are dropped and logged), nothing is recorded, and the control plane
// keeps serving.
func TestHostileMessagesToTheControlPlane(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "hostile")
	serve := cp.Serve()
	text := cp.Token("web-1")
	tok, err := tokenfmt.Parse(text, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := datadir.Dir(cp.Dir).LoadConfig()
	pin, _ := cfg.Pin()
	enc := tok.Encode()
	secret := enc[len(enc)-9-64 : len(enc)-9]
	nc, err := nats.Connect("tls://"+cp.Listen, nats.Secure(pki.PinnedClientConfig(pin)), nats.TLSHandshakeFirst(),
		nats.UserInfo("enrol:web-1", secret), nats.CustomInboxPrefix("_INBOX.enrol.web-1"), nats.NoReconnect())
	if err != nil {
		t.Fatalf("enrolling connection: %v", err)
	}
	defer nc.Close()
	ask := func(data []byte) api.EnrolResponse {
		t.Helper()
		m, err := nc.Request("mesh.enrol.web-1", data, 10*time.Second)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		var r api.EnrolResponse
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	kp, _ := nkeys.CreateUser()
	someone, _ := kp.PublicKey()
	good := api.EnrolRequest{V: 1, Mesh: "hostile", Node: "web-1", Role: "worker", Secret: secret, PublicKey: "UBADKEY", KeyProof: "AAAA"}
	mk := func(edit func(*api.EnrolRequest)) []byte {
		r := good
		edit(&r)
		b, _ := json.Marshal(r)
		return b
	}
	cases := []struct {
		name, want string
		data       []byte
	}{
		{"garbage", "malformed", []byte("\x00\x01 not json")},
		{"truncated", "malformed", []byte(`{"v":1,"mesh":"hostile","node":"web-`)},
		{"oversized", "exceeds", []byte(`{"v":1,"pad":"` + strings.Repeat("x", 100<<10) + `"}`)},
		{"another protocol version", "version", mk(func(r *api.EnrolRequest) { r.V = 2 })},
		{"another node on this subject", "names node", mk(func(r *api.EnrolRequest) { r.Node = "web-2" })},
		{"not an nkey", "public_key", mk(func(r *api.EnrolRequest) {})},
		{"a key it cannot prove", "key_proof", mk(func(r *api.EnrolRequest) { r.PublicKey = someone }) /* proof "AAAA" */},
		{"a malformed secret", "secret", mk(func(r *api.EnrolRequest) { r.Secret = "zz" })},
	}
	for _, c := range cases {
		r := ask(c.data)
		if r.OK || r.Error == nil || r.Error.Code != api.CodeBadRequest || !strings.Contains(r.Error.Message, c.want) {
			t.Errorf("%s: answered %+v, want bad_request mentioning %q", c.name, r.Error, c.want)
		}
	}
	if _, ok := cp.Node("web-1"); ok {
		t.Fatal("a hostile enrolment request recorded the node")
	}

	// A node sends hostile sync and status messages on its own subjects.
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(text); r.Code != 0 {
		t.Fatalf("the genuine enrolment after the hostile ones: %s", r.Combined())
	}
	errs := make(chan error, 4)
	node := nodeConn(t, cp.Dir, h.State, cp.Listen, errs)
	for _, data := range [][]byte{[]byte("garbage"), []byte(`{"v":9}`), []byte(`{"v":1,"applied_version":`)} {
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
	for _, data := range [][]byte{
		[]byte("garbage"),
		[]byte(`{"v":1,"node":"web-2","have_applied":true,"applied_version":7}`), // claims another node
		[]byte(`{"v":1,"node":"web-1","pad":"` + strings.Repeat("x", 100<<10) + `"}`),
	} {
		node.Publish("mesh.node.web-1.status", data)
	}
	node.Flush()
	harness.Eventually(t, 10*time.Second, "the control plane logs the refused reports", func() bool {
		out := serve.Output()
		return strings.Count(out, "status report refused") >= 2 && strings.Contains(out, "names another node")
	})
	if n, _ := cp.Node("web-1"); n.Applied != nil && *n.Applied == 7 {
		t.Fatal("a forged status was recorded")
	}
	if r := cp.Ctl("nodes"); r.Code != 0 {
		t.Fatalf("the control plane stopped serving: %s", r.Combined())
	}
}
