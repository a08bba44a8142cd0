package integration

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// controlStatusJSON is what `meshctl control status --json` prints.
type controlStatusJSON struct {
	Leader       string              `json:"leader"`
	Voters       []string            `json:"voters"`
	Quorum       int                 `json:"quorum"`
	Missing      []string            `json:"missing"`
	Certificates []certificateJSON   `json:"certificates"`
	Answered     []api.ControlStatus `json:"answered"`
}

// certificateJSON is one of control status's "certificates".
type certificateJSON struct {
	Node        string    `json:"node"`
	Certificate string    `json:"certificate"`
	NotAfter    time.Time `json:"not_after"`
	State       string    `json:"state"`
}

func controlStatusOf(t *testing.T, cp *harness.ControlPlane) (controlStatusJSON, harness.Result) {
	t.Helper()
	r := cp.Ctl("control", "status", "--json")
	var s controlStatusJSON
	if r.Code == 0 || r.Code == 3 {
		if err := json.Unmarshal([]byte(r.Stdout), &s); err != nil {
			t.Fatalf("control status --json (exit %d): %v\n%s", r.Code, err, r.Combined())
		}
	}
	return s, r
}

// certificateDates are when the certificates in the data directory of the control
// node id, among cps, expire: its tls.pem and its ca.pem.
func certificateDates(t *testing.T, cps []*harness.ControlPlane, id string) (leaf, ca time.Time) {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(id, "cp-"))
	if err != nil || i < 1 || i > len(cps) {
		t.Fatalf("control node %q is none of the %d started", id, len(cps))
	}
	dir := datadir.Dir(cps[i-1].Dir)
	for _, f := range []struct {
		name string
		at   *time.Time
	}{{datadir.TLSCertFile, &leaf}, {datadir.CACertFile, &ca}} {
		raw, err := dir.ReadFile(f.name)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.ParseCertificatePEM(raw)
		if err != nil {
			t.Fatal(err)
		}
		*f.at = cert.NotAfter
	}
	return leaf, ca
}

func answeredBy(s controlStatusJSON) []string {
	var out []string
	for _, a := range s.Answered {
		out = append(out, a.Node)
	}
	return out
}

