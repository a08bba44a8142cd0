package integration

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mesh/controlplane/daemon"
	"mesh/host/agent"
	"mesh/host/enrol"
	"mesh/integration/harness"
)

// TestLeaderClockStepsBack: the leader's clock runs three hours ahead for a while
// (an RTC set wrong, a bad NTP source) and is then stepped back. What it declared
// meanwhile carries an issue time three hours in the hosts' future, which hosts with
// a right clock refuse (not_yet_valid); once the leader's clock is right again the
// mesh sends it again, stamped by the right clock, without an operator act. Before,
// the leader re-sent the same envelope, refused again, until the hosts' clocks
// reached its issue time (days, after a step of days), and re-signed nothing until
// half the validity counted from that future time had passed, while the hosts' last
// good declaration expired.
func TestLeaderClockStepsBack(t *testing.T) {
	t.Parallel()
	var cpOffset atomic.Int64
	cpNow := func() time.Time { return time.Now().Add(time.Duration(cpOffset.Load())) }
	m := harness.StartMesh(t, "steps", harness.Options{Now: cpNow})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgent(t, state, nil)
	v1 := m.Declare("web-1", `{"files":[{"path":"motd","content":"one"}]}`)
	m.WaitApplied("web-1", v1, 15*time.Second)

	cpOffset.Store(int64(3 * time.Hour))
	v2 := m.Declare("web-1", `{"files":[{"path":"motd","content":"two"}]}`)
	// The refusal names the version refused (meshctl nodes shows "v2
	// not_yet_valid: …"; it said v0).
	harness.Eventually(t, 15*time.Second, "the host refuses v2 as not yet valid", func() bool {
		n, _ := m.Node("web-1")
		return n.LastError != nil && n.LastError.Code == "not_yet_valid" && n.LastError.Version == v2
	})

	cpOffset.Store(0)
	m.WaitApplied("web-1", v2, 20*time.Second)
	if got, err := os.ReadFile(filepath.Join(a.Root, "motd")); err != nil || string(got) != "two" {
		t.Fatalf("motd = %q, %v; want v2's content", got, err)
	}
	n, _ := m.Node("web-1")
	if n.Declared != v2 {
		t.Fatalf("declared v%d, want v%d: stamping it again must not change its version", n.Declared, v2)
	}
	if left := time.Until(n.DeclaredExpiry); left > 24*time.Hour+time.Minute {
		t.Fatalf("the declaration expires in %s by the right clock: it still carries the stamp of the clock three hours ahead", left.Round(time.Second))
	}
	if !strings.Contains(m.Log(), "issued in this node's future") {
		t.Fatalf("the control plane's log does not say why it stamped declarations again:\n%s", m.Log())
	}
}

