package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestLabelsAdmitNoControlCharacters (security.md: "node ids, labels and declared
// paths admit no control characters"): a label key or value with a control
// character, an escape sequence, a format character that reorders text, a space,
// a quote or anything past 63 bytes, and a 65th label, are refused as bad_request
// before anything is committed, by token.create and label alike (both validate
// with validateLabels); plain labels pass.
func TestLabelsAdmitNoControlCharacters(t *testing.T) {
	for _, ok := range []map[string]string{
		nil,
		{"tier": "web"},
		{"k8s.io/zone": "eu-west-1a", "Team_A": ""},
	} {
		if err := validateLabels(ok); err != nil {
			t.Errorf("labels %q refused: %v", ok, err)
		}
	}
	bad := []string{"a\nb", "a\rb", "\x1b[2J", "\x1b]0;pwned\x07", "a\tb", "a\x00b", "a\x7fb", "a\u0085b",
		"\u202egnp", "a\u200bb", "a b", `a"b`, "a=b", "a,b", "é", strings.Repeat("a", 64)}
	for _, s := range bad {
		for _, l := range []map[string]string{{s: "v"}, {"k": s}} {
			err := validateLabels(l)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest {
				t.Errorf("labels %q: %v, want bad_request", l, err)
			}
		}
	}
	if err := validateLabels(map[string]string{"": "v"}); err == nil {
		t.Error("an empty label key accepted")
	}
	many := map[string]string{}
	for i := range 65 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	if err := validateLabels(many); err == nil {
		t.Error("65 labels accepted")
	}
}

// TestAnEmptyLabelValueIsRefusedBeforeTheLog: a selector label with an empty value
// matched every node lacking the key (state.matches), so a declaration sent with
// tier="" (an older meshctl given --label tier=$TIER with TIER unset, or a request
// made by hand) replaced the files of every node without a tier; and a token's
// tier="" gave its node a label no command sets. The leader refuses both as
// bad_request before anything is proposed, a dry run too; a label request's k=
// still removes k.
func TestAnEmptyLabelValueIsRefusedBeforeTheLog(t *testing.T) {
	d := fleet(t, 2)
	if _, err := d.label(api.LabelRequest{Node: "n-0", Labels: map[string]string{"tier": "web"}}); err != nil {
		t.Fatal(err)
	}
	declared := func(node string) (v uint64) {
		d.fsm.Read(func(s *state.State) { v = s.Nodes[node].Declared.Version })
		return v
	}
	body := json.RawMessage(`{"files":[{"path":"etc/web.conf","content":"web"}]}`)
	for _, req := range []api.DeclareRequest{
		{Labels: map[string]string{"tier": ""}, Body: body},
		{Labels: map[string]string{"tier": ""}, Body: body, DryRun: true},
		{Role: state.RoleWorker, Labels: map[string]string{"tier": "web", "env": ""}, Body: body},
	} {
		_, err := d.declare(req, requestCall{ID: api.NewRequestID()})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "has an empty value") ||
			!strings.Contains(ae.Message, "nothing was declared") {
			t.Fatalf("declare %v (dry run %t): %v, want bad_request naming the empty value", req.Labels, req.DryRun, err)
		}
	}
	if v0, v1 := declared("n-0"), declared("n-1"); v0 != 0 || v1 != 0 {
		t.Fatalf("a refused declaration declared: n-0 v%d, n-1 v%d", v0, v1)
	}
	// The same selector with its value reaches the labelled node only.
	if res, err := d.declare(api.DeclareRequest{Labels: map[string]string{"tier": "web"}, Body: body}, requestCall{}); err != nil ||
		len(res.Assignments) != 1 || res.Assignments[0].Node != "n-0" {
		t.Fatalf("declare tier=web: %+v, %v", res, err)
	}

	var id [32]byte
	rand.Read(id[:])
	_, err := d.createToken(api.TokenCreateRequest{ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(id[:]), Node: "web-7",
		Role: state.RoleWorker, TTL: api.Duration(time.Hour), Labels: map[string]string{"tier": ""}})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "label tier has an empty value") ||
		!strings.Contains(ae.Message, "nothing was minted") {
		t.Fatalf("a token with tier=: %v, want bad_request", err)
	}
	d.fsm.Read(func(s *state.State) {
		if p := s.PendingTokens("web-7", d.now()); len(p) != 0 {
			t.Fatalf("a refused token was recorded: %+v", p)
		}
	})

	// label n-0 tier= removes the label, as ever.
	v, err := d.label(api.LabelRequest{Node: "n-0", Labels: map[string]string{"tier": ""}})
	if err != nil || len(v.Labels) != 0 {
		t.Fatalf("label n-0 tier=: %+v, %v", v.Labels, err)
	}
}
