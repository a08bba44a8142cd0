package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
)

// States of a control node's certificate in `meshctl control status --json`
// ("certificates"), by this machine's clock.
const (
	certValid       = "valid"
	certExpiresSoon = "expires_soon" // within pki.RenewWithin (180 days)
	certExpired     = "expired"
)

// certificateExpiry is when one certificate a control node serves with expires:
// its own (Certificate "leaf", its tls.pem) or the mesh CA's (Certificate "ca", its
// ca.pem, which every node holds a copy of), as the node read them when it started.
type certificateExpiry struct {
	Node        string    `json:"node"`
	Certificate string    `json:"certificate"`
	NotAfter    time.Time `json:"not_after"`
	State       string    `json:"state"`
}

// File is the file of the node's data directory the certificate is.
func (c certificateExpiry) File() string {
	if c.Certificate == renewedCA {
		return datadir.CACertFile
	}
	return datadir.TLSCertFile
}

// certificateExpiries gathers, from the answers' views, when the certificates of
// each control node alive expire, judged at now. A node's own answer says what it
// read itself; another's view says what its heartbeats said: the leader's first,
// then any (a node renewed and restarted a moment ago may not be heard with its
// new one everywhere yet). A node offline, or of a version that does not say, shows
// no dates (api.ControlView), and is left out.
func certificateExpiries(answers []api.ControlStatus, leader string, now time.Time) []certificateExpiry {
	type source struct {
		v    api.ControlView
		rank int // 2: the node's own answer, 1: the leader's, 0: another's
	}
	best := map[string]source{}
	for _, a := range answers {
		for _, v := range a.Control {
			if v.CertNotAfter.IsZero() && v.CANotAfter.IsZero() {
				continue
			}
			rank := 0
			switch a.Node {
			case v.ID:
				rank = 2
			case leader:
				rank = 1
			}
			if b, ok := best[v.ID]; !ok || rank > b.rank {
				best[v.ID] = source{v, rank}
			}
		}
	}
	var out []certificateExpiry
	for _, id := range slices.Sorted(maps.Keys(best)) {
		v := best[id].v
		for _, c := range []struct {
			kind string
			at   time.Time
		}{{renewedLeaf, v.CertNotAfter}, {renewedCA, v.CANotAfter}} {
			if c.at.IsZero() {
				continue
			}
			st := certValid
			switch left := c.at.Sub(now); {
			case left <= 0:
				st = certExpired
			case left < pki.RenewWithin:
				st = certExpiresSoon
			}
			out = append(out, certificateExpiry{Node: id, Certificate: c.kind, NotAfter: c.at.UTC(), State: st})
		}
	}
	return out
}

// expiredCertificates names, printable, the certificates in r that have expired:
// "cp-2 (tls.pem)".
func (r controlStatusReport) expiredCertificates() []string {
	var out []string
	for _, c := range r.Certificates {
		if c.State == certExpired {
			out = append(out, oneLine(c.Node, 64)+" ("+c.File()+")")
		}
	}
	return out
}

