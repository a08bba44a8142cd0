package integration

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestFreshness: declarations expire and the control plane re-signs them before they
// do. A host whose declaration expired without a fresh one reports itself stale and
// keeps its last good state; operators see it; a refresh (same version, same body,
// new validity) makes it fresh again without applying anything.
func TestFreshness(t *testing.T) {
	var cpOffset, hostOffset atomic.Int64
	cpNow := func() time.Time { return time.Now().Add(time.Duration(cpOffset.Load())) }
	hostNow := func() time.Time { return time.Now().Add(time.Duration(hostOffset.Load())) }
	m := harness.StartMesh(t, "fresh", harness.Options{Now: cpNow})
	state, err := harness.EnrolHost(t, m.Token("web-1", 15*time.Minute).Encode(), hostNow)
	if err != nil {
		t.Fatal(err)
	}
	a := harness.RunAgent(t, state, hostNow)
	v := m.Declare("web-1", `{"files":[{"path":"motd","content":"fresh"}]}`)
	m.WaitApplied("web-1", v, 15*time.Second)
	first, _ := m.Node("web-1")

	// 25 hours pass for the host alone: nothing fresh reaches it (the control plane
	// has not moved), so its 24-hour declaration expires.
	hostOffset.Store(int64(25 * time.Hour))
	harness.Eventually(t, 10*time.Second, "the host reports itself stale", func() bool {
		n, _ := m.Node("web-1")
		return n.Stale
	})
	if got, err := os.ReadFile(filepath.Join(a.Root, "motd")); err != nil || string(got) != "fresh" {
		t.Fatalf("a stale host must keep its last good state: motd = %q, %v", got, err)
	}

	// The control plane's time catches up: it re-signs the expired declaration.
	appliedBefore := len(harness.AppliedVersions(a.Log()))
	cpOffset.Store(int64(25 * time.Hour))
	harness.Eventually(t, 15*time.Second, "the refresh reaches the host", func() bool {
		n, _ := m.Node("web-1")
		return !n.Stale && n.DeclaredExpiry.After(first.DeclaredExpiry.Add(24*time.Hour))
	})
	n, _ := m.Node("web-1")
	if n.Declared != v || n.Applied == nil || *n.Applied != v {
		t.Fatalf("a refresh changed versions: declared v%d applied %v, want v%d", n.Declared, n.Applied, v)
	}
	if got := harness.AppliedVersions(a.Log()); len(got) != appliedBefore {
		t.Fatalf("applied %v after the refresh (%d before); a refresh must not apply again", got, appliedBefore)
	}
}
