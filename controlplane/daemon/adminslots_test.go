package daemon

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestReadsAreAnsweredWhileChangesWait: operators' changes that wait their turn
// (here, behind a change the test holds, as behind a commit a hung log write held)
// never keep a read from being answered; past adminChangesWaiting, one more change
// is refused at once, nothing done (NotDone), not kept waiting. Before (a review,
// with a frozen disk), reads and changes shared eight slots: two `meshctl token`
// runs, resent, took them all, and `meshctl nodes` went unanswered.
func TestReadsAreAnsweredWhileChangesWait(t *testing.T) {
	d := fleet(t, 1)
	nc := servedToOperators(t, d)
	d.adminMu.Lock()
	held := true
	defer func() {
		if held {
			d.adminMu.Unlock()
		}
	}()

	// Changes that wait their turn: revocations of a node that does not exist,
	// refused once their turn comes, taking every change slot.
	args, _ := json.Marshal(api.RevokeRequest{Node: "nobody"})
	body, _ := json.Marshal(api.AdminRequest{V: api.ProtocolVersion, Op: api.OpRevoke, Args: args})
	var wg sync.WaitGroup
	for range adminChangesWaiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc.Request(api.AdminSubject(api.OpRevoke), body, 20*time.Second)
		}()
	}
	time.Sleep(300 * time.Millisecond) // for them to be taken

	c := operator.NewClient(nc, 2*time.Second)
	var nodes api.NodesResult
	start := time.Now()
	if err := c.Call(api.OpNodes, api.NodesRequest{}, &nodes); err != nil {
		t.Fatalf("a read while %d changes wait: %v (after %s)", adminChangesWaiting, err, time.Since(start))
	}
	if len(nodes.Nodes) != 1 {
		t.Errorf("nodes answered %d nodes, want 1", len(nodes.Nodes))
	}

	m, err := nc.Request(api.AdminSubject(api.OpRevoke), body, 2*time.Second)
	if err != nil {
		t.Fatalf("one change more than the slots: %v, want an answer at once", err)
	}
	var resp api.AdminResponse
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Error == nil || resp.Error.Code != api.CodeUnavailable || !resp.NotDone {
		t.Fatalf("one change more than the slots: %s, want unavailable and not done", m.Data)
	}

	d.adminMu.Unlock()
	held = false
	wg.Wait()
	var ae *api.Error
	if err := c.Call(api.OpRevoke, api.RevokeRequest{Node: "nobody"}, &api.RevokeResult{}); !errors.As(err, &ae) || ae.Code != api.CodeNotFound {
		t.Errorf("a change once the others are done: %v, want %s (the node does not exist)", err, api.CodeNotFound)
	}
}
