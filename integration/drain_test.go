package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestAControlNodeStoppingPassesOnItsOperatorsAnswers: in a rolling restart, the
// control node an operator is connected to is stopped while a change it carried is
// being served by the leader on another machine. The answer comes back only through
// the broker the request went in by, so the stopping node keeps its broker up until
// the answer has passed (a few seconds at most): meshctl reports the change made,
// exit 0. Before, the broker stopped at once and the answer was lost: meshctl, left
// with no broker of its list, said the change may or may not have been made (exit
// 3), after waiting its whole timeout when another broker took its connection over.
// The leader is stopped (SIGSTOP) while the request reaches it, to hold the answer
// back for as long as the stopping node takes to stop; the Raft timeouts are raised so
// that the pause costs it no leadership.
func TestAControlNodeStoppingPassesOnItsOperatorsAnswers(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	slowRaft := []string{"--raft-heartbeat", "5s"}
	cp1 := harness.NewControlPlane(t, bin, "drain")
	cp1.Serve(slowRaft...)
	cps := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": joinControl(t, cp1, "cp-2", slowRaft...), "cp-3": joinControl(t, cp1, "cp-3", slowRaft...)}
	web := harness.NewHost(t, bin, "web-1")
	if r := web.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: exit %d:\n%s", r.Code, r.Combined())
	}
	var leader, follower *harness.ControlPlane
	for id, c := range controlView(t, cp1) {
		if c.Raft == api.RaftLeader {
			leader = cps[id]
		} else if follower == nil && cps[id] != nil {
			follower = cps[id]
		}
	}
	if leader == nil || follower == nil {
		t.Fatalf("no leader and follower among %v", controlView(t, cp1))
	}
	body := t.TempDir() + "/b.json"
	writeFile(t, body, `{"files":[{"path":"f","content":"drained\n"}]}`)

	leader.Process().Signal(syscall.SIGSTOP)
	resumed := false
	resume := func() {
		if !resumed {
			leader.Process().Signal(syscall.SIGCONT)
			resumed = true
		}
	}
	defer resume()
	declare := harness.Start(t, nil, bin.Meshctl, "declare", "--node", "web-1", "--file", body,
		"--data", follower.Dir, "--servers", follower.Listen)
	// The request is on its way once meshctl connected and sent it: it waits at the
	// stopped leader. Then the follower is told to stop, and the leader resumes.
	time.Sleep(1500 * time.Millisecond)
	follower.Process().Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	resume()

	if code := declare.Wait(30 * time.Second); code != 0 {
		t.Fatalf("declare through a control node stopped under it: exit %d, want 0:\n%s\nthe stopping node's log:\n%s", code, declare.Output(), follower.Process().Output())
	}
	if out := declare.Output(); !strings.Contains(out, "web-1") {
		t.Errorf("declare says %q, want the node it declared to", out)
	}
	if code := follower.Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("the follower stopped with exit %d:\n%s", code, follower.Process().Output())
	}
	if out := follower.Process().Output(); !strings.Contains(out, "waiting for the answers to operator requests") {
		t.Errorf("the stopping node's log does not say it waited for an operator's answer:\n%s", out)
	}
	if n, ok := leader.Node("web-1"); !ok || n.Declared == 0 {
		t.Errorf("web-1 after the declaration: %+v", n)
	}
}
