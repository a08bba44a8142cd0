package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/host/state"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// The operator's week: ordinary operations and mistakes, each with the built binaries.

// TestFailedApplyIsRetried: a local fault makes an apply fail (a file stands where the
// declaration needs a directory). The host reports the error and when it tries again;
// once the fault is fixed by hand it converges on the same declaration, without a new
// one being issued.
func TestFailedApplyIsRetried(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "retry")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	cp.WaitConverged("web-1", 0, 20*time.Second)
	// The fault: a plain file where the declaration wants a directory.
	blocker := filepath.Join(h.Root, "etc")
	if err := os.MkdirAll(h.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, blocker, "not a directory\n")
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"etc/app.conf","content":"listen 8080\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the failure reported with the next attempt", func() bool {
		n, _ := cp.Node("web-1")
		return n.LastError != nil && n.LastError.Code == "apply_failed" && n.LastError.Version == 1 && !n.LastError.RetryAt.IsZero()
	})
	if r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", h.State); !strings.Contains(r.Stdout, "retry     at ") || !strings.Contains(r.Stdout, "apply_failed") {
		t.Fatalf("meshhost status does not show the failure and the next attempt:\n%s", r.Combined())
	}
	declaredBefore := func() uint64 { n, _ := cp.Node("web-1"); return n.Declared }()

	// Fixed by hand: the host converges on v1 by itself.
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	cp.WaitConverged("web-1", 1, 60*time.Second)
	if got, _ := h.ReadManaged("etc/app.conf"); got != "listen 8080\n" {
		t.Fatalf("etc/app.conf = %q", got)
	}
	n, _ := cp.Node("web-1")
	if n.Declared != declaredBefore || n.LastError != nil {
		t.Fatalf("converged with declared v%d (was v%d), last error %+v: the retry, not a new declaration, must fix it", n.Declared, declaredBefore, n.LastError)
	}
}

// TestLivenessFromTheBroker: a host whose agent stops is shown offline within two
// seconds, by the brokers' own account of its connection, not after the heartbeats
// run out; and alive again as soon as it reconnects.
func TestLivenessFromTheBroker(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "liveness")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	// A long heartbeat: only the connection can tell the control plane in time.
	agent := h.Run("--heartbeat", "1m")
	cp.WaitConverged("web-1", 0, 20*time.Second)
	harness.Eventually(t, 10*time.Second, "web-1 alive", func() bool { n, _ := cp.Node("web-1"); return n.State == "alive" })

	agent.Signal(syscall.SIGKILL)
	agent.Wait(5 * time.Second)
	start := time.Now()
	harness.Eventually(t, 5*time.Second, "web-1 offline", func() bool { n, _ := cp.Node("web-1"); return n.State == "offline" })
	if took := time.Since(start); took > 2*time.Second+500*time.Millisecond {
		t.Errorf("shown offline %s after its agent died, want within 2 s", took.Round(time.Millisecond))
	}
	h.Run("--heartbeat", "1m")
	harness.Eventually(t, 10*time.Second, "web-1 alive again", func() bool { n, _ := cp.Node("web-1"); return n.State == "alive" })
}

