package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// serve answers op on nc with answer's result or error, as the control plane would.
func serve[Req any](t *testing.T, nc *nats.Conn, op string, answer func(Req) (any, *api.Error)) {
	t.Helper()
	sub, err := nc.Subscribe(api.AdminSubject(op), func(m *nats.Msg) {
		var req Req
		resp := api.AdminResponse{V: api.ProtocolVersion}
		if err := api.DecodeAdminRequest(op, m.Data, &req); err != nil {
			resp.Error = &api.Error{Code: api.CodeBadRequest, Message: err.Error()}
		} else if res, ae := answer(req); ae != nil {
			resp.Error = ae
		} else {
			resp.Result, _ = json.Marshal(res)
		}
		out, _ := json.Marshal(resp)
		_ = m.Respond(out)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

var errTooLarge = &api.Error{Code: api.CodeTooLarge, Message: "too large"}

// TestNodesAsksForSmallerPagesWhenTooLarge: a page the control plane could not
// send (too_large) is asked for again at half the size, and the pages after it at
// that size, until the roster is whole.
func TestNodesAsksForSmallerPagesWhenTooLarge(t *testing.T) {
	nc := startBroker(t)
	const n, fits = 1000, 300
	var limits []int
	serve(t, nc, api.OpNodes, func(req api.NodesRequest) (any, *api.Error) {
		limits = append(limits, req.Limit)
		if req.Limit == 0 || req.Limit > fits {
			return nil, errTooLarge
		}
		var out api.NodesResult
		for i := 0; i < n && len(out.Nodes) < req.Limit; i++ {
			if id := fmt.Sprintf("n-%04d", i); id > req.After {
				out.Nodes = append(out.Nodes, api.NodeView{ID: id})
			}
		}
		if last := out.Nodes[len(out.Nodes)-1].ID; last != fmt.Sprintf("n-%04d", n-1) {
			out.Next = last
		}
		return out, nil
	})
	all, err := newClient(nc, 5*time.Second, 5*time.Second).Nodes(api.NodesRequest{})
	if err != nil || len(all.Nodes) != n || all.Next != "" {
		t.Fatalf("%d nodes, next %q, %v; want %d", len(all.Nodes), all.Next, err, n)
	}
	if want := []int{0, 1000, 500, 250, 250, 250, 250}; !slices.Equal(limits, want) {
		t.Errorf("asked with limits %v, want %v", limits, want)
	}

	// Too large at any size: said, not asked for forever.
	nc2 := startBroker(t)
	asked := 0
	serve(t, nc2, api.OpNodes, func(api.NodesRequest) (any, *api.Error) { asked++; return nil, errTooLarge })
	_, err = newClient(nc2, 5*time.Second, 5*time.Second).Nodes(api.NodesRequest{})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeTooLarge || asked != 11 {
		t.Errorf("too large at one node: %v after %d requests; want too_large after 11 (the default page, then 1000 halved down to 1)", err, asked)
	}
}

// TestProgressFollowsWhatIsLeft: an answer that covers only the first targets
// (Left) is followed by a request about the rest; one the control plane could not
// send is asked again about half as many; the result answers for every target in
// order.
func TestProgressFollowsWhatIsLeft(t *testing.T) {
	nc := startBroker(t)
	const n, fits = 4500, 700
	var sizes []int
	serve(t, nc, api.OpProgress, func(req api.ProgressRequest) (any, *api.Error) {
		sizes = append(sizes, len(req.Targets))
		if len(req.Targets) > 1500 {
			return nil, errTooLarge
		}
		out := api.ProgressResult{Others: []api.TargetProgress{}}
		answered := min(len(req.Targets), fits)
		for _, tg := range req.Targets[:answered] {
			if tg.Version%2 == 0 {
				out.Converged++
			} else {
				out.Others = append(out.Others, api.TargetProgress{Node: tg.Node, State: api.ProgressPending})
			}
		}
		out.Left = len(req.Targets) - answered
		return out, nil
	})
	targets := make([]api.Assignment, n)
	for i := range targets {
		targets[i] = api.Assignment{Node: fmt.Sprintf("n-%04d", i), Version: uint64(i)}
	}
	res, err := newClient(nc, 5*time.Second, 5*time.Second).Progress(api.ProgressRequest{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if res.Converged != n/2 || len(res.Others) != n/2 || res.Left != 0 {
		t.Fatalf("%d converged, %d others, %d left", res.Converged, len(res.Others), res.Left)
	}
	for i, o := range res.Others {
		if o.Node != targets[2*i+1].Node {
			t.Fatalf("others[%d] is %s, want %s", i, o.Node, targets[2*i+1].Node)
		}
	}
	if sizes[0] != api.MaxNodesPage || sizes[1] != api.MaxNodesPage/2 || slices.Max(sizes[2:]) > api.MaxNodesPage/2 {
		t.Errorf("asked about %v targets at a time", sizes)
	}

	// An answer that does not add up is refused, not taken for progress.
	nc2 := startBroker(t)
	serve(t, nc2, api.OpProgress, func(req api.ProgressRequest) (any, *api.Error) {
		return api.ProgressResult{Others: []api.TargetProgress{}, Left: len(req.Targets)}, nil
	})
	if _, err := newClient(nc2, 5*time.Second, 5*time.Second).Progress(api.ProgressRequest{Targets: targets[:3]}); !errors.Is(err, ErrProgressAnswer) {
		t.Errorf("an answer for none of the targets: %v", err)
	}
}

// TestAnOperationAnOlderLeaderDoesNotKnowSaysSo (a walkthrough): during an upgrade
// in the documented order the leader, upgraded last, runs the older meshctl, and
// answered `operator add` with "unknown operation operator.add" and nothing more.
// The answer now says the leading control node is older and what to do; a newer
// node's own words (naming the upgrade) are kept as they are.
func TestAnOperationAnOlderLeaderDoesNotKnowSaysSo(t *testing.T) {
	nc := startBroker(t)
	serve(t, nc, api.OpOperatorList, func(api.OperatorListRequest) (any, *api.Error) {
		return nil, &api.Error{Code: api.CodeNotFound, Message: `unknown operation "operator.list"`}
	})
	var res api.OperatorListResult
	err := newClient(nc, 5*time.Second, 5*time.Second).Call(api.OpOperatorList, api.OperatorListRequest{}, &res)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeNotFound || !strings.Contains(ae.Message, "the leading control node runs a meshctl older than this one") {
		t.Fatalf("an older leader's unknown operation: %v", err)
	}
	nc2 := startBroker(t)
	const newer = `unknown operation "operator.list": this control node runs meshctl 0.2.0, which does not know it; upgrade the control nodes`
	serve(t, nc2, api.OpOperatorList, func(api.OperatorListRequest) (any, *api.Error) {
		return nil, &api.Error{Code: api.CodeNotFound, Message: newer}
	})
	if err := newClient(nc2, 5*time.Second, 5*time.Second).Call(api.OpOperatorList, api.OperatorListRequest{}, &res); !errors.As(err, &ae) || ae.Message != newer {
		t.Fatalf("a newer node's own words: %v", err)
	}
}
