package harness

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads the running serve's /metrics.
func (cp *ControlPlane) Scrape() map[string]*dto.MetricFamily {
	cp.t.Helper()
	return Scrape(cp.t, "http://"+cp.Metrics+"/metrics")
}

// Scrape reads a Prometheus text endpoint.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return fams
}

// Counter returns the value of the counter name whose labels include labels
// ("k=v" pairs), summed over the series that match; 0 when there is none.
func (cp *ControlPlane) Counter(name string, labels ...string) float64 {
	cp.t.Helper()
	return Sum(cp.Scrape(), name, labels...)
}

// Sum adds up the samples of family name whose labels include labels ("k=v").
func Sum(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetUntyped() != nil:
			total += m.GetUntyped().GetValue()
		default:
			panic(fmt.Sprintf("%s is neither a counter nor a gauge", name))
		}
	}
	return total
}
