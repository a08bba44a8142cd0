package daemon

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
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
