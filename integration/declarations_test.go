package integration

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/declarations"
	"mesh/integration/harness"
)

// TestInjectedDeclarationsRejected: a hostile broker (one holding the mesh's own TLS
// identity, routed into its cluster) records what the control plane sends and
// publishes into a host's subject a declaration signed by another key, an older one
// replayed, one addressed to another node, a forged revocation notice, an expired one
// signed by the mesh's own key, an oversized one and garbage. Each is rejected with
// its own error, nothing is applied, and the agent keeps running with its state.
func TestInjectedDeclarationsRejected(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "inject")
	cp.Serve()
	hb := harness.StartHostileBroker(t, cp)

	hosts := map[string]*harness.Host{}
	agentMetrics := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	for _, id := range []string{"web-1", "web-2"} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		h.RouteThrough(hb.Addr())
		if id == "web-1" {
			h.Run("--metrics-listen", agentMetrics)
		} else {
			h.Run()
		}
		hosts[id] = h
	}
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(node, content string) {
		writeFile(t, body, `{"files":[{"path":"app.conf","content":"`+content+`"}]}`)
		if r := cp.Ctl("declare", "--node", node, "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	declare("web-1", "one")
	declare("web-2", "two")
	cp.WaitConverged("web-1", 1, 20*time.Second)
	cp.WaitConverged("web-2", 1, 20*time.Second)
	declare("web-1", "one-b")
	cp.WaitConverged("web-1", 2, 20*time.Second)

	web1v1 := envelopeWithVersion(t, hb.Captured("web-1"), 1)
	web2v1 := envelopeWithVersion(t, hb.Captured("web-2"), 1)

	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	web1Key := hosts["web-1"].PublicKey()
	forged, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "inject", Node: "web-1", NodeKey: web1Key, Version: 99, KeyringEpoch: 1,
		IssuedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(),
		Body: declarations.Body{Files: []declarations.File{{Path: "app.conf", Content: ptr("owned")}}},
	}, otherKey)
	if err != nil {
		t.Fatal(err)
	}

	meshKey, err := datadir.Dir(cp.Dir).LoadSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	expired, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "inject", Node: "web-1", NodeKey: web1Key, Version: 50, KeyringEpoch: 1,
		IssuedAt: time.Now().Add(-48 * time.Hour).UTC(), ExpiresAt: time.Now().Add(-24 * time.Hour).UTC(),
		Body: declarations.Body{Files: []declarations.File{{Path: "app.conf", Content: ptr("stale")}}},
	}, meshKey)
	if err != nil {
		t.Fatal(err)
	}
	forgedRevocation, err := declarations.SignRevocation(declarations.Revocation{Mesh: "inject", Node: "web-1", NodeKey: web1Key, RevokedAt: time.Now().UTC()}, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	oversized := append([]byte(`{"payloadType":"`), bytes.Repeat([]byte("A"), declarations.MaxEnvelopeSize+1024)...)

	attacks := []struct {
		name, code string
		envelope   []byte
	}{
		{"signed by another key", "untrusted", forged},
		{"older declaration replayed", "rolled_back", web1v1},
		{"addressed to another node", "wrong_audience", web2v1},
		{"revocation notice signed by another key", "untrusted", forgedRevocation},
		{"expired, signed by the mesh", "expired", expired},
		{"oversized", "too_large", oversized},
		{"garbage bytes", "malformed", []byte("\x00\xffnot an envelope")},
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("web-1's agent:\n%s", hosts["web-1"].Process().Output())
		}
	})
	for _, a := range attacks {
		hb.InjectUntil(t, "web-1", a.envelope, 15*time.Second, a.name+" reported as "+a.code, func() bool {
			n, _ := cp.Node("web-1")
			return n.LastError != nil && n.LastError.Code == a.code
		})
		n, _ := cp.Node("web-1")
		if n.Applied == nil || *n.Applied != 2 {
			t.Fatalf("%s: applied version moved to %v", a.name, n.Applied)
		}
		if got, _ := hosts["web-1"].ReadManaged("app.conf"); got != "one-b" {
			t.Fatalf("%s: app.conf = %q, the injected declaration was applied", a.name, got)
		}
		if hosts["web-1"].Process().Exited() {
			t.Fatalf("%s: the agent stopped:\n%s", a.name, hosts["web-1"].Process().Output())
		}
		// The agent counts each refusal under the code it reported.
		if got := harness.Sum(harness.Scrape(t, "http://"+agentMetrics+"/metrics"), "mesh_agent_envelopes_refused_total", "code="+a.code); got < 1 {
			t.Fatalf("%s: mesh_agent_envelopes_refused_total{code=%q} = %v on the agent", a.name, a.code, got)
		}
	}
	// The mesh still reaches the node afterwards.
	declare("web-1", "three")
	cp.WaitConverged("web-1", 3, 20*time.Second)
	if got, _ := hosts["web-1"].ReadManaged("app.conf"); got != "three" {
		t.Fatalf("after the attacks app.conf = %q", got)
	}
	if n, _ := cp.Node("web-1"); n.LastError != nil {
		t.Fatalf("last error not cleared by a good declaration: %+v", n.LastError)
	}
}

