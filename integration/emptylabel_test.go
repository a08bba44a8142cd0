package integration

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestAnEmptyLabelValueSelectsNothing, with the built binaries: `--label tier=`
// (a script's --label tier=$TIER with TIER unset) selected every node WITHOUT a
// tier, and declare replaced their files (an operations audit). Every selector
// (declare, its dry run, nodes, status) and a token's --label refuse an empty
// value as a usage error, exit 2, naming it and the unset variable; the control
// plane refuses the same requests made by hand (an older meshctl), bad_request,
// and nothing is declared or minted; `meshctl label NODE tier=` still removes tier.
func TestAnEmptyLabelValueSelectsNothing(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "emptylabel")
	cp.Serve()
	for id, extra := range map[string][]string{"web-1": {"--label", "tier=web"}, "web-9": nil} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id, extra...)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/b.conf","content":"b"}]}`)
	declared := func(id string) uint64 {
		t.Helper()
		n, ok := cp.Node(id)
		if !ok {
			t.Fatalf("%s is not listed", id)
		}
		return n.Declared
	}

	for _, args := range [][]string{
		{"declare", "--label", "tier=", "--file", body},
		{"declare", "--label", "tier=", "--file", body, "--dry-run"},
		{"nodes", "--label", "tier="},
		{"status", "--label", "tier="},
		{"token", "--node", "lab-1", "--label", "tier="},
	} {
		r := cp.Ctl(args...)
		if r.Code != 2 || r.Stdout != "" || !strings.Contains(r.Stderr, "--label tier= has an empty value") || !strings.Contains(r.Stderr, "unset") {
			t.Errorf("%v: exit %d, want 2 naming the empty value:\n%s", args, r.Code, r.Combined())
		}
	}
	if v := declared("web-9"); v != 0 {
		t.Fatalf("web-9, without a tier, was declared v%d", v)
	}
	if r := cp.Ctl("token", "list", "--node", "lab-1", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"tokens": []`) {
		t.Fatalf("a refused token was minted (exit %d):\n%s", r.Code, r.Combined())
	}

	// The same requests, made by hand as an older meshctl would send them.
	nc := cp.OperatorConn()
	call := func(op string, args any) *api.Error {
		t.Helper()
		data, err := api.EncodeAdminRequest(op, args)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := nc.Request(api.AdminSubject(op), data, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		var resp api.AdminResponse
		if err := json.Unmarshal(msg.Data, &resp); err != nil {
			t.Fatalf("%s: %v: %s", op, err, msg.Data)
		}
		return resp.Error
	}
	raw := json.RawMessage(`{"files":[{"path":"etc/b.conf","content":"b"}]}`)
	for _, req := range []api.DeclareRequest{
		{Labels: map[string]string{"tier": ""}, Body: raw},
		{Labels: map[string]string{"tier": ""}, Body: raw, DryRun: true},
	} {
		if e := call(api.OpDeclare, req); e == nil || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "label tier has an empty value") {
			t.Fatalf("a declaration by hand selecting tier= (dry run %t): %+v, want bad_request", req.DryRun, e)
		}
	}
	var id [32]byte
	_, _ = rand.Read(id[:])
	if e := call(api.OpTokenCreate, api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: "lab-2",
		Role: "worker", TTL: api.Duration(time.Hour), Labels: map[string]string{"tier": ""}}); e == nil || e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "nothing was minted") {
		t.Fatalf("a token by hand with tier=: %+v, want bad_request", e)
	}
	if v := declared("web-9"); v != 0 {
		t.Fatalf("web-9, without a tier, was declared v%d by a request made by hand", v)
	}
	if r := cp.Ctl("token", "list", "--node", "lab-2", "--json"); r.Code != 0 || !strings.Contains(r.Stdout, `"tokens": []`) {
		t.Fatalf("a token refused by the control plane was minted (exit %d):\n%s", r.Code, r.Combined())
	}

	// With its value, the selector reaches the labelled node alone.
	if r := cp.Ctl("declare", "--label", "tier=web", "--file", body); r.Code != 0 || !strings.Contains(r.Stdout, "web-1") || strings.Contains(r.Stdout, "web-9") {
		t.Fatalf("declare --label tier=web (exit %d):\n%s", r.Code, r.Combined())
	}
	if declared("web-1") != 1 || declared("web-9") != 0 {
		t.Fatalf("after declare --label tier=web: web-1 v%d, web-9 v%d", declared("web-1"), declared("web-9"))
	}
	// k= removes a label, as ever.
	if r := cp.Ctl("label", "web-1", "tier="); r.Code != 0 || !strings.Contains(r.Stdout, "web-1 labels: (none)") {
		t.Fatalf("label web-1 tier= (exit %d):\n%s", r.Code, r.Combined())
	}
}
