package integration

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/host/agent"
	"mesh/integration/harness"
)

// TestARevokedHostStopsOnItsNoticeAfterItsRecordIsForgotten: decision 0039 rests on
// decision 0016 holding once a revoked node's record is forgotten: its key, kept in
// the state, still logs in to the revoked account only, and its agent, stopped when
// the node was revoked and started again after the record was forgotten, stops on the
// signed notice. The control plane's clock is moved past the retention for the
// forgetting (its reconcile tick), then back, so that the agent's login is judged by
// the right clock.
func TestARevokedHostStopsOnItsNoticeAfterItsRecordIsForgotten(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	cpNow := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	m := harness.StartMesh(t, "forgotten", harness.Options{Now: cpNow})
	st, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgent(t, st, nil)
	v1 := m.Declare("web-1", `{"files":[{"path":"motd","content":"one"}]}`)
	m.WaitApplied("web-1", v1, 15*time.Second)
	a.Stop()

	var res api.RevokeResult
	if err := m.Op.Call(api.OpRevoke, api.RevokeRequest{Node: "web-1"}, &res); err != nil || len(res.Revoked) != 1 {
		t.Fatalf("revoke web-1: %+v, %v", res, err)
	}
	offset.Store(int64(state.RevokedRetention + time.Hour))
	harness.Eventually(t, 20*time.Second, "web-1's record forgotten", func() bool {
		_, listed := m.Node("web-1")
		return !listed
	})
	if !strings.Contains(m.Log(), "revoked nodes' records forgotten") {
		t.Fatalf("web-1 is no longer listed, and the leader did not say it forgot its record:\n%s", m.Log())
	}
	offset.Store(0)

	again := harness.RunAgent(t, st, nil)
	ended, err := again.Ended(20 * time.Second)
	if !ended || !errors.Is(err, agent.ErrRevoked) {
		t.Fatalf("the agent of a node whose record was forgotten: ended %v with %v, want ErrRevoked:\n%s", ended, err, again.Log())
	}
	if !strings.Contains(err.Error(), "revoked at") {
		t.Errorf("the agent did not say when it was revoked: %v", err)
	}
	// Its status report in the revoked account, which no one serves, was
	// answered by the broker's "no responders": not an answer to warn about.
	if strings.Contains(again.Log(), "not understood") {
		t.Errorf("the revoked agent warned of an answer:\n%s", again.Log())
	}
}