// TestHostsFollowMembership: a host enrolled while cp-1 was the only control node
// learns, from a list of brokers the mesh signs, the control nodes that join after
// it, persists them, and fails over to them when cp-1 is gone; it drops a control
// node that is removed. meshctl with cp-1's data directory reaches the others.
func TestHostsFollowMembership(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "members")
	cp1.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp1.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	cp1.WaitConverged("web-1", 0, 20*time.Second)
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	all := []string{cp1.Listen, cp2.Listen, cp3.Listen}
	brokersKnown := func() []string {
		a, err := state.Load(h.State)
		if err != nil {
			t.Fatal(err)
		}
		return slices.Sorted(slices.Values(a.Brokers))
	}
	harness.Eventually(t, 20*time.Second, "the host knows the three brokers", func() bool {
		return slices.Equal(brokersKnown(), slices.Sorted(slices.Values(all)))
	})
	cfg, _ := datadir.Dir(cp1.Dir).LoadConfig()
	if !slices.Equal(slices.Sorted(slices.Values(cfg.Brokers)), slices.Sorted(slices.Values(all))) {
		t.Fatalf("cp-1's mesh.json lists %v", cfg.Brokers)
	}

	// cp-1 gone; the agent restarted: it reaches the others.
	cp1.Process().Kill()
	agent.Signal(syscall.SIGTERM)
	agent.Wait(10 * time.Second)
	h.Run()
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"after cp-1"}]}`)
	harness.Eventually(t, 30*time.Second, "a declaration through the remaining control nodes", func() bool {
		return cp2.Ctl("declare", "--node", "web-1", "--file", body).Code == 0
	})
	cp2.WaitConverged("web-1", 1, 30*time.Second)
	// meshctl with cp-1's directory, cp-1 being down, reaches the others.
	if r := cp1.Ctl("nodes"); r.Code != 0 {
		t.Fatalf("meshctl with the stopped cp-1's directory: %s", r.Combined())
	}

	// cp-1 removed for good: the host drops it. Run again, the command has nothing
	// left to do and says so.
	if r := cp2.Ctl("control", "remove", "cp-1"); r.Code != 0 {
		t.Fatalf("control remove cp-1: %s", r.Combined())
	}
	if r := cp3.Ctl("control", "remove", "cp-1"); r.Code != 0 || !strings.Contains(r.Stdout, "cp-1 was already removed") {
		t.Fatalf("control remove cp-1 run again (exit %d): %s", r.Code, r.Combined())
	}
	if r := cp3.Ctl("control", "remove", "cp-7"); r.Code != 4 || !strings.Contains(r.Stderr, "no control node cp-7 was ever admitted") {
		t.Fatalf("control remove of a node never admitted (exit %d): %s", r.Code, r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the host drops the removed control node", func() bool {
		return slices.Equal(brokersKnown(), slices.Sorted(slices.Values([]string{cp2.Listen, cp3.Listen})))
	})
}

// TestPromotionOnlyOfServingNodes: joined control nodes stay confirmed nonvoters until
// their `meshctl serve` runs and has caught up; then the leader promotes them,
// keeping the voters odd. A member that stops answering is reported, at a bounded
// rate, and shown offline.
func TestPromotionOnlyOfServingNodes(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "promote")
	serve1 := cp1.Serve()
	joined := map[string]*harness.ControlPlane{}
	for _, id := range []string{"cp-2", "cp-3"} {
		tok, n := cp1.ControlToken(id)
		if r := n.Join(tok); r.Code != 0 || !strings.Contains(r.Stdout, "becomes a voter once `meshctl serve` runs") {
			t.Fatalf("join %s (exit %d):\n%s", id, r.Code, r.Combined())
		}
		joined[id] = n
	}
	roles := func() map[string]string {
		out := map[string]string{}
		for _, c := range cp1.Nodes().Control {
			out[c.ID] = c.Raft
		}
		return out
	}
	// Joined, not serving: nonvoters, however long they wait.
	time.Sleep(5 * time.Second) // over two rounds of the leader's autopilot
	if r := roles(); r["cp-2"] != "nonvoter" || r["cp-3"] != "nonvoter" || r["cp-1"] != "leader" {
		t.Fatalf("before either serves: %v", r)
	}
	if n := strings.Count(serve1.Output(), "is not serving yet"); n > 2 {
		t.Errorf("the leader reported the joined nodes %d times in 5 s: not bounded", n)
	}
	// One serves: still a nonvoter, for two voters would stop when either stops.
	joined["cp-2"].Serve()
	time.Sleep(5 * time.Second)
	if r := roles(); r["cp-2"] != "nonvoter" {
		t.Fatalf("with one of two serving: %v", r)
	}
	// Both serve: both promoted together.
	joined["cp-3"].Serve()
	harness.Eventually(t, 20*time.Second, "both promoted", func() bool {
		r := roles()
		return r["cp-2"] == "voter" && r["cp-3"] == "voter"
	})
	// A voter that stops answering is shown offline and reported.
	joined["cp-3"].Process().Kill()
	harness.Eventually(t, 20*time.Second, "cp-3 shown offline", func() bool {
		for _, c := range cp1.Nodes().Control {
			if c.ID == "cp-3" {
				return c.State == "offline"
			}
		}
		return false
	})
	harness.Eventually(t, 20*time.Second, "cp-3's silence reported", func() bool {
		return strings.Contains(serve1.Output(), "a voting control node stopped answering")
	})
}

// TestRollingRestarts: three control nodes, each stopped and started again in turn,
// twice, with revocations, a key rotation and declarations in the log. No control
// node crashes replaying what it missed, the quorum holds throughout, and the hosts
// converge on every declaration issued meanwhile.
func TestRollingRestarts(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "rolling")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	cps := []*harness.ControlPlane{cp1, cp2, cp3}
	var hosts []*harness.Host
	for _, id := range []string{"web-1", "web-2", "gone"} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp1.Token(id)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		h.Run()
		hosts = append(hosts, h)
	}
	// What the restarted nodes replay: a revocation, a rotation, declarations.
	if r := cp1.Ctl("revoke", "gone"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	if r := cp1.Ctl("signing-key", "rotate"); r.Code != 0 {
		t.Fatalf("rotate: %s", r.Combined())
	}
	body := filepath.Join(t.TempDir(), "b.json")
	version := uint64(0)
	declare := func(via *harness.ControlPlane, content string) {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"app.conf","content":"`+content+`"}]}`)
		harness.Eventually(t, 30*time.Second, "declare "+content, func() bool {
			return via.Ctl("declare", "--role", "worker", "--file", body).Code == 0
		})
		version++
		for _, id := range []string{"web-1", "web-2"} {
			via.WaitConverged(id, version, 30*time.Second)
		}
	}
	declare(cp1, "before")

	for round := 1; round <= 2; round++ {
		for i, cp := range cps {
			other := cps[(i+1)%3]
			p := cp.Process()
			p.Signal(syscall.SIGTERM)
			if code := p.Wait(20 * time.Second); code != 0 {
				t.Fatalf("round %d: %s stopped with exit %d:\n%s", round, cp.Dir, code, p.Output())
			}
			// While it is down: the other two hold the quorum and serve.
			declare(other, fmt.Sprintf("round %d, node %d down", round, i+1))
			restarted := cp.Serve()
			if strings.Contains(restarted.Output(), "panic") {
				t.Fatalf("round %d: the restarted node panicked:\n%s", round, restarted.Output())
			}
			// The gate docs/operations.md gives before the next restart: every
			// voter answers and follows the leader ("three voters alive" passed
			// with one whose Raft did not follow).
			start := time.Now()
			harness.Eventually(t, 30*time.Second, "control status exits 0", func() bool {
				return other.Ctl("control", "status").Code == 0
			})
			t.Logf("round %d, node %d: control status exited 0 %s after its restart was ready", round, i+1, time.Since(start).Round(100*time.Millisecond))
			voters := 0
			for _, c := range other.Nodes().Control {
				if (c.Raft == "voter" || c.Raft == "leader") && c.State == "alive" && c.NotFollowing == "" {
					voters++
				}
			}
			if voters != 3 {
				t.Fatalf("round %d: control status exited 0 and nodes shows %d voters alive and following:\n%s", round, voters, other.Ctl("nodes").Stdout)
			}
		}
	}
	declare(cp3, "after")
	for _, cp := range cps {
		if out := cp.Process().Output(); strings.Contains(out, "panic") || strings.Contains(out, "nil pointer") {
			t.Fatalf("%s:\n%s", cp.Dir, out)
		}
		if n, _ := cp.Node("gone"); n.State != "revoked" {
			t.Fatalf("%s shows the revoked node as %s", cp.Dir, n.State)
		}
	}
	for _, h := range hosts[:2] {
		if got, _ := h.ReadManaged("app.conf"); got != "after" {
			t.Fatalf("%s holds %q", h.Name, got)
		}
	}
}

