package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
	"mesh/controlplane/state"
)

// failingFleet is fleet(n) with every node's hook failing with msg on v1, and
// labels given to each: what a rollout that broke a hook leaves a fleet like.
func failingFleet(t *testing.T, n int, msg string, labels map[string]string) *Daemon {
	t.Helper()
	d := fleet(t, n)
	reports := make([]state.StatusReport, n)
	for i := range n {
		reports[i] = state.StatusReport{Node: fmt.Sprintf("n-%d", i), Applied: state.Applied{HaveApplied: true, Version: 1,
			Agent: "meshhost/0.1.0+git20261203180012.5e1f0c2d9a47", ErrorCode: api.StatusHookFailed, ErrorMessage: msg, ErrorVersion: 1,
			ReportedAt: time.Now()}}
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Reports: reports}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	// Concurrent proposals, as fleet seeds: Raft batches them.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			cmd := state.Command{Op: state.OpLabel, Label: &state.LabelCmd{Node: fmt.Sprintf("n-%d", i), Labels: labels}}
			if res, err := d.raft.Apply(cmd, time.Minute); err != nil || res.Err != nil {
				t.Errorf("label n-%d: %v %v", i, err, res.Err)
			}
		}()
	}
	wg.Wait()
	return d
}

// bigLabels is the most labels a node carries, each as long as a label may be.
func bigLabels() map[string]string {
	labels := make(map[string]string, api.MaxLabels)
	for i := range api.MaxLabels {
		labels[fmt.Sprintf("%02d-%s", i, strings.Repeat("k", 60))] = strings.Repeat("v", 63)
	}
	return labels
}

// answerSize is the size of the message serveAdmin sends for result.
func answerSize(t *testing.T, result any) int {
	t.Helper()
	raw, err := encodeJSON(result)
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeJSON(api.AdminResponse{V: api.ProtocolVersion, Result: raw})
	if err != nil {
		t.Fatal(err)
	}
	return len(data)
}

// TestRosterPagesFitTheMessageCap: during a fleet-wide failure each node's record
// holds up to 512 bytes of a hook's output, and its labels up to 8 KB: a page of
// MaxNodesPage such records is 20 MiB, ten times the broker's message cap, which
// the broker refused to carry, and `meshctl nodes` and `status` were left without
// an answer. Pages are cut by size too, each fits, and the client gets every node.
func TestRosterPagesFitTheMessageCap(t *testing.T) {
	const n = 2100
	// A hook whose output is JSON or Windows paths: quotes and backslashes are two
	// bytes each in JSON; and markup, which Go escapes to six bytes unless told not to.
	msg := "hook restart-app: exit status 1: File <module> & <init>: " + strings.Repeat(`"\`, 256)
	msg = msg[:api.MaxStatusMessageLen]
	d := failingFleet(t, n, msg, bigLabels())
	limit := int(d.conns.admin.MaxPayload())

	var views []api.NodeView
	d.fsm.Read(func(s *state.State) {
		for i := range api.MaxNodesPage {
			views = append(views, d.view(s.Nodes[fmt.Sprintf("n-%d", i)], d.now(), 0))
		}
	})
	if size := answerSize(t, api.NodesResult{Nodes: views}); size <= limit {
		t.Fatalf("a page of %d nodes is %d bytes, within the %d byte cap: the test does not test", len(views), size, limit)
	}

	pages, got, after := 0, 0, ""
	for {
		page, err := d.nodes(api.NodesRequest{After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got += len(page.Nodes)
		if size := answerSize(t, page); size > limit {
			t.Fatalf("page %d: %d nodes in %d bytes, over the %d byte cap", pages, len(page.Nodes), size, limit)
		}
		if page.Next == "" {
			break
		}
		if page.Next != page.Nodes[len(page.Nodes)-1].ID {
			t.Fatalf("page %d: next %q, its last node %q", pages, page.Next, page.Nodes[len(page.Nodes)-1].ID)
		}
		after = page.Next
	}
	t.Logf("%d nodes in %d pages of at most %d bytes", got, pages, limit)
	if got != n {
		t.Fatalf("the pages hold %d nodes, want %d", got, n)
	}

	nc := servedToOperators(t, d)
	c := operator.NewClient(nc, 30*time.Second)
	start := time.Now()
	all, err := c.Nodes(api.NodesRequest{})
	if err != nil {
		t.Fatalf("nodes of a failing fleet: %v", err)
	}
	t.Logf("operator.Client.Nodes: %d nodes in %v", len(all.Nodes), time.Since(start).Round(time.Millisecond))
	ids := make([]string, len(all.Nodes))
	for i, v := range all.Nodes {
		ids[i] = v.ID
	}
	if len(ids) != n || all.Next != "" || !slices.IsSorted(ids) || len(slices.Compact(ids)) != n {
		t.Fatalf("%d nodes, next %q: want %d, sorted, each once, and no next page", len(all.Nodes), all.Next, n)
	}
	if all.Nodes[0].LastError == nil || all.Nodes[0].LastError.Message != msg {
		t.Fatalf("a node's error came back as %+v", all.Nodes[0].LastError)
	}

	// Sent as it reads: a traceback's <module> is not six bytes a character.
	req, err := api.EncodeAdminRequest(api.OpNodes, api.NodesRequest{Nodes: []string{"n-1"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := nc.Request(api.AdminSubject(api.OpNodes), req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw.Data, []byte("<module> & <init>")) {
		t.Errorf("the answer escapes markup: %.300s", raw.Data)
	}
}

// TestProgressAnswersFitTheMessageCap: declare --wait asks about MaxNodesPage
// targets at a time; 2,000 failures with long messages are over the broker's
// message cap. The control plane answers for as many as fit and says how many it
// left (Left), and the client asks about those again.
func TestProgressAnswersFitTheMessageCap(t *testing.T) {
	const n = 2100
	msg := ("hook restart-app: exit status 1: " + strings.Repeat(`"\`, 256))[:api.MaxStatusMessageLen]
	d := failingFleet(t, n, msg, nil)
	limit := int(d.conns.admin.MaxPayload())
	targets := make([]api.Assignment, n)
	for i := range targets {
		targets[i] = api.Assignment{Node: fmt.Sprintf("n-%d", i), Version: 1}
	}
	// One node converged, one unknown: counts and order survive the cut.
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Reports: []state.StatusReport{
		{Node: "n-3", Applied: state.Applied{HaveApplied: true, Version: 1, ReportedAt: time.Now()}}}}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	targets[5].Node = "ghost"

	first, err := d.progress(api.ProgressRequest{Targets: targets[:api.MaxNodesPage]})
	if err != nil {
		t.Fatal(err)
	}
	if size := answerSize(t, first); first.Left == 0 || size > limit {
		t.Fatalf("answer for %d targets: %d bytes (cap %d), %d left: want a cut answer within the cap", api.MaxNodesPage, size, limit, first.Left)
	}
	if answered := api.MaxNodesPage - first.Left; first.Converged != 1 || len(first.Others) != answered-1 || first.Others[5-1].State != api.ProgressOffline {
		t.Fatalf("answered for %d: %d converged, %d others (the 5th %+v)", answered, first.Converged, len(first.Others), first.Others[4])
	}
	t.Logf("first answer: %d of %d targets in %d bytes", api.MaxNodesPage-first.Left, api.MaxNodesPage, answerSize(t, first))

	c := operator.NewClient(servedToOperators(t, d), 30*time.Second)
	all, err := c.Progress(api.ProgressRequest{Targets: targets})
	if err != nil {
		t.Fatalf("progress of a failing fleet: %v", err)
	}
	if all.Converged != 1 || len(all.Others) != n-1 || all.Left != 0 {
		t.Fatalf("%d converged, %d others, %d left; want 1, %d, 0", all.Converged, len(all.Others), all.Left, n-1)
	}
	for i, o := range all.Others {
		want := targets[i].Node
		if i >= 3 {
			want = targets[i+1].Node // n-3 converged
		}
		if o.Node != want {
			t.Fatalf("others[%d] is %s, want %s: not in the request's order", i, o.Node, want)
		}
	}
}