// caHolders are the control nodes the answers show holding the CA key (`meshctl
// nodes` marks them (CA)), sorted.
func caHolders(answers []api.ControlStatus) []string {
	var out []string
	for _, a := range answers {
		for _, v := range a.Control {
			if v.CAHolder && v.State != api.StateRemoved && !slices.Contains(out, v.ID) {
				out = append(out, v.ID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// printCertificates names each certificate of r that expires within
// pki.RenewWithin of now, or has expired, with what follows and how to renew it:
// each node's own one line, the CA's one line for the nodes that serve with the
// same one. Nothing for the others: `--json` carries every date.
func printCertificates(w io.Writer, r controlStatusReport, now time.Time) {
	holders := caHolders(r.Answered)
	for _, c := range r.Certificates {
		if c.Certificate != renewedLeaf || c.State == certValid {
			continue
		}
		node := oneLine(c.Node, 64)
		what := fmt.Sprintf("%s's certificate (its %s) expires in %s, at %s: then the other control nodes and the hosts refuse it.",
			node, datadir.TLSCertFile, span(c.NotAfter.Sub(now)), c.NotAfter.Format(time.RFC3339))
		if c.State == certExpired {
			what = fmt.Sprintf("%s's certificate (its %s) expired %s ago, at %s: the other control nodes and the hosts refuse every new connection to it, so it drops out once a peer restarts, and its `meshctl serve` does not start again (exit 7).",
				node, datadir.TLSCertFile, span(now.Sub(c.NotAfter)), c.NotAfter.Format(time.RFC3339))
		}
		var how string
		switch {
		case slices.Contains(holders, c.Node):
			how = fmt.Sprintf("Renew it on %s, which holds the CA key: `%s --data DIR --certificate DIR/%s`, then restart it", node, datadir.RenewCommand, datadir.TLSCertFile)
		default:
			how = fmt.Sprintf("Renew it %s: copy %s's %s there, run `%s --data DIR --certificate COPY-OF-%s`, put the result in place of %s's %s and restart it",
				where(holders), node, datadir.TLSCertFile, datadir.RenewCommand, datadir.TLSCertFile, node, datadir.TLSCertFile)
		}
		fmt.Fprintf(w, "%s %s (docs/operations.md, \"Certificate lifetimes\")\n", what, how)
	}

	// The CA's: one line per date, naming the nodes that serve with it.
	byDate := map[time.Time][]string{}
	var dates []time.Time
	var latest time.Time
	var latestOn []string
	for _, c := range r.Certificates {
		if c.Certificate != renewedCA {
			continue
		}
		switch {
		case c.NotAfter.After(latest):
			latest, latestOn = c.NotAfter, []string{oneLine(c.Node, 64)}
		case c.NotAfter.Equal(latest):
			latestOn = append(latestOn, oneLine(c.Node, 64))
		}
		if c.State == certValid {
			continue
		}
		if _, ok := byDate[c.NotAfter]; !ok {
			dates = append(dates, c.NotAfter)
		}
		byDate[c.NotAfter] = append(byDate[c.NotAfter], oneLine(c.Node, 64))
	}
	slices.SortFunc(dates, time.Time.Compare)
	for _, at := range dates {
		nodes := byDate[at]
		serve := strings.Join(nodes, ", ") + " serve with (their " + datadir.CACertFile + ")"
		if len(nodes) == 1 {
			serve = nodes[0] + " serves with (its " + datadir.CACertFile + ")"
		}
		what := fmt.Sprintf("the mesh CA's certificate that %s expires in %s, at %s: then every host and control node refuses every broker that presents it.",
			serve, span(at.Sub(now)), at.Format(time.RFC3339))
		if !at.After(now) {
			what = fmt.Sprintf("the mesh CA's certificate that %s expired %s ago, at %s: hosts and control nodes refuse every new connection to a broker that presents it.",
				serve, span(now.Sub(at)), at.Format(time.RFC3339))
		}
		how := fmt.Sprintf("Renew it %s (`%s --data DIR --certificate DIR/%s`: its key and pin stay), copy the new %s into every control node's data directory and restart each, one at a time",
			where(holders), datadir.RenewCommand, datadir.CACertFile, datadir.CACertFile)
		if latest.After(at) && latest.Sub(now) >= pki.RenewWithin {
			// Renewed already, and not every node restarted with it.
			verb := "serve"
			if len(latestOn) == 1 {
				verb = "serves"
			}
			restart := "restart each, one at a time"
			if len(nodes) == 1 {
				restart = "restart it"
			}
			how = fmt.Sprintf("%s already %s with a renewed one (until %s): copy that %s into the data directory of %s and %s",
				strings.Join(latestOn, ", "), verb, latest.Format(time.RFC3339), datadir.CACertFile, strings.Join(nodes, ", "), restart)
		}
		fmt.Fprintf(w, "%s %s (docs/operations.md, \"Certificate lifetimes\")\n", what, how)
	}
}

// where says where certificates are renewed: on the control node(s) that hold the
// CA key, as the answers show them, or where the CA key is.
func where(holders []string) string {
	switch len(holders) {
	case 0:
		return "where the CA key is"
	case 1:
		return "on " + oneLine(holders[0], 64) + ", which holds the CA key"
	}
	named := make([]string, len(holders))
	for i, h := range holders {
		named[i] = oneLine(h, 64)
	}
	return "on one of " + strings.Join(named, ", ") + ", which hold the CA key"
}

// span is a duration in whole days, or below two days in hours and minutes.
func span(d time.Duration) string {
	if days := int(d / (24 * time.Hour)); days >= 2 {
		return fmt.Sprintf("%d days", days)
	}
	return d.Round(time.Minute).String()
}