func envelopeWithVersion(t *testing.T, envs [][]byte, version uint64) []byte {
	t.Helper()
	for _, e := range envs {
		var env declarations.Envelope
		var d declarations.Declaration
		if json.Unmarshal(e, &env) == nil && env.PayloadType == declarations.PayloadTypeDeclaration &&
			json.Unmarshal(env.Payload, &d) == nil && d.Version == version {
			return e
		}
	}
	t.Fatalf("no captured envelope with version %d among %d", version, len(envs))
	return nil
}

func ptr[T any](v T) *T { return &v }

// TestDeclareWaitJSONInterruptedSaysItsVersions (audit of commands run twice,
// interrupted and concurrent, finding 2): `declare --wait --json > out.json`
// interrupted while it waited exited 9 with out.json empty and no version said
// anywhere (with --json they were kept for the object written once the wait ended),
// and its message said nothing of the declaration standing. The versions now go to
// stderr before the wait, as its progress does, and the exit 9 says the declaration
// stands and to run meshctl status, not declare again.
func TestDeclareWaitJSONInterruptedSaysItsVersions(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "declint")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// No agent runs: the node never converges, and the wait goes on.
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"v1"}]}`)
	p := harness.Start(t, nil, bin.Meshctl, "declare", "--data", cp.Dir, "--node", "web-1", "--file", body, "--wait", "60s", "--json")
	p.WaitOutput(t, "waiting for 1 node(s)", 20*time.Second)
	p.Signal(syscall.SIGINT)
	if code := p.Wait(10 * time.Second); code != 9 {
		t.Fatalf("declare --wait --json interrupted: exit %d, want 9:\n%s", code, p.Output())
	}
	out := p.Output()
	if !strings.Contains(out, "declared web-1 v1") || !strings.Contains(out, "the declaration stands") || !strings.Contains(out, "run meshctl status, not declare again") {
		t.Fatalf("declare --wait --json interrupted says neither its version nor that it stands:\n%s", out)
	}
}

// TestDeclareWithARequestIDRunAgain (audit of commands run twice, interrupted and
// concurrent, finding 7): a script whose `meshctl declare` ended with exit 3 or 9
// ("may have been carried out") and that ran it again declared a second version:
// each run made its own request id, and the control plane's once-per-id held within
// one process only. Run again with --request-id, in another process, the declaration
// is answered with the version it got and nothing more is declared; the id with
// another body is refused (exit 4), nothing declared.
func TestDeclareWithARequestIDRunAgain(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "declid")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	dir := t.TempDir()
	body, other := filepath.Join(dir, "b.json"), filepath.Join(dir, "c.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"once"}]}`)
	writeFile(t, other, `{"files":[{"path":"app.conf","content":"another"}]}`)
	id := "5a1d0c3e2b4f6a7980e1d2c3b4a59687"
	r := cp.Ctl("declare", "--node", "web-1", "--file", body, "--request-id", id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "declared web-1 v1") {
		t.Fatalf("declare --request-id (exit %d): %s", r.Code, r.Combined())
	}
	r = cp.Ctl("declare", "--node", "web-1", "--file", body, "--request-id", strings.ToUpper(id))
	if r.Code != 0 || !strings.Contains(r.Stdout, "declared web-1 v1") || !strings.Contains(r.Stderr, "carried out already") {
		t.Fatalf("declare --request-id run again (exit %d): %s", r.Code, r.Combined())
	}
	if n, _ := cp.Node("web-1"); n.Declared != 1 {
		t.Fatalf("web-1 is declared v%d after the same request ran twice, want v1", n.Declared)
	}
	r = cp.Ctl("declare", "--node", "web-1", "--file", other, "--request-id", id)
	if r.Code != 4 || !strings.Contains(r.Stderr, "names another change") {
		t.Fatalf("another body under the same request id (exit %d): %s", r.Code, r.Combined())
	}
	// Without the id, as before: another version.
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 || !strings.Contains(r.Stdout, "declared web-1 v2") {
		t.Fatalf("declare without --request-id (exit %d): %s", r.Code, r.Combined())
	}
	// Another operator declares another body: the request run again says web-1
	// holds it no longer, and its --wait is not converged, as the first run's was.
	if r := cp.Ctl("declare", "--node", "web-1", "--file", other); r.Code != 0 || !strings.Contains(r.Stdout, "declared web-1 v3") {
		t.Fatalf("declare another body (exit %d): %s", r.Code, r.Combined())
	}
	r = cp.Ctl("declare", "--node", "web-1", "--file", body, "--request-id", id, "--wait", "5s")
	if r.Code != 5 || !strings.Contains(r.Stdout, "superseded web-1 (declared another body since, v3") || !strings.Contains(r.Stderr, "declared another body since") {
		t.Fatalf("declare --request-id --wait run again after another body (exit %d, want 5): %s", r.Code, r.Combined())
	}
}
