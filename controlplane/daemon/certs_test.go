package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/state"
)

// TestServeRefusesCertificatesOutOfTheirTime: a node whose certificate expired by
// its clock (or is not valid yet) does not start: Open fails at once with
// datadir.ErrCertificateTime (meshctl's exit 7), naming the file and its dates. It
// used to start, find no peer that would talk to it, and exit a minute later
// advising a quorum recovery.
func TestServeRefusesCertificatesOutOfTheirTime(t *testing.T) {
	dir := bootstrapped(t, "expired")
	leafPEM, err := dir.ReadFile(datadir.TLSCertFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertificatePEM(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		at   time.Time
		want []string
	}{
		{"leaf expired", leaf.NotAfter.Add(time.Hour), []string{dir.Path(datadir.TLSCertFile), "expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)}},
		{"not valid yet", leaf.NotBefore.Add(-time.Hour), []string{dir.Path(datadir.TLSCertFile), dir.Path(datadir.CACertFile), "not valid until"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			d, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return c.at }})
			if err == nil {
				d.Close()
				t.Fatal("a node whose certificate is out of its time started")
			}
			if !errors.Is(err, datadir.ErrCertificateTime) {
				t.Fatalf("want ErrCertificateTime, got %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the refusal does not name %q:\n%v", w, err)
				}
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("refused after %s, not at once", took)
			}
		})
	}
}

