package integration

import (
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/host/state"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestAJoinIsListedToHostsOnceItServes: a control node admitted whose join was
// interrupted (SIGTERM after "admitted", the mesh stalled) is not a broker hosts are
// told of: a running host's list, a host enrolled since, a token minted since and
// the leader's mesh.json name the bootstrap machine alone; `meshctl nodes` shows the
// node admitted, not serving. Nor is it once the same join finished, while its serve
// has not started. Once it serves, every one of them lists it. Before, the admission
// put it in every list at once (an operations audit, finding 2): hosts whose first
// broker it was left a working broker, again and again, to dial an address nothing
// answered at (decision 0020). The built binaries.
func TestAJoinIsListedToHostsOnceItServes(t *testing.T) {
	t.Parallel() // mostly waits (a join, heartbeats): see TestMain
	cp1, proxy := harness.NewControlPlaneBehindProxy(t, bin, "listed")
	cp1.Serve()
	// cp-1's address in the mesh's list is the proxy's, which hosts dial.
	home := proxy.Addr()
	web1 := harness.NewHost(t, bin, "web-1")
	if r := web1.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol web-1 (exit %d):\n%s", r.Code, r.Combined())
	}
	web1.Run()
	cp1.WaitConverged("web-1", 0, 20*time.Second)

	tok, cp2 := cp1.ControlToken("cp-2")
	p := harness.StartWithInput(t, tok, bin.Meshctl, "join", "--data", cp2.Dir, "--raft-heartbeat", "300ms")
	p.WaitOutput(t, "admitted cp-2", 10*time.Second)
	proxy.Stall()
	p.Signal(syscall.SIGTERM)
	if code := p.Wait(5 * time.Second); code != ctlExitInterrupted {
		t.Fatalf("join interrupted after admission: exit %d, want %d:\n%s", code, ctlExitInterrupted, p.Output())
	}
	proxy.Unstall()

	held := func(h *harness.Host) []string {
		a, err := state.Load(h.State)
		if err != nil {
			t.Fatalf("%s's applied state: %v", h.Name, err)
		}
		return a.Brokers
	}
	minted := func() []string {
		parsed, err := tokenfmt.Parse(cp1.Token("web-9", "--ttl", "1m"), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range parsed.Brokers {
			out = append(out, b.String())
		}
		// Another token for the same node would be refused while this one is pending.
		if r := cp1.Ctl("token", "cancel", "web-9"); r.Code != 0 {
			t.Fatalf("token cancel web-9 (exit %d):\n%s", r.Code, r.Combined())
		}
		return out
	}
	meshJSON := func() []string {
		cfg, err := datadir.Dir(cp1.Dir).LoadConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Brokers
	}
	alone := []string{home}
	notListed := func(when string) {
		t.Helper()
		if c, ok := controlView(t, cp1)["cp-2"]; !ok || c.Raft == api.RaftRemoved || c.State == api.StateAlive {
			t.Fatalf("%s: nodes shows cp-2 as %+v, want it admitted and not serving", when, c)
		}
		if got := minted(); !slices.Equal(got, alone) {
			t.Fatalf("%s: a token minted now lists %v, want %v", when, got, alone)
		}
		if got := meshJSON(); !slices.Equal(got, alone) {
			t.Fatalf("%s: cp-1's mesh.json lists %v, want %v", when, got, alone)
		}
		if got := held(web1); !slices.Equal(got, alone) {
			t.Fatalf("%s: web-1 holds the brokers %v, want %v", when, got, alone)
		}
	}
	notListed("cp-2's join interrupted after its admission")
	// A host enrolled now is handed the signed list in its answer.
	web2 := harness.NewHost(t, bin, "web-2")
	if r := web2.Enrol(cp1.Token("web-2")); r.Code != 0 {
		t.Fatalf("enrol web-2 (exit %d):\n%s", r.Code, r.Combined())
	}
	if got := held(web2); !slices.Equal(got, alone) {
		t.Fatalf("web-2, enrolled after cp-2's admission, holds the brokers %v, want %v", got, alone)
	}
	web2.Run()

	// The same join finishes; its serve does not run yet.
	if r := cp2.Join(tok); r.Code != 0 || !strings.Contains(r.Stdout, "resuming") {
		t.Fatalf("the join resumed with the same token: exit %d:\n%s", r.Code, r.Combined())
	}
	time.Sleep(3 * time.Second) // the leader's autopilot looks every 2 s
	notListed("cp-2 joined, its serve not started")

	cp2.Serve()
	both := []string{home, cp2.Listen}
	harness.Eventually(t, 20*time.Second, "web-1 and web-2 hold cp-1's and cp-2's brokers", func() bool {
		return slices.Equal(held(web1), both) && slices.Equal(held(web2), both)
	})
	if got := meshJSON(); !slices.Equal(got, both) {
		t.Fatalf("cp-2 serving: cp-1's mesh.json lists %v, want %v", got, both)
	}
	if got := minted(); !slices.Equal(got, both) {
		t.Fatalf("cp-2 serving: a token minted now lists %v, want %v", got, both)
	}
}
