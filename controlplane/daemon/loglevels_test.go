package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestRefusalLevels: an operator's request refused for what it asked is logged at
// info, not as a warning (an alert on WARN is for what goes wrong); one the control
// plane could not carry out, and what hosts and enrolling clients are refused or
// have dropped, stay warnings.
func TestRefusalLevels(t *testing.T) {
	var log lockedBuffer
	g := newGuard(slog.New(slog.NewTextHandler(&log, nil)), time.Now, Budgets{})
	for _, c := range []struct {
		refuse          func()
		subject, reason string
		level           string
	}{
		{func() { g.refuse("admin", Reason(api.CodeNotFound), api.OpRevoke, "no node nosuch") }, "admin", api.CodeNotFound, "INFO"},
		{func() { g.refuse("admin", Reason(api.CodeTokenPending), api.OpTokenCreate, "a token is pending") }, "admin", api.CodeTokenPending, "INFO"},
		{func() { g.refuse("admin", Reason(api.CodeInternal), api.OpDeclare, "could not sign") }, "admin", api.CodeInternal, "WARN"},
		{func() { g.refuse("admin", Reason(api.CodeDiskFull), api.OpDeclare, "disk full") }, "admin", api.CodeDiskFull, "WARN"},
		{func() { g.refuse("enrol", Reason(api.CodeTokenUsed), "web-1", "spent") }, "enrol", api.CodeTokenUsed, "WARN"},
		{func() { g.refuse("sync", ReasonRate, "web-1", "too fast") }, "sync", string(ReasonRate), "WARN"},
		{func() { g.drop("admin", ReasonForeignReply, api.OpNodes, "reply elsewhere") }, "admin", string(ReasonForeignReply), "WARN"},
	} {
		before := len(log.String())
		c.refuse()
		line := log.String()[before:]
		if !strings.Contains(line, "level="+c.level) || !strings.Contains(line, "subject="+c.subject) || !strings.Contains(line, "reason="+c.reason) {
			t.Errorf("subject %s, reason %s logged %q; want level %s", c.subject, c.reason, line, c.level)
		}
	}
}

// TestATypoedRevokeWarnsNothing: `meshctl revoke nosuch` on a healthy control node
// is answered not_found and writes no warning: the refusal is an info line.
func TestATypoedRevokeWarnsNothing(t *testing.T) {
	var log lockedBuffer
	d, err := Open(context.Background(), Options{Dir: bootstrapped(t, "typo"), Logger: slog.New(slog.NewTextHandler(&log, nil)), wrapAuth: withObserver,
		Timeouts: testTimeouts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	nc := servedToOperators(t, d)
	data, _ := api.EncodeAdminRequest(api.OpRevoke, api.RevokeRequest{Nodes: []string{"nosuch"}})
	msg, err := nc.Request(api.AdminSubject(api.OpRevoke), data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var resp api.AdminResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil || resp.Error == nil || resp.Error.Code != api.CodeNotFound {
		t.Fatalf("revoke nosuch answered %s, want not_found", msg.Data)
	}
	out := log.String()
	if !strings.Contains(out, `level=INFO msg="request refused" subject=admin reason=not_found`) {
		t.Errorf("the refusal is not an info line:\n%s", out)
	}
	if strings.Contains(out, "level=WARN") {
		t.Errorf("a typo'd revoke on a healthy node wrote a warning:\n%s", out)
	}
}
