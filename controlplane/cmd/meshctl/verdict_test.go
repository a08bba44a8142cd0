package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// traceback is a hook's failure as the host reports it, 512 bytes, its reason
// at the end.
func traceback(hook string, i int) string {
	msg := fmt.Sprintf("hook %s: exit status 1: Traceback (most recent call last): ", hook) + strings.Repeat(`File "/srv/app.py", line 3, in <module> `, 12)
	why := fmt.Sprintf(" OSError: [Errno 98] port %d in use", 8000+i%100)
	return msg[:api.MaxStatusMessageLen-len(why)] + why
}

// failingRoster is 5,000 live nodes: 4,800 whose hook restart-app fails, 40
// whose hook reload-db does, 150 that could not apply, and 10 behind.
func failingRoster() []api.NodeView {
	nodes := make([]api.NodeView, 0, 5000)
	v := uint64(2)
	for i := range 5000 {
		n := api.NodeView{ID: fmt.Sprintf("web-%04d", i), State: api.StateAlive, Declared: 3, Applied: &v}
		switch {
		case i%100 < 96:
			n.LastError = &api.StatusError{Code: api.StatusHookFailed, Message: traceback("restart-app", i), Version: 3}
		case i%100 < 97 && i < 4000:
			n.LastError = &api.StatusError{Code: api.StatusHookFailed, Message: traceback("reload-db", i), Version: 3}
		case i%100 == 99 && i < 1000:
		default:
			n.LastError = &api.StatusError{Code: api.StatusApplyFailed, Message: "write /etc/app.conf: no space left on device", Version: 3}
		}
		nodes = append(nodes, n)
	}
	return nodes
}

// TestAFleetsVerdictIsGroupedByCause: status's verdict over 5,000 failing nodes
// named each of them on one line of about 1.3 MB; grouped by cause, it counts
// them, names the failing hooks and a few nodes each, and stays within 4 KiB.
// Exit 5 as before; --json still lists every node.
func TestAFleetsVerdictIsGroupedByCause(t *testing.T) {
	nodes := failingRoster()
	err := notConverged(nodes, false)
	var ex exitError
	if !errors.As(err, &ex) || ex.code != exitNotConverged {
		t.Fatalf("want exit %d, got %v", exitNotConverged, err)
	}
	msg := err.Error()
	t.Logf("%d bytes: %s", len(msg), msg)
	if len(msg) > maxVerdictLen {
		t.Errorf("the verdict is %d bytes, over %d", len(msg), maxVerdictLen)
	}
	for _, want := range []string{
		"not converged: 5000 live node(s): 4800 failing hook_failed in hook restart-app (fix the host, then `meshhost hooks retry` there): web-0000 (exit status 1: Traceback",
		"OSError: [Errno 98] port 8000 in use), web-0001 (", "web-0004 (", " and 4795 more; ",
		"150 failing apply_failed: web-0097 (write /etc/app.conf: no space left on device), ",
		"40 failing hook_failed in hook reload-db (fix the host, then `meshhost hooks retry` there): web-0096 (",
		"10 behind: web-0099 (declared v3), ", "--json lists every node",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the verdict lacks %q", want)
		}
	}
	if strings.Index(msg, "restart-app") > strings.Index(msg, "apply_failed") || strings.Index(msg, "apply_failed") > strings.Index(msg, "reload-db") {
		t.Error("the causes are not shown most nodes first")
	}
	var out strings.Builder
	if err := writeJSON(&out, struct {
		Nodes []api.NodeView `json:"nodes"`
	}{nodes}); err != nil || strings.Count(out.String(), `"id": "web-`) != 5000 {
		t.Errorf("--json lists %d nodes (%v)", strings.Count(out.String(), `"id": "web-`), err)
	}
}

// TestDeclareWaitsVerdictIsGroupedByCause: declare --wait's verdict carried each
// failing node's whole message, 3 MB for 5,000 nodes.
func TestDeclareWaitsVerdictIsGroupedByCause(t *testing.T) {
	cv := convergence{Converged: []string{"db-1"}, Failed: map[string]string{}}
	for i := range 5000 {
		cv.Failed[fmt.Sprintf("web-%04d", i)] = api.StatusHookFailed + ": " + traceback("restart-app", i)
	}
	cv.Failed["web-x"] = "failed"
	cv.Offline = []string{"db-2"}
	err := cv.err()
	var ex exitError
	if !errors.As(err, &ex) || ex.code != exitNotConverged {
		t.Fatalf("want exit %d, got %v", exitNotConverged, err)
	}
	msg := err.Error()
	if len(msg) > maxVerdictLen {
		t.Errorf("the verdict is %d bytes, over %d", len(msg), maxVerdictLen)
	}
	for _, want := range []string{"not converged: 5002 of 5003 node(s): 5000 failed hook_failed in hook restart-app (fix the host, then `meshhost hooks retry` there): web-0000 (exit status 1: ",
		" and 4995 more", "; 1 failed: web-x", "; 1 offline (the declaration stands: each applies it when its agent reconnects; meshctl status NODE shows when): db-2", "--json lists every node"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	raw, _ := json.Marshal(cv)
	var back convergence
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Failed) != 5001 || back.Failed["web-4999"] != cv.Failed["web-4999"] {
		t.Errorf("--json holds %d failed nodes (%v), want each with its whole message", len(back.Failed), err)
	}
}