// TestRestartRecovery: the control plane killed and restarted with hosts connected.
// Hosts reconnect, some before the API serves again; their syncs, met by "no
// responders", are retried until answered; within seconds the restarted control
// plane shows every host alive with its applied version, and a declaration reaches
// them all.
func TestRestartRecovery(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "recovery")
	cp.Serve()
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("web-%d", i+1)
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		// A long heartbeat: the control plane must not wait for it to know them.
		h.Run("--heartbeat", "1m")
		ids = append(ids, id)
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"one"}]}`)
	if r := cp.Ctl("declare", "--all", "--file", body); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	for _, id := range ids {
		cp.WaitConverged(id, 1, 20*time.Second)
	}
	cp.Process().Kill()
	start := time.Now()
	cp.Serve()
	harness.Eventually(t, 15*time.Second, "every host alive with its applied version", func() bool {
		for _, n := range cp.Nodes().Nodes {
			if n.State != "alive" || n.Applied == nil || *n.Applied != 1 {
				return false
			}
		}
		return true
	})
	t.Logf("all %d hosts known alive %s after the restart began", len(ids), time.Since(start).Round(100*time.Millisecond))
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"two"}]}`)
	if r := cp.Ctl("declare", "--all", "--file", body, "--wait", "30s"); r.Code != 0 {
		t.Fatalf("declare after the restart: %s", r.Combined())
	}
}