// TestControlStatusWithoutQuorum: three control nodes lose two of them for good.
// Every operator request went to the leader, so with the quorum lost meshctl could
// only say that no control node answered (exit 3), and nothing said which voters
// were missing: what the recovery (raft/peers.json, from the survivors) needs.
// `meshctl control status` asks every control node for its own view, leader or not:
// with all three running it names the leader; with two killed, the survivor answers
// that it has no leader, that cp-2 and cp-3 do not answer and that a leader needs 2
// of 3 (exit 3); after the recovery from the survivor alone, it leads a one-voter
// configuration (exit 0). The built binaries.
func TestControlStatusWithoutQuorum(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cps := threeControlNodes(t, "quorum")
	cp1, cp2, cp3 := cps[0], cps[1], cps[2]

	s, r := controlStatusOf(t, cp1)
	if r.Code != 0 || s.Leader == "" || len(s.Missing) != 0 || !slices.Equal(answeredBy(s), []string{"cp-1", "cp-2", "cp-3"}) || len(s.Voters) != 3 || s.Quorum != 2 {
		t.Fatalf("control status with every node running (exit %d): %+v\n%s", r.Code, s, r.Stderr)
	}
	for _, a := range s.Answered {
		if a.Raft != api.RaftStateLeader && a.Leader != s.Leader {
			t.Errorf("%s follows %q, the leader is %s", a.Node, a.Leader, s.Leader)
		}
		if len(a.Control) != 3 || len(a.Members) != 3 {
			t.Errorf("%s sees %d control nodes and %d members, want 3 and 3", a.Node, len(a.Control), len(a.Members))
		}
		// Each node's certificates, the others' by their heartbeats: every one
		// alive in the leader's view (it heard each join); cp-3, started last,
		// may not have heard cp-2's next heartbeat yet.
		for _, v := range a.Control {
			if v.State != api.StateAlive && a.Node != s.Leader {
				continue
			}
			leaf, ca := certificateDates(t, cps, v.ID)
			if !v.CertNotAfter.Equal(leaf) || !v.CANotAfter.Equal(ca) {
				t.Errorf("%s shows %s (%s) with certificates expiring at %v and %v; its tls.pem and ca.pem do at %v and %v", a.Node, v.ID, v.State, v.CertNotAfter, v.CANotAfter, leaf, ca)
			}
		}
	}
	if len(s.Certificates) != 6 {
		t.Errorf("control status --json gives %d certificates, want 6 (each node's and the CA's it serves with): %+v", len(s.Certificates), s.Certificates)
	}
	for _, c := range s.Certificates {
		if c.State != "valid" {
			t.Errorf("control status --json: %+v, want valid", c)
		}
	}

	cp2.Process().Kill()
	cp3.Process().Kill()
	cp2.Process().Wait(10 * time.Second)
	cp3.Process().Wait(10 * time.Second)

	until(t, "the survivor says it has no leader and which voters are missing", 20*time.Second, func() string {
		s, r := controlStatusOf(t, cp1)
		if r.Code != 3 || s.Leader != "" || !slices.Equal(s.Missing, []string{"cp-2", "cp-3"}) || !slices.Equal(answeredBy(s), []string{"cp-1"}) {
			return r.Combined()
		}
		if a := s.Answered[0]; a.Raft == api.RaftStateLeader || a.Leader != "" {
			return "cp-1 still says it leads or follows a leader: " + r.Stdout
		}
		return ""
	})
	// The operator API has nobody to serve it, and says where to look.
	if r := cp1.Ctl("nodes", "--leader-wait", "1s"); r.Code != 3 || !strings.Contains(r.Stderr, "meshctl control status") {
		t.Fatalf("nodes without a quorum (exit %d, want 3 and a pointer to control status):\n%s", r.Code, r.Combined())
	}
	r = cp1.Ctl("control", "status")
	if r.Code != 3 || !strings.Contains(r.Stdout, "no leader: 1 of 3 voters answer, and a leader needs 2") ||
		!strings.Contains(r.Stdout, "(cp-2, cp-3)") || !strings.Contains(r.Stdout, "Recovering from lost quorum") {
		t.Fatalf("control status as text without a quorum (exit %d):\n%s", r.Code, r.Combined())
	}

	// The recovery the message points to, from what control status named.
	s, _ = controlStatusOf(t, cp1)
	var raftAddr string
	for _, m := range s.Answered[0].Members {
		if m.ID == "cp-1" {
			raftAddr = m.Address
		}
	}
	if raftAddr != cp1.Raft {
		t.Fatalf("control status gives cp-1's Raft address as %q, want %s", raftAddr, cp1.Raft)
	}
	cp1.Process().Kill()
	cp1.Process().Wait(10 * time.Second)

	// Restarted without a quorum, it waits for a leader; its health endpoints answer
	// meanwhile, and say why it is not ready (the port stayed closed until ready).
	cp1.StartServe()
	harness.Eventually(t, 20*time.Second, "cp-1's /readyz answers while it waits for a quorum", func() bool {
		return httpStatus("http://"+cp1.Metrics+"/readyz") == http.StatusServiceUnavailable
	})
	if code := httpStatus("http://" + cp1.Metrics + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while waiting for a quorum: %d, want 200", code)
	}
	if body := httpBody(t, "http://"+cp1.Metrics+"/readyz"); !strings.Contains(body, "starting: no Raft leader is known") {
		t.Fatalf("/readyz while waiting for a quorum says %q", body)
	}
	// Its Raft figures are scraped meanwhile: that it leads nothing is what an
	// alert on mesh_raft_leader needs to see.
	if code := httpStatus("http://" + cp1.Metrics + "/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics while waiting for a quorum: %d, want 200", code)
	}
	if body := httpBody(t, "http://"+cp1.Metrics+"/metrics"); !strings.Contains(body, "\nmesh_raft_leader 0\n") ||
		!strings.Contains(body, "\nmesh_raft_last_index ") || !strings.Contains(body, "\nprocess_resident_memory_bytes ") {
		t.Fatalf("/metrics while waiting for a quorum lacks Raft's or the process's figures:\n%s", body)
	}
	// It has heard no leader since it started: that is silence, not a contact now.
	harness.Eventually(t, 10*time.Second, "cp-1's mesh_raft_last_contact_seconds counts its silence", func() bool {
		return harness.Sum(harness.Scrape(t, "http://"+cp1.Metrics+"/metrics"), "mesh_raft_last_contact_seconds") >= 1
	})
	cp1.Process().Kill()
	cp1.Process().Wait(10 * time.Second)

	writeFile(t, filepath.Join(cp1.Dir, "raft", "peers.json"), `[{"id":"cp-1","address":"`+raftAddr+`","non_voter":false}]`)
	cp1.Serve()
	s, r = controlStatusOf(t, cp1)
	if r.Code != 0 || s.Leader != "cp-1" || len(s.Missing) != 0 || !slices.Equal(s.Voters, []string{"cp-1"}) || s.Quorum != 1 {
		t.Fatalf("control status after the recovery (exit %d): %+v\n%s", r.Code, s, r.Combined())
	}
}

// TestJoinWithTheMeshDownExitsUnreachable: a join that reaches no broker exited 1,
// where every other command that cannot reach the control plane exits 3 (and the
// message says to retry); run again once the mesh is back, the same token joins.
func TestJoinWithTheMeshDownExitsUnreachable(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "joindown")
	cp1.Serve()
	tok, cp2 := cp1.ControlToken("cp-2")
	cp1.Process().Kill()
	cp1.Process().Wait(10 * time.Second)
	if r := cp2.Join(tok); r.Code != 3 || !strings.Contains(r.Stderr, "no broker of the mesh could be reached") {
		t.Fatalf("join with the mesh down (exit %d, want 3):\n%s", r.Code, r.Combined())
	}
	cp1.Serve()
	if r := cp2.Join(tok); r.Code != 0 {
		t.Fatalf("the same join once the mesh is back (exit %d):\n%s", r.Code, r.Combined())
	}
}