// TestAVerdictOfManyCausesIsCapped: causes are as many as the codes and hook
// names nodes report; past the cap they are counted, not shown.
func TestAVerdictOfManyCausesIsCapped(t *testing.T) {
	var nodes []api.NodeView
	for i := range 5000 {
		code := fmt.Sprintf("code_%d_%s", i, strings.Repeat("x", 50))
		nodes = append(nodes, api.NodeView{ID: fmt.Sprintf("%s-%04d", strings.Repeat("n", 50), i), State: api.StateAlive,
			LastError: &api.StatusError{Code: code, Message: strings.Repeat("why ", 128)}})
	}
	msg := notConverged(nodes, false).Error()
	if len(msg) > maxVerdictLen || !strings.Contains(msg, "more cause(s), of ") || !strings.HasSuffix(msg, "; --json lists every node") {
		t.Errorf("%d bytes: %s", len(msg), msg)
	}
	// A hook's name is shown short.
	what, _, _ := failure("failing", "web-1", api.StatusHookFailed, "hook "+strings.Repeat("h", 200)+": exit status 1")
	if what != "failing hook_failed" {
		t.Errorf("a hook name of 200 bytes makes the cause %q", what)
	}
}

// TestAKeyTwoMachinesHoldIsNotConverged: a node the control plane shows failing
// key_shared (its key held by two connections past the grace: a clone) is named by
// status's verdict, exit 5, with what to do; counted failing in the summary; and
// declare --wait's verdict says the same of it. Before, status said "1 converged"
// and exited 0.
func TestAKeyTwoMachinesHoldIsNotConverged(t *testing.T) {
	v := uint64(3)
	// As the control plane writes it: past the cut of a verdict's line.
	msg := "held by 2 connections for 5m0s, from 192.0.2.7, 198.51.100.9: two machines hold this node's key (one cloned after its enrolment?), each receiving every declaration, secrets included; revoke the node and enrol each machine again with a token of its own"
	nodes := []api.NodeView{
		{ID: "web-1", State: api.StateAlive, Declared: 3, Applied: &v, Connections: 2,
			LastError: &api.StatusError{Code: api.KeyShared, Message: msg, Version: 3}},
		{ID: "web-2", State: api.StateAlive, Declared: 3, Applied: &v, Converged: true},
	}
	err := notConverged(nodes, false)
	var ex exitError
	if !errors.As(err, &ex) || ex.code != exitNotConverged {
		t.Fatalf("want exit %d, got %v", exitNotConverged, err)
	}
	const hint = "(two machines hold one node's key: revoke the node, then enrol each machine again with a token of its own)"
	// The addresses kept (a walkthrough: the cut kept the advice, the hint's
	// already, and lost them).
	if want := "not converged: 1 live node(s): 1 failing key_shared " + hint + ": web-1 (held by 2 connections for 5m0s, from 192.0.2.7, 198.51.100.9:"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("the verdict %q, want it to start %q", err, want)
	}
	if s := summarise(api.NodesResult{Nodes: nodes}); s.Converged != 1 || s.Failing != 1 {
		t.Errorf("summary %+v: want 1 converged, 1 failing", s)
	}
	cv := convergence{Converged: []string{"web-2"}, Failed: map[string]string{"web-1": api.KeyShared + ": " + msg}}
	if err := cv.err(); err == nil || !strings.Contains(err.Error(), "1 failed key_shared "+hint+": web-1 (") {
		t.Errorf("declare --wait's verdict: %v", err)
	}
}