// TestAnAnswerOverTheCapIsSaid: an answer the broker will not carry is answered
// with a short too_large, not with silence that meshctl reads as a control plane
// slow or down. The answer here is made one byte over the cap and sent by reply,
// as serveAdmin sends every answer, through the operators' service import.
func TestAnAnswerOverTheCapIsSaid(t *testing.T) {
	d := fleet(t, 0)
	big, _ := json.Marshal(strings.Repeat("x", int(d.conns.admin.MaxPayload())))
	for _, op := range []string{api.OpNodes, api.OpDeclare} {
		sub, err := d.conns.admin.Subscribe(api.AdminSubject(op), func(m *nats.Msg) {
			d.reply(op, m.Reply, api.AdminResponse{V: api.ProtocolVersion, Result: big})
		})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect("", nats.InProcessServer(d.broker.InProcess()), nats.Token(operatorToken))
		if err != nil {
			t.Fatal(err)
		}
		err = operator.NewClient(nc, 5*time.Second).Call(op, struct{}{}, &struct{}{})
		nc.Close()
		_ = sub.Unsubscribe()
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.CodeTooLarge {
			t.Fatalf("%s: %v, want too_large", op, err)
		}
		want := "ask for less"
		if !api.ReadOnly(op) {
			want = "the change was carried out"
		}
		if !strings.Contains(ae.Message, want) {
			t.Errorf("%s: %q does not say %q", op, ae.Message, want)
		}
	}
}

// TestAPageHoldsOneEntryPastItsBudget: an entry larger than the whole budget
// still goes out alone (answered too_large if the broker will not carry it): an
// empty page would be asked for again, forever.
func TestAPageHoldsOneEntryPastItsBudget(t *testing.T) {
	page := api.NodesResult{Nodes: []api.NodeView{{ID: "a"}, {ID: "b"}}}
	fitPage(&page, 10)
	if len(page.Nodes) != 1 || page.Next != "a" {
		t.Errorf("roster page: %d nodes, next %q; want a alone, then b", len(page.Nodes), page.Next)
	}
	// Targets a to e: c and e not converged.
	progress := api.ProgressResult{Converged: 3, Others: []api.TargetProgress{{Node: "c"}, {Node: "e"}}}
	fitProgress(&progress, []int{2, 4}, 5, 10)
	if progress.Converged != 3 || len(progress.Others) != 1 || progress.Left != 1 {
		t.Errorf("progress: %+v; want a, b and d converged, c, and e left", progress)
	}
}