// TestHostClockStepsForwardPastItsExpiry: a machine resumed after more than a day
// suspended, its clock still behind until NTP steps it. Meanwhile the mesh re-signed
// its declaration, and the agent, syncing as it reconnected, refused the fresh copy
// as issued in its future (not_yet_valid), keeping the one it holds, valid by its
// clock. NTP steps its clock forward past that copy's expiry: the agent asks the mesh
// again as it turns stale, and is fresh within seconds, with no restart. Before, it
// stayed stale, connected to a healthy mesh that held a valid copy, until the next
// refresh (up to half the validity, 12 hours by default).
func TestHostClockStepsForwardPastItsExpiry(t *testing.T) {
	t.Parallel()
	var cpOffset, hostOffset atomic.Int64
	cpNow := func() time.Time { return time.Now().Add(time.Duration(cpOffset.Load())) }
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	m := harness.StartMesh(t, "resume", harness.Options{Now: cpNow})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), hostNow)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgent(t, state, hostNow)
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"resumed"}]}`)
	m.WaitApplied("web-1", v, 15*time.Second)
	first, _ := m.Node("web-1")

	// 30 hours pass for the mesh, not for the suspended machine's clock: the mesh
	// re-signs, and the host refuses the copy 30 hours in its future.
	cpOffset.Store(int64(30 * time.Hour))
	harness.Eventually(t, 15*time.Second, "the host refuses the re-signed copy as not yet valid", func() bool {
		n, _ := m.Node("web-1")
		return n.DeclaredExpiry.After(first.DeclaredExpiry.Add(24*time.Hour)) && n.LastError != nil && n.LastError.Code == "not_yet_valid"
	})

	// NTP steps the host's clock to the mesh's: the copy it holds expired 6 hours ago.
	hostOffset.Store(int64(30 * time.Hour))
	harness.Eventually(t, 20*time.Second, "the host holds the mesh's fresh copy", func() bool {
		n, _ := m.Node("web-1")
		return !n.Stale && n.LastError == nil && strings.Contains(a.Log(), "the applied declaration is fresh again")
	})
	if got := harness.AppliedVersions(a.Log()); len(got) != 1 {
		t.Fatalf("applied %v; a fresh copy of the applied version must not be applied again", got)
	}
}

// TestHostClockAYearBehind: a machine that boots with its clock a year in the past
// (a dead RTC battery), before NTP sets it. The mesh's certificates are not valid
// yet by that clock, so nothing connects; what the person and the log read names
// this machine's clock, never a substituted mesh, and the running agent connects
// by itself once the clock is right. Before, both said the broker's certificate
// "does not chain to the pinned CA: the mesh was substituted", and enrol added
// "retrying will not help".
func TestHostClockAYearBehind(t *testing.T) {
	t.Parallel()
	m := harness.StartMesh(t, "rtc", harness.Options{})
	yearAgo := func() time.Time { return time.Now().AddDate(-1, 0, 0) }

	text := m.Token("web-1", 15*time.Minute).Encode()
	_, err := harness.EnrolHost(t, text, yearAgo)
	if !errors.Is(err, enrol.ErrClock) || errors.Is(err, enrol.ErrSubstituted) || !strings.Contains(err.Error(), "this machine's clock") {
		t.Fatalf("enrol with the clock a year behind: want ErrClock naming this machine's clock, not ErrSubstituted; got %v", err)
	}

	// Enrolled with a right clock; the machine reboots with its clock a year behind.
	state, err := harness.EnrolHost(t, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	var hostOffset atomic.Int64
	hostOffset.Store(int64(time.Until(yearAgo())))
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	a := harness.RunAgent(t, state, hostNow)
	harness.Eventually(t, 15*time.Second, "the agent says its clock is wrong", func() bool {
		return strings.Contains(a.Log(), "this machine's clock")
	})
	if strings.Contains(a.Log(), "not the mesh's") {
		t.Fatalf("the agent took a clock a year behind for a substituted mesh:\n%s", a.Log())
	}
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"on time"}]}`)

	// NTP sets the clock: the agent connects and applies, with no restart.
	hostOffset.Store(0)
	m.WaitApplied("web-1", v, 45*time.Second)
}

// TestTokenMintedByAClockOffWarns: the token's expiry is the leader's clock plus its
// time to live. A leader two hours behind mints a 15-minute token that, by a right
// clock, expired an hour and three quarters ago: every host with a right clock
// refuses it offline, naming its own clock. meshctl, whose machine's clock is right,
// says at once that the control plane's clock is off, and by how much; a leader's
// clock ahead makes tokens live longer than asked, said likewise. A clock within
// the tolerance says nothing.
func TestTokenMintedByAClockOffWarns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		skew  time.Duration
		wants string
	}{
		{"two hours behind", -2 * time.Hour, "2h0m0s behind this machine's"},
		{"two hours ahead", 2 * time.Hour, "2h0m0s ahead of this machine's"},
		{"a minute ahead", time.Minute, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Bootstrapped by a right clock (its certificates valid now), then the
			// control plane's clock is off.
			var skew atomic.Int64
			m := harness.StartMesh(t, "mint", harness.Options{Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
			skew.Store(int64(tc.skew))
			res := harness.Run(t, "", nil, bin.Meshctl, "token", "--node", "web-1", "--data", string(m.Dir))
			if res.Code != 0 || !strings.HasPrefix(res.Stdout, "mesh1_") {
				t.Fatalf("meshctl token: exit %d\n%s", res.Code, res.Combined())
			}
			if tc.wants == "" {
				if res.Stderr != "" {
					t.Fatalf("a clock within the tolerance: want nothing on stderr, got %q", res.Stderr)
				}
				return
			}
			if !strings.Contains(res.Stderr, "the control plane's clock is "+tc.wants) {
				t.Fatalf("want a warning that the control plane's clock is %s, got stderr %q", tc.wants, res.Stderr)
			}
		})
	}
}