// TestANodePastTheKeyringHistoryIsNamedWithWhatToDo: status's verdict of a node
// failing keyring_gone says what to do, as it does of key_shared.
func TestANodePastTheKeyringHistoryIsNamedWithWhatToDo(t *testing.T) {
	v := uint64(3)
	nodes := []api.NodeView{{ID: "old-1", State: api.StateAlive, Declared: 3, Applied: &v,
		LastError: &api.StatusError{Code: api.KeyringGone, Message: "the node holds keyring epoch 2", Version: 3}}}
	err := notConverged(nodes, false)
	if err == nil || !strings.Contains(err.Error(), "1 failing keyring_gone (the nodes hold a keyring older than the 64 the mesh keeps") {
		t.Fatalf("the verdict: %v", err)
	}
}

// TestADeclarationSentAgainCountsTheNodesThatHoldItNoLonger: the nodes a declaration
// sent again lists as no longer holding it (api.DeclareResult.NoLonger) are not
// converged, as its first sending's --wait said: exit 5, naming them by cause. The
// rerun's wait, waiting on the others alone, exited 0 before.
func TestADeclarationSentAgainCountsTheNodesThatHoldItNoLonger(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 2, 3, 0, time.UTC)
	var c convergence // a control plane's answer naming no node to wait for
	c.Converged = []string{"n-0"}
	c.noLonger([]api.TargetProgress{
		{Node: "n-1", State: api.ProgressSuperseded, Version: 7},
		{Node: "n-2", State: api.ProgressRevoked, RevokedAt: at},
	})
	err := c.err()
	var ee exitError
	if !errors.As(err, &ee) || ee.code != exitNotConverged {
		t.Fatalf("verdict %v, want exit %d", err, exitNotConverged)
	}
	for _, want := range []string{"2 of 3 node(s)", "declared another body since", "n-1 (v7)", "revoked since", "n-2 (at 2026-12-07T01:02:03Z)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("verdict %q does not say %q", err, want)
		}
	}
}

// TestHooksThatFailedTogetherAreEachNamed (a walkthrough): two hooks failing in one
// run were reported as one error of two lines, flattened to "timed out after 2s
// hook daemon: …" under "in hook slow". The agent names them first, quoted; each
// is named here, also when the report was cut within the first one's output, and a
// hook's output that reads "; hook x: " names no other hook (a review); a hook's
// name with a space is still one.
func TestHooksThatFailedTogetherAreEachNamed(t *testing.T) {
	v := uint64(2)
	node := func(id, msg string) api.NodeView {
		return api.NodeView{ID: id, State: api.StateAlive, Declared: 3, Applied: &v, LastError: &api.StatusError{Code: api.StatusHookFailed, Message: msg, Version: 3}}
	}
	long := strings.Repeat("Traceback line; ", 40)
	nodes := []api.NodeView{
		node("web-1", `hooks "slow", "daemon" failed: hook slow: timed out after 2s; hook daemon: it exited 0, but left a process`),
		node("web-2", "hook reload app: exit status 3"),
		node("web-3", `hooks "a", "b c" failed: hook a: exit status 1: `+long+" … [cut: 900 bytes in all; the whole text is in the host's log and in meshhost status]"),
		node("web-4", "hook only: exit status 1: see; hook other: not a hook of this run"),
		// The names past the head counted; a name over 64 bytes shown cut.
		node("web-5", `hooks "`+strings.Repeat("n", 70)+`", "b" (and 10 more) failed: hook x: exit status 2`),
	}
	msg := notConverged(nodes, false).Error()
	for _, want := range []string{"failing hook_failed in hooks slow, daemon (fix the host", "web-1 (hook slow: timed out after 2s; hook daemon: it exited 0, but left a process)",
		"failing hook_failed in hook reload app (fix the host", "web-2 (exit status 3)",
		"failing hook_failed in hooks a, b c (fix the host", "web-3 (hook a: exit status 1: Traceback line",
		"failing hook_failed in hook only (fix the host", "web-4 (exit status 1: see; hook other: not a hook of this run)",
		"failing hook_failed in hooks " + strings.Repeat("n", 60), ", b, 10 more (fix the host", "web-5 (hook x: exit status 2)"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the verdict lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "in hooks only") || strings.Contains(msg, "hooks only, other") {
		t.Errorf("a hook's output was read as another hook:\n%s", msg)
	}
}

// TestANodesErrorKeepsItsReasonPastALongPath (a walkthrough): an example cut 40
// bytes in kept of "apply: refusing "PATH": reason; advice" the path and the
// advice's end; with a long path, the path alone. Quoted text is shortened
// first, and the reason after it is kept.
func TestANodesErrorKeepsItsReasonPastALongPath(t *testing.T) {
	v := uint64(2)
	long := "d000/" + strings.Repeat("p", 990)
	for path, reason := range map[string]string{
		long:      "a path element is longer than 255 bytes",
		"etc/app": "a directory is in the way where the declaration puts a file",
	} {
		msg := `apply: refusing "` + path + `": ` + reason + `; nothing was changed; remove the directory on the host, or declare the files inside it instead, then declare again (the declaration is kept and tried again at each reconnection)`
		nodes := []api.NodeView{{ID: "web-1", State: api.StateAlive, Declared: 3, Applied: &v, LastError: &api.StatusError{Code: api.StatusApplyFailed, Message: msg, Version: 3}}}
		out := notConverged(nodes, false).Error()
		if !strings.Contains(out, reason) || len(out) > 600 {
			t.Errorf("the verdict (%d bytes) lacks the reason %q:\n%s", len(out), reason, out)
		}
	}
}

