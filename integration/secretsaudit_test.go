package integration

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/host/identity"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestNoKeyWhereAnAttackerReads: every secret a two-control-node mesh with an agent
// holds (the CA key, both TLS leaf keys, the signing keys, both curve keys, the
// operator account key, both operator credentials' seeds, the node's seed, every
// token's secret) searched for in what an attacker who is not root may read: the
// control nodes' and the agent's logs at debug, every command's output (--json
// included), both /metrics endpoints, the broker's monitoring answers (VARZ, CONNZ
// with authentication details, open and closed, ACCOUNTZ, ROUTEZ), every Raft file
// (log and snapshots), and every file of the data and state directories a user other
// than its owner may read. Nothing is found; the scan records what was searched.
func TestNoKeyWhereAnAttackerReads(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "audit")
	serve1 := cp1.Serve("--log-level", "debug")
	var outputs = map[string]func() string{"cp-1 serve log": serve1.Output}
	record := func(name string, r harness.Result) harness.Result {
		outputs[name] = r.Combined
		return r
	}

	ctlTok, cp2 := cp1.ControlToken("cp-2")
	if r := record("join", cp2.Join(ctlTok)); r.Code != 0 {
		t.Fatalf("join: %s", r.Combined())
	}
	serve2 := cp2.Serve("--log-level", "debug")
	outputs["cp-2 serve log"] = serve2.Output

	text := cp1.Token("web-1")
	record("token --json", cp1.Ctl("token", "--node", "web-2", "--json"))
	h := harness.NewHost(t, bin, "web-1")
	if r := record("enrol", h.Enrol(text, "--json")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	record("enrol again", harness.NewHost(t, bin, "web-1b").Enrol(text))
	agentAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePorts(t, 1)[0])
	agent := h.Run("--log-level", "debug", "--metrics-listen", agentAddr)
	outputs["agent log"] = agent.Output
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"one"}]}`)
	if r := record("declare", cp2.Ctl("declare", "--node", "web-1", "--file", body, "--json")); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	cp1.WaitConverged("web-1", 1, 20*time.Second)
	if r := record("rotate", cp1.Ctl("signing-key", "rotate", "--json")); r.Code != 0 {
		t.Fatalf("rotate: %s", r.Combined())
	}
	for _, args := range [][]string{{"nodes", "--json"}, {"token", "list", "--json"}, {"signing-key", "status", "--json"}, {"nodes"}} {
		record(strings.Join(args, " "), cp2.Ctl(args...))
	}
	record("status --json", harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State, "--json"))
	time.Sleep(2 * time.Second)
	for name, url := range map[string]string{"cp-1 metrics": "http://" + cp1.Metrics + "/metrics",
		"cp-2 metrics": "http://" + cp2.Metrics + "/metrics", "agent metrics": "http://" + agentAddr + "/metrics"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		outputs[name] = func() string { return string(b) }
	}
	nc := cp1.OperatorConn()
	for _, req := range []struct{ subject, body string }{
		{"$SYS.REQ.SERVER.PING.VARZ", `{}`},
		{"$SYS.REQ.SERVER.PING.CONNZ", `{"auth":true,"subscriptions":true,"state":2}`},
		{"$SYS.REQ.SERVER.PING.ACCOUNTZ", `{}`},
		{"$SYS.REQ.SERVER.PING.ROUTEZ", `{}`},
	} {
		msg, err := nc.Request(req.subject, []byte(req.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", req.subject, err)
		}
		if strings.Contains(string(msg.Data), `"error"`) {
			t.Fatalf("%s: %s", req.subject, msg.Data)
		}
		data := string(msg.Data)
		outputs[req.subject] = func() string { return data }
	}

	// The secrets.
	needles := map[string][][]byte{}
	pemKey := func(name, path string) {
		data := mustRead(t, path)
		k, err := pki.ParseKeyPEM(data)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		der, _ := x509.MarshalPKCS8PrivateKey(k)
		var raw []byte
		if ec, ok := k.(*ecdsa.PrivateKey); ok {
			raw = ec.D.FillBytes(make([]byte, 32))
		}
		needles[name] = encodings(raw, der, data)
	}
	nkeySeed := func(name string, seed []byte) {
		seed = bytes.TrimSpace(seed)
		_, raw, err := nkeys.DecodeSeed(seed)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		needles[name] = append(encodings(raw, nil, nil), seed)
	}
	pemKey("CA key", filepath.Join(cp1.Dir, datadir.CAKeyFile))
	for _, cp := range []*harness.ControlPlane{cp1, cp2} {
		n := filepath.Base(cp.Dir)
		pemKey(n+" TLS key", filepath.Join(cp.Dir, datadir.TLSKeyFile))
		keys, err := datadir.Dir(cp.Dir).LoadSigningKeys()
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range keys {
			der, _ := x509.MarshalPKCS8PrivateKey(k)
			needles[fmt.Sprintf("%s signing key %d", n, i)] = encodings(k.Seed(), der, nil)
		}
		nkeySeed(n+" curve seed", mustRead(t, filepath.Join(cp.Dir, datadir.CurveKeyFile)))
		creds := mustRead(t, filepath.Join(cp.Dir, datadir.AdminCredsFile))
		ukp, err := jwt.ParseDecoratedUserNKey(creds)
		if err != nil {
			t.Fatal(err)
		}
		useed, _ := ukp.Seed()
		nkeySeed(n+" operator seed", useed)
	}
	nkeySeed("account seed", mustRead(t, filepath.Join(cp1.Dir, datadir.AccountKeyFile)))
	id, err := identity.Load(h.State)
	if err != nil {
		t.Fatal(err)
	}
	nkeySeed("node seed", []byte(id.Seed))
	for i, tok := range []string{ctlTok, text, outputs["token --json"]()} {
		if i == 2 {
			var v struct{ Token string }
			json.Unmarshal([]byte(tok), &v)
			tok = v.Token
		}
		p, err := tokenfmt.Parse(strings.TrimSpace(tok), time.Now().Add(-time.Hour))
		if err != nil && p.Node == "" {
			t.Fatalf("token %d: %v", i, err)
		}
		needles[fmt.Sprintf("token secret %d", i)] = encodings(p.Secret[:], nil, nil)
	}

	contains := func(data []byte, forms [][]byte) bool {
		for _, f := range forms {
			if len(f) >= 16 && bytes.Contains(data, f) {
				return true
			}
		}
		return false
	}
	search := func(where string, data []byte) {
		for name, forms := range needles {
			if contains(data, forms) {
				t.Errorf("%s appears in %s", name, where)
			}
		}
	}
	// The search finds each secret where it is kept, or it proves nothing.
	kept := map[string]bool{}
	for _, dir := range []string{cp1.Dir, cp2.Dir, h.State} {
		filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				data, _ := os.ReadFile(path)
				for name, forms := range needles {
					kept[name] = kept[name] || contains(data, forms)
				}
			}
			return err
		})
	}
	for name := range needles {
		if !kept[name] && !strings.HasPrefix(name, "token secret") {
			t.Errorf("%s is not found in the file that keeps it: the search is blind", name)
		}
	}
	for name, out := range outputs {
		if name == "token --json" {
			continue // the token is its output
		}
		search(name, []byte(out()))
	}
	for _, dir := range []string{cp1.Dir, cp2.Dir, h.State} {
		filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if fi.IsDir() {
				return nil
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if fi.Mode().Perm()&0o044 != 0 {
				search(path+" (mode "+fi.Mode().String()+")", data)
			}
			if strings.Contains(path, "raft") {
				search(path, data)
			}
			return nil
		})
	}
}