// TestOperatorBeforeTheMeshCertificates: a mesh bootstrapped by a clock two hours
// ahead has certificates valid from an hour ahead of a right clock. meshctl on a
// machine whose clock is right is refused at the pin check for the clocks, exit 3
// (retrying helps once they agree), never told the mesh was substituted and that
// retrying will not help; nothing is sent.
func TestOperatorBeforeTheMeshCertificates(t *testing.T) {
	t.Parallel()
	// Served in-process by the clock that bootstrapped it: the harness's own
	// operator client, by the test's right clock, would be refused like meshctl.
	m := harness.BootstrapMesh(t, "ahead", harness.Options{Now: skewed(2 * time.Hour)})
	d, err := daemon.Open(t.Context(), daemon.Options{Dir: m.Dir, Logger: slog.New(slog.DiscardHandler), Timeouts: harness.FastRaft(), Now: skewed(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { _ = d.Run(ctx); close(served) }()
	t.Cleanup(func() { cancel(); <-served; d.Close() })
	harness.Eventually(t, 15*time.Second, "the control plane serves", func() bool { return d.Ready() })
	res := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--data", string(m.Dir))
	if res.Code != 3 || strings.Contains(res.Stderr, "substituted") || !strings.Contains(res.Stderr, "this machine's clock") {
		t.Fatalf("meshctl nodes against a mesh whose certificates are valid from an hour ahead: want exit 3 naming the clocks, not a substitution; got exit %d\n%s", res.Code, res.Combined())
	}
}

// TestLeaderBehindStampsWhatHostsApplied: a host applied a declaration stamped by a
// leader 50 minutes ahead (inside the hosts' tolerance); the next leader's clock is
// right, so behind that one. It stamps the declaration again with an earlier issue
// time and expiry (same version and body): the host takes it as a refresh, neither
// replayed nor rolled back, keeps the later expiry it holds, and applies the next
// version that leader declares.
func TestLeaderBehindStampsWhatHostsApplied(t *testing.T) {
	t.Parallel()
	var cpOffset atomic.Int64
	m := harness.StartMesh(t, "behind", harness.Options{Now: func() time.Time { return time.Now().Add(time.Duration(cpOffset.Load())) }})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgent(t, state, nil)
	cpOffset.Store(int64(50 * time.Minute))
	v1 := m.Declare("web-1", `{"files":[{"path":"motd","content":"ahead"}]}`)
	m.WaitApplied("web-1", v1, 15*time.Second)
	ahead, _ := m.Node("web-1")

	cpOffset.Store(0)
	harness.Eventually(t, 15*time.Second, "the control plane stamps v1 again by the clock behind", func() bool {
		n, _ := m.Node("web-1")
		return n.DeclaredExpiry.Before(ahead.DeclaredExpiry.Add(-40 * time.Minute))
	})
	time.Sleep(2 * time.Second) // a heartbeat's report of the refresh
	n, _ := m.Node("web-1")
	if n.LastError != nil || n.Applied == nil || *n.Applied != v1 || n.Stale {
		t.Fatalf("after the stamp behind: applied %v, error %+v, stale %v; want v%d applied, no error", n.Applied, n.LastError, n.Stale, v1)
	}
	if strings.Contains(a.Log(), "replayed") || strings.Contains(a.Log(), "rolled_back") {
		t.Fatalf("the agent refused the copy stamped behind:\n%s", a.Log())
	}
	v2 := m.Declare("web-1", `{"files":[{"path":"motd","content":"behind"}]}`)
	m.WaitApplied("web-1", v2, 15*time.Second)
}

// TestHostClockStepsBackAfterRefusingAsExpired: a host whose clock ran more than a
// day ahead refused the mesh's fresh copy as expired; NTP steps its clock back, and
// the copy it holds is valid again. The agent asks the mesh again as it turns fresh,
// so the `expired` it reported does not stand until the next refresh (up to 12
// hours) on a node whose clock is right.
func TestHostClockStepsBackAfterRefusingAsExpired(t *testing.T) {
	t.Parallel()
	var cpOffset, hostOffset atomic.Int64
	cpNow := func() time.Time { return time.Now().Add(time.Duration(cpOffset.Load())) }
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	m := harness.StartMesh(t, "back", harness.Options{Now: cpNow})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), hostNow)
	if err != nil {
		t.Fatal(err)
	}
	harness.RunAgent(t, state, hostNow)
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"back"}]}`)
	m.WaitApplied("web-1", v, 15*time.Second)

	// The host's clock jumps 38 hours ahead; 13 hours pass for the mesh, which
	// re-signs (valid 24 hours from then): by the host's clock, expired.
	hostOffset.Store(int64(38 * time.Hour))
	harness.Eventually(t, 15*time.Second, "the host reports itself stale", func() bool {
		n, _ := m.Node("web-1")
		return n.Stale
	})
	cpOffset.Store(int64(13 * time.Hour))
	harness.Eventually(t, 15*time.Second, "the host refuses the re-signed copy as expired", func() bool {
		n, _ := m.Node("web-1")
		return n.LastError != nil && n.LastError.Code == "expired" && n.LastError.Version == v
	})

	// NTP steps the host's clock back to the mesh's.
	hostOffset.Store(int64(13 * time.Hour))
	harness.Eventually(t, 20*time.Second, "the host holds the fresh copy and reports no error", func() bool {
		n, _ := m.Node("web-1")
		return !n.Stale && n.LastError == nil
	})
}

// TestHostClockStepsBackADayStillPutsBack: a host's clock stepped back a day while
// it runs (a VM restored from a snapshot, an operator's date): the applied copy it
// keeps is then issued a day in its future, more than a new declaration may be.
// A file edited by hand is still put back from that copy, which applies nothing
// new, and the log says the clock is behind. Before (an audit), the file check
// stopped without a word and the node showed converged.
func TestHostClockStepsBackADayStillPutsBack(t *testing.T) {
	t.Parallel()
	var hostOffset atomic.Int64
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	m := harness.StartMesh(t, "snapshot", harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), hostNow)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgentWith(t, state, hostNow, func(o *agent.Options) { o.CheckFiles = time.Second })
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"declared"}]}`)
	m.WaitApplied("web-1", v, 15*time.Second)
	motd := filepath.Join(a.Root, "motd")
	harness.Eventually(t, 15*time.Second, "the file check keeps its copy", func() bool {
		_, err := os.Stat(filepath.Join(state, agent.KeptFileName))
		return err == nil
	})

	hostOffset.Store(int64(-24 * time.Hour))
	if err := os.WriteFile(motd, []byte("edited by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 15*time.Second, "the edit put back under the clock a day behind", func() bool {
		got, err := os.ReadFile(motd)
		return err == nil && string(got) == "declared"
	})
	if !strings.Contains(a.Log(), "clock is behind the applied declaration's issue time") {
		t.Errorf("the agent's log does not say its clock is behind:\n%s", a.Log())
	}
}

