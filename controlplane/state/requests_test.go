package state

import (
	"bytes"
	"testing"
	"time"
)

const (
	reqA = "0123456789abcdef0123456789abcdef"
	reqB = "fedcba9876543210fedcba9876543210"
)

// requested is c carried under an operator's request id, stamped with the rules that
// keep them, as a leader proposes it when every control node applies them.
func requested(c Command, id string) Command {
	c.Rules, c.Request = RulesRequests, id
	return c
}

// TestARequestIsCarriedOutOnce: a declaration sent again under the id of one already
// carried out (its answer lost) changes nothing, and its result names the first's
// record; another id declares again.
func TestARequestIsCarriedOutOnce(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker, "web-2": RoleWorker})
	body := `{"files":[{"path":"a","content":"x"}]}`
	sel := Selector{All: true}
	first := m.must(requested(declareCmd(sel, body, t0.Add(time.Minute)), reqA))
	if first.Repeated || len(first.Assignments) != 2 {
		t.Fatalf("first sending: %+v", first)
	}
	snap := m.snapshot()
	again := m.must(requested(declareCmd(sel, body, t0.Add(time.Minute+5*time.Second)), reqA))
	if !again.Repeated || again.Request == nil || again.Request.Body != BodyDigest([]byte(body)) || again.Request.Selector != sel.Digest() || len(again.Assignments) != 0 {
		t.Fatalf("sent again: %+v; want it repeated, with the first's record", again)
	}
	if !bytes.Equal(m.snapshot(), snap) {
		t.Errorf("the same request again changed the state")
	}
	for _, id := range []string{"web-1", "web-2"} {
		if v := m.state().Nodes[id].Declared.Version; v != first.Assignments[0].Version {
			t.Errorf("%s declared v%d after the request was sent again; want v%d, the first's", id, v, first.Assignments[0].Version)
		}
	}
	other := m.must(requested(declareCmd(sel, body, t0.Add(2*time.Minute)), reqB))
	if other.Repeated || other.Assignments[0].Version != first.Assignments[0].Version+1 {
		t.Fatalf("another request: %+v; want a new version", other)
	}
}

// TestARequestIDOutsideItsRulesIsNotKept: a command that carries an id without the
// rules that keep them (a node on older rules ignores the id: it would carry out the
// same request twice while the others did not) is applied as if it had none, and
// records nothing.
func TestARequestIDOutsideItsRulesIsNotKept(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	c := declareCmd(Selector{Nodes: []string{"web-1"}}, `{"files":[]}`, t0.Add(time.Minute))
	c.Request = reqA
	one, two := m.must(c), m.must(c)
	if one.Repeated || two.Repeated || two.Assignments[0].Version != one.Assignments[0].Version+1 {
		t.Fatalf("unstamped, twice: %+v then %+v; want two declarations", one, two)
	}
	if len(m.state().Requests) != 0 {
		t.Fatalf("requests on record: %v; want none", m.state().Requests)
	}
}

// TestARefusedRequestIsNotKept: a request the state machine refused did nothing, so
// the same request sent again may yet be carried out.
func TestARefusedRequestIsNotKept(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	m.must(revokeCmd("web-1", t0.Add(time.Minute)))
	res := m.apply(requested(declareCmd(Selector{Nodes: []string{"web-1"}}, `{"files":[]}`, t0.Add(2*time.Minute)), reqA))
	if res.Err == nil {
		t.Fatal("a declaration to a revoked node only was carried out")
	}
	if _, ok := m.state().Requests[reqA]; ok {
		t.Fatal("a refused request is on record")
	}
}

// TestRequestIDsAreKeptForTheirRetention: an id stays on record for RequestRetention
// after its change, by the times of later commands, and a restored snapshot keeps
// it; after that it is dropped, and the state holds no more than the last hour's.
func TestRequestIDsAreKeptForTheirRetention(t *testing.T) {
	m := enrolled(t, map[string]string{"web-1": RoleWorker})
	sel := Selector{Nodes: []string{"web-1"}}
	at := t0.Add(time.Minute)
	m.must(requested(declareCmd(sel, `{"files":[]}`, at), reqA))

	restored := NewFSM()
	if err := restored.Restore(nopCloser{bytes.NewReader(m.snapshot())}); err != nil {
		t.Fatal(err)
	}
	r := &machine{t: t, f: restored, index: m.index}
	if res := r.must(requested(declareCmd(sel, `{"files":[]}`, at.Add(RequestRetention)), reqA)); !res.Repeated {
		t.Fatalf("within the retention, after a restore: %+v; want it repeated", res)
	}
	m.must(requested(declareCmd(sel, `{"files":[{"path":"b","content":"y"}]}`, at.Add(RequestRetention+time.Second)), reqB))
	if _, ok := m.state().Requests[reqA]; ok {
		t.Fatal("an id past its retention is still on record")
	}
	if len(m.state().Requests) != 1 {
		t.Fatalf("requests on record: %v; want the last one", m.state().Requests)
	}
}
