package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/integration/harness"
)

// upgradeFromEnv names the revision TestRollingUpgrade builds and upgrades from.
const upgradeFromEnv = "MESH_UPGRADE_FROM"

// TestRollingUpgrade: docs/operations.md "Upgrading", done as it says with the built
// binaries of an older revision and of this one: three control nodes and two hosts
// on the older version, one host with a hook that fails; the followers upgraded,
// then the leader, then the agents, one at a time, with a declaration (declare
// --wait) at every step, status, nodes and control status answered by every node,
// and the older meshctl still at work against the upgraded control plane. A worker
// token and a control token minted before the upgrade are used after it.
//
// It builds the older revision from this repository's history (git archive, then
// go build), which takes longer than a test of this suite should, so it runs only
// when asked:
//
//	MESH_UPGRADE_FROM=7132ef2 go test ./integration/ -run TestRollingUpgrade -v
func TestRollingUpgrade(t *testing.T) {
	rev := os.Getenv(upgradeFromEnv)
	if rev == "" {
		t.Skipf("set %s to a commit (the last release point, 7132ef2) to build it and upgrade from it (20 s to a minute, mostly the build); TestUpgradeFromReleaseFiles covers that revision's files on every run", upgradeFromEnv)
	}
	old := buildRevision(t, rev)

	cp1 := harness.NewControlPlane(t, old, "upgrade")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	cps := []*harness.ControlPlane{cp1, cp2, cp3}
	byID := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": cp2, "cp-3": cp3}

	dir := t.TempDir()
	fixed := filepath.Join(dir, "reload-ok")
	hooksFile := filepath.Join(dir, "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"reload-app","paths":["etc/*.conf"],"run":["/bin/sh","-c","test -e `+fixed+`"],"timeout":"10s"}]}`)
	web1, web2 := harness.NewHost(t, old, "web-1"), harness.NewHost(t, old, "web-2")
	for _, h := range []*harness.Host{web1, web2} {
		if r := h.Enrol(cp1.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", h.Name, r.Combined())
		}
	}
	web1.Run("--hooks", hooksFile)
	web2.Run()
	lateWorker := cp1.Token("web-3")
	lateControl, cp4 := cp1.ControlToken("cp-4")

	body := filepath.Join(dir, "body.json")
	step := 0
	// declare declares a new body to every host through via and waits for it:
	// want says whether web-1's failed hook makes that fail (exit 5), hookEither
	// that the leader's rule is not known yet. It returns whether it failed so.
	declare := func(via *harness.ControlPlane, what string, want hookCount) (hookCounted bool) {
		t.Helper()
		step++
		writeFile(t, body, fmt.Sprintf(`{"files":[{"path":"etc/app.conf","content":"step %d: %s\n"}]}`, step, what))
		r := via.Ctl("declare", "--all", "--file", body, "--wait", "60s")
		// This meshctl groups the verdict by cause; an older one named each node.
		hookCounted = r.Code == 5 && (strings.Contains(r.Stderr, "1 failed hook_failed in hook reload-app (fix the host, then `meshhost hooks retry` there): web-1 (") ||
			via.Bin != bin && strings.Contains(r.Stderr, "web-1 failed (hook_failed: hook reload-app"))
		switch {
		case want == hookFails && !hookCounted:
			t.Fatalf("%s: declare --wait: exit %d, want 5 naming web-1's failed hook:\n%s", what, r.Code, r.Combined())
		case want == hookConverges && r.Code != 0:
			t.Fatalf("%s: declare --wait: exit %d:\n%s", what, r.Code, r.Combined())
		case want == hookEither && !hookCounted && r.Code != 0:
			t.Fatalf("%s: declare --wait: exit %d, want 0, or 5 naming web-1's failed hook alone:\n%s", what, r.Code, r.Combined())
		}
		for _, h := range []*harness.Host{web1, web2} {
			if got, _ := h.ReadManaged("etc/app.conf"); !strings.HasPrefix(got, fmt.Sprintf("step %d:", step)) {
				t.Fatalf("%s: %s holds %q", what, h.Name, got)
			}
		}
		for _, cp := range cps {
			for _, args := range [][]string{{"nodes"}, {"control", "status"}} {
				if r := cp.Ctl(args...); r.Code != 0 {
					t.Fatalf("%s: meshctl %s via %s: exit %d:\n%s", what, args[0], filepath.Base(cp.Dir), r.Code, r.Combined())
				}
			}
		}
		return hookCounted
	}
	// Whether an older leader counts a failed hook depends on the older revision
	// (Upgrading: mixed versions): the release point 7132ef2 counts it converged,
	// later revisions count it failing. The first declaration finds out which, and
	// every later one under an older leader is held to that.
	olderCountsHooks := declare(cp1, "all on the older version", hookEither)

	upgradeNode := func(cp *harness.ControlPlane) {
		t.Helper()
		p := cp.Process()
		p.Signal(syscall.SIGTERM)
		if code := p.Wait(30 * time.Second); code != 0 {
			t.Fatalf("%s stopped with exit %d:\n%s", cp.Dir, code, p.Output())
		}
		cp.Bin = bin
		cp.Serve()
		// The gate Upgrading gives: control status (of this version, against
		// nodes of either) exits 0, every voter answering and following the leader.
		harness.Eventually(t, 30*time.Second, "control status exits 0", func() bool {
			return cp.Ctl("control", "status").Code == 0
		})
		voters := 0
		for _, c := range cp.Nodes().Control {
			if (c.Raft == api.RaftVoter || c.Raft == api.RaftLeader) && c.State == api.StateAlive {
				voters++
			}
		}
		if voters != 3 {
			t.Fatalf("control status exited 0 with %d voters alive:\n%s", voters, cp.Ctl("nodes").Stdout)
		}
	}
	// The followers, then the leader.
	leader := leaderOf(t, cp1, byID)
	var order []*harness.ControlPlane
	for _, cp := range cps {
		if cp != leader {
			order = append(order, cp)
		}
	}
	order = append(order, leader)
	for i, cp := range order {
		upgradeNode(cp)
		// The leader's rules decide whether the failed hook counts.
		newLeader := leaderOf(t, cp, byID)
		want := hookConverges
		if newLeader.Bin == bin || olderCountsHooks {
			want = hookFails
		}
		declare(cp, fmt.Sprintf("%d control node(s) upgraded", i+1), want)
	}

	// An operator's meshctl not upgraded yet works against the upgraded control
	// plane, which counts web-1's failed hook now.
	oldCtl := func(args ...string) harness.Result {
		return harness.Run(t, "", nil, old.Meshctl, append(args, "--data", cp1.Dir)...)
	}
	if r := oldCtl("nodes"); r.Code != 0 {
		t.Fatalf("the older meshctl's nodes against the upgraded control plane: exit %d:\n%s", r.Code, r.Combined())
	}
	if r := oldCtl("status"); r.Code != 5 || !strings.Contains(r.Combined(), "web-1") {
		t.Fatalf("the older meshctl's status against the upgraded control plane: exit %d, want 5 naming web-1:\n%s", r.Code, r.Combined())
	}
	oldTok := oldCtl("token", "--node", "web-4")
	if oldTok.Code != 0 {
		t.Fatalf("the older meshctl's token against the upgraded control plane: exit %d:\n%s", oldTok.Code, oldTok.Combined())
	}
	// Hosts are upgraded after the control nodes: an older agent enrols with that
	// token and runs, and every declaration from here on waits for it too.
	web4 := harness.NewHost(t, old, "web-4")
	if r := web4.Enrol(strings.TrimSpace(oldTok.Stdout)); r.Code != 0 {
		t.Fatalf("an older agent's enrolment into the upgraded control plane: exit %d:\n%s", r.Code, r.Combined())
	}
	web4.Run()
	// Its control status reads the nodes' answers, which now name their version.
	if r := oldCtl("control", "status"); r.Code != 0 {
		t.Fatalf("the older meshctl's control status against the upgraded control plane: exit %d:\n%s", r.Code, r.Combined())
	}
	// The upgraded control plane keeps the agent each host reports: the older
	// agents name the constant they always sent.
	agentIs := func(host, agent string) {
		t.Helper()
		harness.Eventually(t, 30*time.Second, host+"'s agent shown as "+agent, func() bool {
			n, ok := cp1.Node(host)
			return ok && n.Agent == agent
		})
	}
	agentIs("web-1", "meshhost/0.1.0")
	agentIs("web-2", "meshhost/0.1.0")

	// The agents. The older one recorded its hook failed with nothing owed: this
	// one runs it at start, and it fails again until the host is fixed.
	web1.Process().Signal(syscall.SIGTERM)
	web1.Process().Wait(20 * time.Second)
	web1.Bin = bin
	web1.Run("--hooks", hooksFile)
	web1.Process().WaitOutput(t, "running the hooks the agent owed", 20*time.Second)
	if err := os.WriteFile(fixed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", web1.State, "--timeout", "60s"); r.Code != 0 {
		t.Fatalf("hooks retry on the upgraded agent: exit %d:\n%s", r.Code, r.Combined())
	}
	web2.Process().Signal(syscall.SIGTERM)
	web2.Process().Wait(20 * time.Second)
	web2.Bin = bin
	web2.Run()
	declare(cp1, "every machine upgraded", hookConverges)
	// The upgraded agents name their build (the same as before when this package's
	// binaries carry no commit, GOFLAGS=-buildvcs=false).
	agentIs("web-1", agentOf(t, bin.Meshhost))
	agentIs("web-2", agentOf(t, bin.Meshhost))
	if r := cp1.Ctl("status"); r.Code != 0 {
		t.Fatalf("status after the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}
	// Every control node upgraded, operator credentials are renewed beside those
	// in use (rules 14, stamped on a log an older version built).
	alice, alice2 := filepath.Join(dir, "alice.creds"), filepath.Join(dir, "alice-2.creds")
	if r := cp1.Ctl("operator", "add", "alice", "--out", alice); r.Code != 0 {
		t.Fatalf("operator add after the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}
	if r := cp1.Ctl("operator", "add", "alice", "--renew", "--out", alice2); r.Code != 0 {
		t.Fatalf("operator add --renew after the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}

	// Tokens minted before the upgrade.
	web3 := harness.NewHost(t, bin, "web-3")
	if r := web3.Enrol(lateWorker); r.Code != 0 {
		t.Fatalf("enrol with a worker token minted before the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}
	web3.Run()
	cp4.Bin = bin
	if r := cp4.Join(lateControl); r.Code != 0 {
		t.Fatalf("join with a control token minted before the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}

	// A key rotation while an agent is older (web-4): it follows the keyring, and
	// the old key retires once every live node acknowledged the new one (after the
	// tokens minted before the upgrade were used: they carry the old key).
	if r := cp1.Ctl("signing-key", "rotate"); r.Code != 0 {
		t.Fatalf("rotate with an older agent: exit %d:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "every live node on the new keyring", func() bool {
		r := cp1.Ctl("signing-key", "status")
		return r.Code == 0 && strings.Contains(r.Stdout, "every live node acknowledged this keyring")
	})
	if r := cp1.Ctl("signing-key", "retire"); r.Code != 0 {
		t.Fatalf("retire with an older agent: exit %d:\n%s", r.Code, r.Combined())
	}
	declare(cp1, "after a rotation with an older agent", hookConverges)

	// A join by the older meshctl (a machine image not updated) into the upgraded
	// mesh is refused up front, nothing used: it was admitted, then rolled back as
	// "not replicating the log". The same token then joins with this meshctl.
	// An older meshctl on rules no older than those this story's log was stamped
	// with (a revision of this session, say) applies the log alike, and joins: its
	// newest entries are the operator credentials renewed above (rules 14); a step
	// stamped with newer rules raises this.
	tok5, cp5 := cp1.ControlToken("cp-5")
	cp5.Bin = old
	if revisionRules(t, rev) >= state.RulesOperatorRenewal {
		if r := cp5.Join(tok5); r.Code != 0 {
			t.Fatalf("join by an older meshctl on the rules of this story's log (%d): exit %d:\n%s", revisionRules(t, rev), r.Code, r.Combined())
		}
		return
	}
	if r := cp5.Join(tok5); r.Code == 0 || !strings.Contains(r.Stderr, "older than those the mesh's state was built by") {
		t.Fatalf("join by the older meshctl: exit %d, want refused as older:\n%s", r.Code, r.Combined())
	}
	cp5.Bin = bin
	if r := cp5.Join(tok5); r.Code != 0 {
		t.Fatalf("join with this meshctl after the older one was refused: exit %d:\n%s", r.Code, r.Combined())
	}
}

// revisionRules reads the rules (state.ApplyRules) the meshctl of rev applies the
// log by, from its source; 1 for a revision from before they were announced.
func revisionRules(t *testing.T, rev string) int {
	t.Helper()
	show := exec.Command("git", "show", rev+":controlplane/state/state.go")
	show.Dir = ".."
	src, err := show.Output()
	if err != nil {
		t.Fatalf("git show %s's state.go: %v", rev, err)
	}
	m := regexp.MustCompile(`(?m)^const ApplyRules = ([0-9]+)$`).FindSubmatch(src)
	if m == nil {
		return 1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// hookCount is what TestRollingUpgrade's declaration expects of a failed hook.
type hookCount int

const (
	hookConverges hookCount = iota // counted converged: exit 0
	hookFails                      // counted failing: exit 5 naming the node
	hookEither                     // the leader's rule is not known yet
)

// leaderOf returns the control node of byID that leads, as via's nodes says.
func leaderOf(t *testing.T, via *harness.ControlPlane, byID map[string]*harness.ControlPlane) *harness.ControlPlane {
	t.Helper()
	var id string
	harness.Eventually(t, 30*time.Second, "a leader", func() bool {
		for _, c := range via.Nodes().Control {
			if c.Raft == api.RaftLeader {
				id = c.ID
				return true
			}
		}
		return false
	})
	cp, ok := byID[id]
	if !ok {
		t.Fatalf("the leader %s is none of the test's nodes", id)
	}
	return cp
}

// buildRevision builds meshctl and meshhost of rev, from this repository's history
// (git archive: the working tree and its .git are left alone).
func buildRevision(t *testing.T, rev string) harness.Binaries {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("git is not on the PATH: cannot build %s", rev)
	}
	if err := exec.Command("git", "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
		t.Skipf("%s is not in this repository's history (a shallow clone?): %v", rev, err)
	}
	src, out := t.TempDir(), t.TempDir()
	archive := exec.Command("git", "archive", rev)
	archive.Dir = ".." // the module's root: from a subdirectory, git archives only that
	var tarball, stderr bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &stderr
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, stderr.String())
	}
	untar := exec.Command("tar", "-x", "-C", src)
	untar.Stdin = &tarball
	if msg, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v\n%s", rev, err, msg)
	}
	b := harness.Binaries{Meshctl: filepath.Join(out, "meshctl"), Meshhost: filepath.Join(out, "meshhost")}
	for target, pkg := range map[string]string{b.Meshctl: "./controlplane/cmd/meshctl", b.Meshhost: "./host/cmd/meshhost"} {
		build := exec.Command("go", "build", "-buildvcs=false", "-o", target, pkg)
		build.Dir = src
		if msg, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build %s of %s: %v\n%s", pkg, rev, err, msg)
		}
	}
	return b
}
