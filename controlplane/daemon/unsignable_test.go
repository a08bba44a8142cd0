package daemon

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestABodyThisVersionCannotSignIsFailing (audit of mixed versions, finding 1): a
// body declared by an older meshctl whose rules took it (here a path element that
// begins with '-', refused since) can never be signed again: the node's copy is not
// re-signed and goes stale, and `status` showed it converged. Its view is failing,
// unsignable_body, naming the version, until it is declared again; a node declared
// a body this version takes is not.
func TestABodyThisVersionCannotSignIsFailing(t *testing.T) {
	d := fleet(t, 2)
	old := json.RawMessage(`{"files":[{"path":"etc/-x.conf","content":"x"}]}`)
	if res, err := d.raft.Apply(state.Command{Op: state.OpDeclare, At: d.now().UTC(), Declare: &state.DeclareCmd{
		Selector: state.Selector{Nodes: []string{"n-0"}}, Body: old}}, time.Minute); err != nil || res.Err != nil {
		t.Fatalf("an older meshctl's declaration: %v %v", err, res.Err)
	}
	applied := []state.StatusReport{
		{Node: "n-0", Applied: state.Applied{HaveApplied: true, Version: 1, KeyringEpoch: 1, ReportedAt: time.Now()}},
		{Node: "n-1", Applied: state.Applied{HaveApplied: true, Version: 0, KeyringEpoch: 1, ReportedAt: time.Now()}},
	}
	if res, err := d.raft.Apply(state.Command{Op: state.OpStatus, Status: &state.StatusCmd{Reports: applied}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	views := func() map[string]api.NodeView {
		res, err := d.nodes(api.NodesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]api.NodeView{}
		for _, v := range res.Nodes {
			out[v.ID] = v
		}
		return out
	}
	v := views()
	if n := v["n-0"]; n.Converged || n.LastError == nil || n.LastError.Code != api.UnsignableBody || n.LastError.Version != 1 {
		t.Fatalf("n-0, declared a body this version refuses: %+v, last error %+v", n, n.LastError)
	}
	if n := v["n-1"]; !n.Converged || n.LastError != nil {
		t.Fatalf("n-1, declared nothing this version refuses: %+v", n)
	}
	// The metrics count it as status does (a reviewer's reading: converged there
	// while status exited 5 naming it).
	if c := d.nodeCounts(d.now()); c[stateFailing] != 1 || c[stateConverged] != 1 {
		t.Fatalf("mesh_nodes: failing %d converged %d, want 1 and 1: %v", c[stateFailing], c[stateConverged], c)
	}
	// The verdict outlives the encoded bodies' cache, which a fleet declared a
	// body per node clears over and over: the roster does not parse each body
	// again on every page (under the state's lock, where it did).
	for i := range 1100 {
		d.signer.encoded(fmt.Sprintf("digest-%d", i), []byte(`{"files":[]}`))
	}
	var digest string
	d.fsm.Read(func(s *state.State) { digest = s.Nodes["n-0"].Declared.BodyDigest })
	if refused, known := d.signer.verdict(digest); !known || refused == nil {
		t.Fatalf("n-0's body's verdict was lost with the encoded bodies: %v %v", refused, known)
	}
	if n := views()["n-0"]; n.LastError == nil || n.LastError.Code != api.UnsignableBody {
		t.Fatalf("n-0 after the encoded bodies' cache was cleared: %+v", n.LastError)
	}
	// Declared again with a body this version takes: no longer failing for it.
	if _, err := d.declare(api.DeclareRequest{Nodes: []string{"n-0"}, Body: json.RawMessage(`{"files":[{"path":"etc/x.conf","content":"x"}]}`)}, requestCall{}); err != nil {
		t.Fatal(err)
	}
	if n := views()["n-0"]; n.LastError != nil {
		t.Fatalf("n-0 declared again: %+v", n.LastError)
	}
}

// TestAVerdictIsKeptForABodyJudgedBefore (a review's run): a body whose encoding
// the signer kept, its verdict cleared (past maxVerdicts), was returned from the
// encoded bodies without a verdict: an unsignable one then showed converged. The
// verdict is kept again whenever the body is asked for.
func TestAVerdictIsKeptForABodyJudgedBefore(t *testing.T) {
	s := newSigner(nil)
	bad := []byte(`{"files":[{"path":"etc/-x.conf","content":"x"}]}`)
	if _, err := s.encoded("bad", bad); err == nil {
		t.Fatal("a body this version refuses was encoded")
	}
	s.mu.Lock()
	clear(s.verdicts) // as past maxVerdicts, the refused body kept
	s.mu.Unlock()
	if _, err := s.encoded("bad", bad); err == nil {
		t.Fatal("asked again: no refusal")
	}
	if refused, known := s.verdict("bad"); !known || refused == nil {
		t.Fatalf("the verdict after the body was asked for again: %v, known %t", refused, known)
	}
}

// TestAHostCannotReportTheControlPlanesCodes (a review's reading): key_shared,
// unsignable_body and keyring_gone are the control plane's verdicts; a host that reported one as
// its own error had status tell the operator to revoke it, on its word. Such a
// report is dropped as malformed, and nothing of it recorded.
func TestAHostCannotReportTheControlPlanesCodes(t *testing.T) {
	d := fleet(t, 1)
	before := d.guard.snapshot().Dropped[DropKey{Subject: "status", Reason: ReasonMalformed}]
	codes := api.ControlPlaneVerdicts()
	for _, code := range codes {
		data, err := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "n-0", HaveApplied: true, AppliedVersion: 0, KeyringEpoch: 1,
			Error: &api.StatusError{Code: code, Message: "two machines hold this node's key: revoke it"}})
		if err != nil {
			t.Fatal(err)
		}
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject("n-0"), Data: data})
	}
	d.status.flush()
	if n := d.guard.snapshot().Dropped[DropKey{Subject: "status", Reason: ReasonMalformed}]; n != before+uint64(len(codes)) || len(codes) < 3 {
		t.Errorf("%d reports dropped as malformed, want the %d naming the control plane's codes", n-before, len(codes))
	}
	if n := d.fsmNode(t, "n-0"); n.Applied.ErrorCode != "" {
		t.Errorf("a host's report of %q recorded", n.Applied.ErrorCode)
	}
}
