package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// waitFlag is --wait: alone (the default timeout), --wait DURATION or
// --wait=DURATION.
type waitFlag struct{ d time.Duration }

// defaultWait is how long --wait waits without a value.
const defaultWait = 2 * time.Minute

// maxWait bounds --wait: past an hour a value is a typo (1000h for 10m), and a
// longer wait is `meshctl status` run again (it exits 0 once converged).
const maxWait = time.Hour

func (w *waitFlag) String() string {
	if w == nil || w.d == 0 {
		return ""
	}
	return w.d.String()
}

func (w *waitFlag) Type() string { return "duration" }

// accepts reports whether arg, following --wait, is its value: any duration, so
// that one Set refuses (-1s, 0s, 1000h) is refused as --wait's, not read as a
// stray argument or as shorthand flags. The commands taking --wait take no
// arguments that could be a duration.
func (w *waitFlag) accepts(arg string) bool {
	_, err := time.ParseDuration(arg)
	return err == nil
}

func (w *waitFlag) Set(v string) error {
	switch v {
	case "true":
		w.d = defaultWait
		return nil
	case "false":
		w.d = 0
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second || d > maxWait {
		return fmt.Errorf("--wait=%s: give a duration from 1s to %s, such as 30s (to wait longer, run meshctl status until it exits 0)", v, maxWait)
	}
	w.d = d
	return nil
}

// convergence is where each declared node stands after --wait.
type convergence struct {
	Converged []string          `json:"converged"`
	Failed    map[string]string `json:"failed,omitempty"`  // node -> last error
	Pending   []string          `json:"pending,omitempty"` // alive, not applied yet
	Offline   []string          `json:"offline,omitempty"`
	// Superseded: nodes declared another body since, by the version that did.
	Superseded map[string]uint64 `json:"superseded,omitempty"`
	// Revoked: nodes revoked since they were declared, and when.
	Revoked map[string]time.Time `json:"revoked,omitempty"`
}

// noLonger counts the nodes a declaration sent again reached and that hold it no
// longer (api.DeclareResult.NoLonger) as the first sending's wait would have.
func (c *convergence) noLonger(nodes []api.TargetProgress) {
	if c.Superseded == nil {
		c.Superseded = map[string]uint64{}
	}
	if c.Revoked == nil {
		c.Revoked = map[string]time.Time{}
	}
	for _, p := range nodes {
		switch p.State {
		case api.ProgressSuperseded:
			c.Superseded[p.Node] = p.Version
		case api.ProgressRevoked:
			c.Revoked[p.Node] = p.RevokedAt
		}
	}
}

// err is --wait's verdict: nil when every node converged, else an exit-5 error
// naming the others, grouped by cause (causes).
func (c convergence) err() error {
	var g causes
	for _, n := range slices.Sorted(maps.Keys(c.Superseded)) {
		g.add("declared another body since", "this one is no longer what they are to hold", fmt.Sprintf("%s (v%d)", n, c.Superseded[n]))
	}
	for _, n := range slices.Sorted(maps.Keys(c.Revoked)) {
		g.add("revoked since", "they will not apply it", fmt.Sprintf("%s (at %s)", n, c.Revoked[n].UTC().Format(time.RFC3339)))
	}
	for _, n := range slices.Sorted(maps.Keys(c.Failed)) {
		// "CODE: message" as waitConverged keeps it; "failed" without an error.
		code, msg, ok := strings.Cut(c.Failed[n], ": ")
		if !ok {
			code, msg = "", ""
		}
		g.add(failure("failed", n, code, msg))
	}
	for _, n := range c.Pending {
		g.add("did not apply it in time", "", n)
	}
	for _, n := range c.Offline {
		// Nothing is lost: said so, and where to look (a walkthrough read "1
		// offline" alone, and could not tell whether to declare again).
		g.add("offline", "the declaration stands: each applies it when its agent reconnects; meshctl status NODE shows when", n)
	}
	if g.nodes == 0 {
		return nil
	}
	head := fmt.Sprintf("%d of %d node(s)", g.nodes, g.nodes+len(c.Converged))
	return exitError{code: exitNotConverged, err: fmt.Errorf("not converged: %s", g.line(head))}
}

// waitConverged polls the control plane until every assigned node applied its
// version or failed it, or until the deadline, printing progress: one line redrawn in
// place on a terminal (redraw), else a plain line each time the counts change. It
// asks only about the nodes still undecided, a page at a time
// (operator.Client.Progress), first soon after the declaration and then less often
// (and less often still for many nodes): a small fleet converges in tens of
// milliseconds, and a large one should not be asked about 10,000 nodes twenty times
// a second.
//
// body is the digest of the body declared (api.DeclareResult.Body; "" from a
// control plane that gives none): a node declared another body since, by another
// declaration, is superseded, not counted converged on this one when it applies
// the later version.
func waitConverged(c *operator.Client, assigned []api.Assignment, body string, limit time.Duration, progress io.Writer, redraw bool) (convergence, error) {
	deadline := time.Now().Add(limit)
	start := time.Now()
	line := progressLine{w: progress, redraw: redraw}
	undecided := slices.Clone(assigned)
	cv := convergence{Converged: []string{}, Failed: map[string]string{}, Superseded: map[string]uint64{}, Revoked: map[string]time.Time{}}
	interval := 50 * time.Millisecond
	// The first poll waits as a later one would for so many nodes, without the
	// floor: right after the declaration nothing has applied yet, and a poll about
	// every node then costs the control plane the most and tells the least.
	time.Sleep(min(pollWait(len(undecided)), time.Until(deadline)))
	for {
		var still []api.Assignment
		var offline, pending []string
		res, err := c.Progress(api.ProgressRequest{Targets: undecided, Body: body})
		if err != nil {
			return convergence{}, err
		}
		// The others come in the request's order: what is not among them converged.
		others := res.Others
		for _, target := range undecided {
			if len(others) == 0 || others[0].Node != target.Node {
				cv.Converged = append(cv.Converged, target.Node)
				continue
			}
			t := others[0]
			others = others[1:]
			switch t.State {
			case api.ProgressFailed:
				msg := "failed"
				if t.Error != nil {
					msg = t.Error.Code + ": " + t.Error.Message
				}
				cv.Failed[t.Node] = msg
			case api.ProgressSuperseded:
				cv.Superseded[t.Node] = t.Version
			case api.ProgressRevoked:
				cv.Revoked[t.Node] = t.RevokedAt
			case api.ProgressOffline:
				offline = append(offline, t.Node)
				still = append(still, target)
			default:
				pending = append(pending, t.Node)
				still = append(still, target)
			}
		}
		if len(others) > 0 {
			return convergence{}, fmt.Errorf("the control plane answered for nodes it was not asked about (%s)", others[0].Node)
		}
		undecided, cv.Offline, cv.Pending = still, offline, pending
		done := len(cv.Pending) == 0 && len(cv.Offline) == 0
		counts := fmt.Sprintf("waiting for %d node(s): %d converged, %d failed, %d offline, %d pending",
			len(assigned), len(cv.Converged), len(cv.Failed), len(cv.Offline), len(cv.Pending))
		if len(cv.Superseded) > 0 {
			counts += fmt.Sprintf(", %d superseded", len(cv.Superseded))
		}
		if len(cv.Revoked) > 0 {
			counts += fmt.Sprintf(", %d revoked", len(cv.Revoked))
		}
		finished := done || time.Now().After(deadline)
		line.show(counts, time.Since(start), finished)
		if finished {
			slices.Sort(cv.Converged)
			return cv, nil
		}
		time.Sleep(min(max(interval, pollWait(len(undecided))), time.Until(deadline)))
		interval = min(interval*3/2, 500*time.Millisecond)
	}
}

// pollWait is how long to wait before asking about n undecided nodes. Each poll
// costs the control plane a few microseconds a node asked about, its garbage
// included: a large fleet is asked less often, so that waiting never costs it more
// than a few percent of a core.
func pollWait(n int) time.Duration { return time.Duration(n) * 50 * time.Microsecond }

// progressLine prints a progress report that changes over time: on a terminal one
// line redrawn in place; elsewhere (a log, a pipe) a plain line each time the report
// changes, and no carriage returns.
type progressLine struct {
	w      io.Writer
	redraw bool
	last   string
}

// show prints report, elapsed so far; final ends the line.
func (p *progressLine) show(report string, elapsed time.Duration, final bool) {
	if p.redraw {
		fmt.Fprintf(p.w, "\r%s (%s) ", report, elapsed.Round(time.Second))
		if final {
			fmt.Fprintln(p.w)
		}
		return
	}
	if report != p.last {
		fmt.Fprintf(p.w, "%s (%s)\n", report, elapsed.Round(time.Second))
	}
	p.last = report
}