// TestPromotionWhileTheLogIsBusy: control nodes added while the leader commits
// hundreds of entries a second (a fleet's tokens being minted) are promoted once
// they serve, like on a quiet day; a follower restarted meanwhile serves again; the
// leader's machine lost under the load is replaced and removed.
func TestPromotionWhileTheLogIsBusy(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "busy")
	cp1.Serve()
	c, err := operator.Dial(datadir.Dir(cp1.Dir), operator.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// mint keeps workers operators minting through c until the test ends, counting
	// what was minted and keeping the last refusal (a pause after each: no leader,
	// or a connection gone with its broker).
	type tally struct {
		minted, refused, unanswered atomic.Int64
		last                        atomic.Value
	}
	mint := func(c *operator.Client, prefix string, workers int) *tally {
		n := &tally{}
		for w := range workers {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := c.MintToken(fmt.Sprintf("%s-%d-%d", prefix, w, i), tokenfmt.RoleWorker, time.Hour, nil); err != nil {
						n.refused.Add(1)
						if errors.Is(err, operator.ErrNoAnswer) {
							n.unanswered.Add(1)
						}
						n.last.Store(err.Error())
						time.Sleep(50 * time.Millisecond)
						continue
					}
					n.minted.Add(1)
				}
			})
		}
		return n
	}
	busy := mint(c, "h", 16)
	defer func() { close(stop); wg.Wait() }()
	start := time.Now()
	var cp2 *harness.ControlPlane
	for _, id := range []string{"cp-2", "cp-3"} {
		tok, n := cp1.ControlToken(id)
		if r := n.Join(tok); r.Code != 0 {
			t.Fatalf("join %s (exit %d):\n%s", id, r.Code, r.Combined())
		}
		n.Serve()
		if id == "cp-2" {
			cp2 = n
		}
	}
	harness.Eventually(t, 30*time.Second, "both promoted while tokens are minted", func() bool {
		voters := 0
		for _, cn := range cp1.Nodes().Control {
			if cn.Raft == api.RaftVoter {
				voters++
			}
		}
		return voters == 2
	})
	// A follower restarted meanwhile catches up and serves again.
	cp2.Process().Kill()
	restarted := time.Now()
	cp2.Serve()
	t.Logf("cp-2 served again %s after its restart", time.Since(restarted).Round(time.Millisecond))
	rate := float64(busy.minted.Load()) / time.Since(start).Seconds()
	t.Logf("promoted while the leader committed %.0f tokens a second (%d refused)", rate, busy.refused.Load())
	if rate < 50 {
		t.Fatalf("only %.0f tokens a second were minted: the log was not busy, so this proves nothing", rate)
	}

	// The leader's machine lost while operators keep minting through cp-2: a new
	// leader takes the load, and the lost machine is removed while it does. A mint the
	// leader received and died with is sent again after 2 s and answered by the next
	// leader (with the token the first may have made), so none is left unanswered.
	c2, err := operator.Dial(datadir.Dir(cp2.Dir), operator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	after := mint(c2, "g", 8)
	// Operators reading meanwhile, with the default timeout (15 s): a read the leader
	// died with is asked again, and the next leader answers it.
	c3, err := operator.Dial(datadir.Dir(cp2.Dir), operator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	type read struct {
		start, end time.Time
		err        error
	}
	var (
		reads     []read
		readsMu   sync.Mutex
		readStop  = make(chan struct{})
		readersWG sync.WaitGroup
	)
	for range 4 {
		readersWG.Go(func() {
			for {
				select {
				case <-readStop:
					return
				default:
				}
				r := read{start: time.Now()}
				_, r.err = c3.Nodes(api.NodesRequest{})
				r.end = time.Now()
				readsMu.Lock()
				reads = append(reads, r)
				readsMu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	cp1.Process().Kill()
	killed := time.Now()
	harness.Eventually(t, 20*time.Second, "a new leader minting", func() bool {
		before := after.minted.Load()
		time.Sleep(200 * time.Millisecond)
		return after.minted.Load() > before
	})
	t.Logf("leader killed under load; minting resumed after %s (%d refused, last: %v)", time.Since(killed).Round(100*time.Millisecond), after.refused.Load(), after.last.Load())
	if n := after.unanswered.Load(); n > 0 {
		t.Errorf("%d mints were left unanswered when the leader was lost; each should have been sent again and answered", n)
	}
	close(readStop)
	readersWG.Wait()
	spanning, longest := 0, time.Duration(0)
	for _, r := range reads {
		inFlight := r.start.Before(killed) && r.end.After(killed)
		soonAfter := !r.start.Before(killed) && r.start.Before(killed.Add(time.Second))
		if !inFlight && !soonAfter {
			continue
		}
		spanning++
		longest = max(longest, r.end.Sub(r.start))
		if r.err != nil {
			t.Errorf("a read made while the leader was lost failed after %s: %v", r.end.Sub(r.start).Round(time.Millisecond), r.err)
		}
	}
	t.Logf("%d reads in flight when the leader was lost or in the second after; the longest took %s", spanning, longest.Round(time.Millisecond))
	if spanning == 0 || longest > 10*time.Second {
		t.Errorf("reads around the leader's loss: %d, the longest %s; want them answered well within their 15 s timeout", spanning, longest)
	}
	harness.Eventually(t, 20*time.Second, "cp-1 removed under load", func() bool {
		return cp2.Ctl("control", "remove", "cp-1").Code == 0
	})
	before := after.minted.Load()
	time.Sleep(time.Second)
	if after.minted.Load() == before {
		t.Fatal("nothing was minted in the second after cp-1's removal")
	}
}

// A token creation sent again (as meshctl does when a leader died with it) is answered
// with the token the first one minted: the same expiry, one token in the list, and it
// enrols its node once. The same id under other terms is refused.
func TestTokenCreationSentTwice(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "twice")
	cp.Serve()
	c, err := operator.Dial(datadir.Dir(cp.Dir), operator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := api.TokenCreateRequest{ID: strings.Repeat("ab", 32), ProofKey: strings.Repeat("cd", 32), Node: "web-1", Role: string(tokenfmt.RoleWorker), TTL: api.Duration(time.Hour)}
	var first, second api.TokenCreateResult
	if err := c.Call(api.OpTokenCreate, req, &first); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a new commit time, so a second token would differ
	if err := c.Call(api.OpTokenCreate, req, &second); err != nil {
		t.Fatalf("the same creation again: %v", err)
	}
	if !first.Expiry.Equal(second.Expiry) || first.SigningKey != second.SigningKey || first.CAPin != second.CAPin {
		t.Fatalf("answers differ: %+v, then %+v", first, second)
	}
	var list api.TokenListResult
	if err := c.Call(api.OpTokenList, api.TokenListRequest{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Tokens) != 1 {
		t.Fatalf("%d tokens listed after the creation was sent twice: %+v", len(list.Tokens), list.Tokens)
	}
	other := req
	other.TTL = api.Duration(2 * time.Hour)
	var apiErr *api.Error
	if err := c.Call(api.OpTokenCreate, other, nil); !errors.As(err, &apiErr) || apiErr.Code != api.CodeBadRequest {
		t.Fatalf("the same id with another ttl: %v, want bad_request", err)
	}
	if !strings.Contains(cp.Process().Output(), "token request repeated") {
		t.Error("serve did not log the repeated request")
	}
}