// TestHostCutOffPastItsValiditySaysItsCheckIsOff: the mesh out of reach for longer
// than the validity (here the host's clock moved a day on while the mesh is
// stopped). The kept copy expires: a hand edit is not put back, and meshhost status
// says the file check is off, why and since when, where it kept an old "checked at …
// none changed"; the copy stays on disk. Set right again (the day was the clock's),
// the same copy puts the edit back, with no mesh.
func TestHostCutOffPastItsValiditySaysItsCheckIsOff(t *testing.T) {
	t.Parallel()
	var hostOffset atomic.Int64
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	m := harness.StartMesh(t, "cutoff", harness.Options{})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), hostNow)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgentWith(t, state, hostNow, func(o *agent.Options) {
		o.CheckFiles, o.Socket = time.Second, agent.SocketPath(state)
	})
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"declared"}]}`)
	m.WaitApplied("web-1", v, 15*time.Second)
	kept := filepath.Join(state, agent.KeptFileName)
	harness.Eventually(t, 15*time.Second, "the file check keeps its copy", func() bool {
		_, err := os.Stat(kept)
		return err == nil
	})
	m.Stop()

	hostOffset.Store(int64(25 * time.Hour))
	motd := filepath.Join(a.Root, "motd")
	if err := os.WriteFile(motd, []byte("edited by hand"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out string
	harness.Eventually(t, 15*time.Second, "meshhost status says the file check is off", func() bool {
		r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
		out = r.Stdout
		return r.Code == 0 && strings.Contains(r.Stdout, "files     OFF since ") && strings.Contains(r.Stdout, "expired")
	})
	if strings.Contains(out, "none changed") {
		t.Errorf("meshhost status says none changed while the check is off:\n%s", out)
	}
	time.Sleep(2 * time.Second) // two more checks
	if got, err := os.ReadFile(motd); err != nil || string(got) != "edited by hand" {
		t.Fatalf("motd = %q, %v under an expired copy; want the edit left", got, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the expired copy was removed: %v", err)
	}

	hostOffset.Store(0)
	harness.Eventually(t, 15*time.Second, "the edit put back from the same copy once the clock is right", func() bool {
		got, err := os.ReadFile(motd)
		return err == nil && string(got) == "declared"
	})
	r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", state)
	if strings.Contains(r.Stdout, "OFF since") || !strings.Contains(r.Stdout, "1 put back as declared") {
		t.Errorf("meshhost status once the copy is valid again:\n%s", r.Stdout)
	}
}

// TestNodesLastSeenByTheAnsweringClock: meshctl on a machine whose clock is right,
// asking a control plane whose clock is three hours behind: LAST SEEN is counted by
// the clock that stamped it, the answering control node's, not by this machine's,
// which showed every node alive and "last seen 3h0m ago".
func TestNodesLastSeenByTheAnsweringClock(t *testing.T) {
	t.Parallel()
	behind := skewed(-3 * time.Hour)
	m := harness.StartMesh(t, "seen", harness.Options{Now: behind})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), behind)
	if err != nil {
		t.Fatal(err)
	}
	harness.RunAgent(t, state, behind)
	harness.Eventually(t, 15*time.Second, "web-1 reports", func() bool {
		n, _ := m.Node("web-1")
		return n.State == "alive" && !n.LastSeen.IsZero()
	})
	res := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--data", string(m.Dir))
	if res.Code != 0 {
		t.Fatalf("meshctl nodes: exit %d\n%s", res.Code, res.Combined())
	}
	var row string
	for _, l := range strings.Split(res.Stdout, "\n") {
		if strings.HasPrefix(l, "web-1 ") {
			row = l
		}
	}
	if row == "" || strings.Contains(row, "3h") || !(strings.Contains(row, "just now") || strings.Contains(row, "s ago")) {
		t.Fatalf("web-1's LAST SEEN is not counted by the answering control node's clock:\n%s", res.Stdout)
	}
}