// TestCertificateExpiryWarnedAndExported: a node whose certificate has less than
// 180 days left logs a warning at start naming the file, its NotAfter, the days
// left and the renewal command, and again once a day while it runs; one with more
// logs none. mesh_tls_certificate_expiry_timestamp_seconds exports both
// certificates' NotAfter, before the node is open as after.
func TestCertificateExpiryWarnedAndExported(t *testing.T) {
	dir := bootstrapped(t, "expiring")
	leafPEM, _ := dir.ReadFile(datadir.TLSCertFile)
	leaf, err := pki.ParseCertificatePEM(leafPEM)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := dir.ReadFile(datadir.CACertFile)
	ca, err := pki.ParseCertificatePEM(caPEM)
	if err != nil {
		t.Fatal(err)
	}

	// 100 days before the leaf expires: warned at start.
	var log lockedBuffer
	var clock atomic.Int64
	clock.Store(leaf.NotAfter.Add(-100 * 24 * time.Hour).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	d, err := Open(context.Background(), Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(&log, nil)), Now: now,
		Timeouts: testTimeouts, expiryCheckEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	warned := func() []string {
		var out []string
		for line := range strings.Lines(log.String()) {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "expires soon") {
				out = append(out, line)
			}
		}
		return out
	}
	lines := warned()
	if len(lines) != 1 {
		t.Fatalf("100 days before the leaf expires: %d warnings at start, want 1 (the leaf's):\n%s", len(lines), log.String())
	}
	for _, want := range []string{"file=" + dir.Path(datadir.TLSCertFile), "not_after=" + leaf.NotAfter.UTC().Format(time.RFC3339),
		"days_left=100", datadir.RenewCommand} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("the warning does not say %q:\n%s", want, lines[0])
		}
	}

	// The metric, from the registry served while starting and the one once open.
	for name, reg := range map[string]*prometheus.Registry{"starting": d.startingRegistry(), "open": d.newRegistry()} {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, f := range fams {
			if f.GetName() != "mesh_tls_certificate_expiry_timestamp_seconds" {
				continue
			}
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "certificate" {
						got[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			}
		}
		if got["leaf"] != float64(leaf.NotAfter.Unix()) || got["ca"] != float64(ca.NotAfter.Unix()) || len(got) != 2 {
			t.Errorf("%s: mesh_tls_certificate_expiry_timestamp_seconds = %v, want leaf %d and ca %d", name, got, leaf.NotAfter.Unix(), ca.NotAfter.Unix())
		}
	}

	// Once a day while it runs: a day later, a second warning, a day fewer.
	clock.Add(int64(24 * time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(warned()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if lines := warned(); len(lines) < 2 || !strings.Contains(lines[1], "days_left=99") {
		t.Fatalf("a day later, the daily check did not warn again with 99 days left:\n%s", log.String())
	}

	// The CA's own, with 30 days left (the leaf has more): warned, saying where the
	// new ca.pem goes. 200 days left on both: nothing.
	var calog lockedBuffer
	quiet := &Daemon{opts: Options{Dir: dir}, log: slog.New(slog.NewTextHandler(&calog, nil)), certs: certificates{leaf: leaf, ca: ca}}
	quiet.warnExpiry(ca.NotAfter.Add(-30 * 24 * time.Hour))
	if out := calog.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "the mesh CA's certificate expires soon") ||
		!strings.Contains(out, "file="+dir.Path(datadir.CACertFile)) || !strings.Contains(out, "copy the new ca.pem into every control node") {
		t.Errorf("30 days before the CA expires:\n%s", out)
	}
	// The leaf, issued for 10 years, expired there (while serve ran: a start
	// refuses it): said as expired, not as "expires soon" with days below zero (a
	// reviewer's reading).
	if out := calog.String(); strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "this control node's certificate expired") || strings.Contains(out, "days_left=-") {
		t.Errorf("the leaf expired while serving:\n%s", out)
	}
	var none lockedBuffer
	quiet.log = slog.New(slog.NewTextHandler(&none, nil))
	quiet.warnExpiry(leaf.NotAfter.Add(-200 * 24 * time.Hour))
	if none.String() != "" {
		t.Errorf("200 days before either expires, it logged:\n%s", none.String())
	}
}

// TestAnotherNodesCertificateExpiryIsShown (audit: an operator looking at the
// control plane as a whole did not see another node's certificate expiring; each
// node warned in its own log only): a control node's heartbeat carries when its
// certificate (tls.pem) and the CA's it serves with (ca.pem) expire, and every
// node's view (`meshctl control status`, `meshctl nodes --json`) shows them for
// each node alive, its own from what it read at start. A node offline shows none
// (its files may be renewed while it is stopped), nor does one of a version that
// sends none. Heartbeats are decoded leniently: one with fields this version does
// not know is heard, as an older node hears these.
func TestAnotherNodesCertificateExpiryIsShown(t *testing.T) {
	var log lockedBuffer
	d := loggedDaemon(t, &log, nil)
	for _, c := range []state.Command{
		{Op: state.OpCreateToken, CreateToken: &state.CreateTokenCmd{ID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, TTL: time.Hour,
			Control: &state.ControlAddrs{Broker: "127.0.0.2:7300", Raft: "127.0.0.1:1", Cluster: "127.0.0.1:1"}, Sealed: []byte("sealed")}},
		{Op: state.OpEnrol, Enrol: &state.EnrolCmd{TokenID: "tok-cp-2", Node: "cp-2", Role: state.RoleControl, PublicKey: "Ucp-2", CurveKey: "Xcp-2"}},
	} {
		if res, err := d.raft.Apply(c, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("admit cp-2: %v %v", err, res.Err)
		}
	}
	views := func() map[string]api.ControlView {
		t.Helper()
		out := map[string]api.ControlView{}
		for _, v := range d.controlStatus().Control {
			out[v.ID] = v
		}
		if _, ok := out["cp-2"]; !ok {
			t.Fatal("cp-2 is not among the control nodes")
		}
		return out
	}
	send := func(data []byte) {
		d.handleHeartbeat(&nats.Msg{Subject: api.ControlHeartbeatSubject("cp-2"), Data: data})
	}
	beat := func(h api.ControlHeartbeat) []byte {
		h.V, h.Node, h.Raft, h.Rules, h.AppliedIndex = api.ProtocolVersion, "cp-2", api.RaftNonvoter, state.ApplyRules, d.raft.AppliedIndex()
		data, _ := json.Marshal(h)
		return data
	}

	leafAt := d.now().Add(30 * 24 * time.Hour).Truncate(time.Second).UTC()
	caAt := d.now().Add(-time.Hour).Truncate(time.Second).UTC()
	send(beat(api.ControlHeartbeat{CertNotAfter: leafAt, CANotAfter: caAt}))
	v := views()
	if v["cp-2"].State != api.StateAlive || !v["cp-2"].CertNotAfter.Equal(leafAt) || !v["cp-2"].CANotAfter.Equal(caAt) {
		t.Fatalf("cp-2, heard with its certificate expiring at %v and its CA's at %v: %s, shown %v and %v",
			leafAt, caAt, v["cp-2"].State, v["cp-2"].CertNotAfter, v["cp-2"].CANotAfter)
	}
	data, _ := json.Marshal(v["cp-2"])
	if want := `"cert_not_after":"` + leafAt.Format(time.RFC3339) + `","ca_not_after":"` + caAt.Format(time.RFC3339) + `"`; !strings.Contains(string(data), want) {
		t.Errorf("JSON of cp-2's view lacks %s: %s", want, data)
	}
	leaf, ca := d.certs.notAfter()
	if self := v[d.cfg.Node]; leaf.IsZero() || !self.CertNotAfter.Equal(leaf) || !self.CANotAfter.Equal(ca) {
		t.Errorf("this node's own view shows %v and %v; it serves with certificates until %v and %v", self.CertNotAfter, self.CANotAfter, leaf, ca)
	}

	// A field this version does not know: heard all the same.
	withNew := strings.Replace(string(beat(api.ControlHeartbeat{CertNotAfter: leafAt})), `{`, `{"from_a_newer_version":{"x":1},`, 1)
	send([]byte(withNew))
	if v := views()["cp-2"]; !v.CertNotAfter.Equal(leafAt) || !v.CANotAfter.IsZero() {
		t.Errorf("a heartbeat with a field this version does not know, and no CA date: shown %v and %v, want %v and none", v.CertNotAfter, v.CANotAfter, leafAt)
	}
	// An older version: nothing to show.
	send(beat(api.ControlHeartbeat{}))
	if v := views()["cp-2"]; !v.CertNotAfter.IsZero() || !v.CANotAfter.IsZero() {
		t.Errorf("a heartbeat of a version that sends no dates: shown %v and %v", v.CertNotAfter, v.CANotAfter)
	}
	// Offline: stopped, its files may be renewed before it starts again.
	send(beat(api.ControlHeartbeat{CertNotAfter: leafAt, CANotAfter: caAt}))
	send(beat(api.ControlHeartbeat{CertNotAfter: leafAt, CANotAfter: caAt, Stopping: true}))
	if v := views()["cp-2"]; v.State != api.StateOffline || !v.CertNotAfter.IsZero() || !v.CANotAfter.IsZero() {
		t.Errorf("cp-2 stopped: %s, shown %v and %v; want offline and none", v.State, v.CertNotAfter, v.CANotAfter)
	}

	// What this node sends: the dates of the certificates it serves with.
	own := ownHeartbeat(t, d)
	if !own.CertNotAfter.Equal(leaf) || !own.CANotAfter.Equal(ca) {
		t.Fatalf("this node's heartbeat says its certificates expire at %v and %v; they do at %v and %v", own.CertNotAfter, own.CANotAfter, leaf, ca)
	}
}
