package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestBootstrapMachineGone: the mesh started on one machine; a host enrolled with a
// token that names only it, and another such token was minted and not used yet. Two
// control nodes join, then the bootstrap machine's network is gone for good (the
// router drops everything to and from it, without a word). The running host learned
// the other brokers from the mesh's signed list and moves to them by itself. The
// unused token, which names only the lost machine, cannot enrol: meshhost says no
// broker answered and what to do; as docs/operations.md says ("Losing the bootstrap
// machine"), the operator removes the lost node, cancels the old token and mints a
// new one on a surviving node, which enrols at once.
func TestBootstrapMachineGone(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	n := newNetns(t, "nfb", "TestBootstrapMachineReplaced")
	needNft(t)
	router := n.router("r")
	flags := []string{"--raft-heartbeat", "500ms", "--reconcile", "1s", "--offline-after", "3s"}
	cp1 := n.bootstrapCP(router, 70, "bootgone", flags...)
	web := n.enrolHost(router, "web-1", "10.77.81", cp1, "--heartbeat", "1s")
	unused := cp1.ctl(t, "token", "--node", "web-2")
	if unused.Code != 0 {
		t.Fatalf("token: %s", unused.Combined())
	}
	cps := n.joinCPs(router, 70, cp1, flags...)
	harness.Eventually(t, 30*time.Second, "web-1 learns the three brokers", func() bool {
		r := web.run(t, "", bin.Meshhost, "status", "--state", web.dir, "--json")
		var st struct{ Brokers []string }
		return json.Unmarshal([]byte(r.Stdout), &st) == nil && len(st.Brokers) == 3
	})

	// The bootstrap machine's network is gone for good.
	n.drop(router, []string{cp1.ip}, []string{"10.77.0.0/16"})
	n.drop(router, []string{"10.77.0.0/16"}, []string{cp1.ip})
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"state","content":"without the bootstrap machine"}]}`)
	harness.Eventually(t, 30*time.Second, "a declaration via cp-2", func() bool {
		return cps[1].ctl(t, "declare", "--node", "web-1", "--file", body, "--leader-wait", "2s").Code == 0
	})
	harness.Eventually(t, 60*time.Second, "web-1 applies it through another broker", func() bool {
		b, _ := os.ReadFile(filepath.Join(web.dir, "managed", "state"))
		return string(b) == "without the bootstrap machine"
	})

	// The token that names only the lost machine.
	m2 := n.behind(router, "web-2", "10.77.82")
	began := time.Now()
	r := m2.run(t, unused.Stdout, bin.Meshhost, "enrol", "--state", m2.dir)
	took := time.Since(began)
	t.Logf("enrol with a token naming only the lost machine: exit %d after %s:\n%s", r.Code, took.Round(100*time.Millisecond), r.Combined())
	if r.Code != 7 || took > 30*time.Second || !strings.Contains(r.Combined(), "mint a new token") {
		t.Fatalf("enrol with a token naming only a machine gone for good: exit %d after %s; want 7 within 30 s, saying to mint a new token on a running control node", r.Code, took)
	}

	// As the docs say: remove the lost node, mint a new token on a surviving one.
	if r := cps[1].ctl(t, "control", "remove", "cp-1"); r.Code != 0 {
		t.Fatalf("control remove cp-1: %s", r.Combined())
	}
	if r := cps[1].ctl(t, "token", "cancel", "web-2"); r.Code != 0 {
		t.Fatalf("token cancel web-2: %s", r.Combined())
	}
	tok := cps[1].ctl(t, "token", "--node", "web-2")
	if tok.Code != 0 {
		t.Fatalf("token on cp-2: %s", tok.Combined())
	}
	began = time.Now()
	if r := m2.run(t, tok.Stdout, bin.Meshhost, "enrol", "--state", m2.dir); r.Code != 0 {
		t.Fatalf("enrol with a token minted on cp-2 after the removal: %s", r.Combined())
	}
	t.Logf("enrolled with the new token in %s", time.Since(began).Round(100*time.Millisecond))
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("enrolment with a token minted after the removal took %s: the token still names the lost machine?", took)
	}
}