// TestAStrayQuoteInAHooksOutputKeepsItsReason (a review): shortening quoted text
// paired a '"' of a hook's output with the next one, across the reason, and cut it.
func TestAStrayQuoteInAHooksOutputKeepsItsReason(t *testing.T) {
	v := uint64(2)
	msg := `hook reload: exit status 1: quoted string "abc: permission denied on /etc/app/app.conf while reloading; see "journalctl"`
	out := notConverged([]api.NodeView{{ID: "web-1", State: api.StateAlive, Declared: 3, Applied: &v,
		LastError: &api.StatusError{Code: api.StatusHookFailed, Message: msg, Version: 3}}}, false).Error()
	if !strings.Contains(out, "permission denied on /etc/app/app.conf") {
		t.Errorf("the reason was cut:\n%s", out)
	}
}

// TestALongQuotedPathWithASpaceIsShortened (a review): a path with a space, quoted,
// is shortened as any other, so that the reason after it is kept.
func TestALongQuotedPathWithASpaceIsShortened(t *testing.T) {
	v := uint64(2)
	path := "srv/My Documents/" + strings.Repeat("deep/", 30) + "app.conf"
	msg := `apply: refusing "` + path + `": a directory is in the way where the declaration puts a file; remove the directory on the host, then declare again, and the file is written at the next attempt of the agent`
	out := notConverged([]api.NodeView{{ID: "web-1", State: api.StateAlive, Declared: 3, Applied: &v,
		LastError: &api.StatusError{Code: api.StatusApplyFailed, Message: msg, Version: 3}}}, false).Error()
	if !strings.Contains(out, "a directory is in the way where the declaration puts a file") || strings.Contains(out, path) {
		t.Errorf("the path was not shortened, or the reason lost:\n%s", out)
	}
}

// TestTheSummaryCountsHooksRunning (a walkthrough of declarations.md): a node whose
// hooks ran was "behind" in the summary, or "failing" while a retry ran, and "hooks
// running" in the verdict below it; the summary counts the nodes with hooks running
// apart, revoked ones aside, as it does the stale and offline ones.
func TestTheSummaryCountsHooksRunning(t *testing.T) {
	nodes := []api.NodeView{
		{ID: "web-1", State: api.StateAlive, HooksRunning: true},
		{ID: "web-2", State: api.StateAlive, HooksRunning: true, LastError: &api.StatusError{Code: "hook_failed"}},
		{ID: "web-3", State: api.StateAlive, Converged: true},
		{ID: "web-4", State: api.StateRevoked, HooksRunning: true},
	}
	if s := summarise(api.NodesResult{Nodes: nodes}); s.HooksRunning != 2 || s.Behind != 1 || s.Failing != 1 {
		t.Fatalf("summary %+v, want 2 with hooks running (1 behind, 1 failing)", s)
	}
}

// TestAnExampleIsCutBetweenWords (a walkthrough of declarations.md): a hook's error
// shortened around "…" was cut mid-word at both ends ("group a … h systemctl"); the
// head ends and the tail starts at a blank when one is near.
func TestAnExampleIsCutBetweenWords(t *testing.T) {
	msg := "hook restart-app: exit status 1: the hook left a process behind, which was killed with the hook's process group at its end; " +
		"start services with systemctl (or systemd-run), not in the hook's background, so that they outlive it"
	for head := 40; head < 70; head++ {
		for tail := 30; tail < 60; tail++ {
			got := headAndTail(msg, head, tail)
			h, tl, ok := strings.Cut(got, " … ")
			if !ok {
				t.Fatalf("%d/%d: not shortened: %q", head, tail, got)
			}
			letter := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '\'' }
			s := len(msg) - len(tl)
			if !strings.HasPrefix(msg, h) || !strings.HasSuffix(msg, tl) || letter(msg[len(h)-1]) && letter(msg[len(h)]) || letter(msg[s-1]) && letter(msg[s]) {
				t.Fatalf("%d/%d: cut mid-word: %q", head, tail, got)
			}
		}
	}
}
