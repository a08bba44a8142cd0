package agent

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAgentBuildInfo: the agent's metrics name the build running, version and
// commit, so that a fleet's dashboard shows how far an upgrade of the agents went on
// each host; a build that recorded no commit says unknown rather than drop the label.
func TestAgentBuildInfo(t *testing.T) {
	for _, c := range []struct{ version, revision, wantRevision string }{
		{"0.1.0+git20261203145709.7132ef2931ef", "7132ef2931ef0123", "7132ef2931ef0123"},
		{"0.1.0", "", "unknown"},
	} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector{&Agent{o: Options{Version: c.version, Revision: c.revision}}})
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		for _, f := range fams {
			if f.GetName() != "mesh_agent_build_info" {
				continue
			}
			for _, m := range f.GetMetric() {
				got = map[string]string{}
				for _, l := range m.GetLabel() {
					got[l.GetName()] = l.GetValue()
				}
				if m.GetGauge().GetValue() != 1 {
					t.Errorf("mesh_agent_build_info = %v, want 1", m.GetGauge().GetValue())
				}
			}
		}
		if got["version"] != c.version || got["revision"] != c.wantRevision {
			t.Errorf("mesh_agent_build_info%v, want version %q and revision %q", got, c.version, c.wantRevision)
		}
	}
}

// metricValue is the value of the agent's gauge name, without labels.
func metricValue(t *testing.T, a *Agent, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
