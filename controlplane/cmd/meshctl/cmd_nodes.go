package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
)

func nodesCommand() command {
	return rosterCommand("nodes", "Show the mesh's nodes: role, alive or offline, last seen, declared and applied version, last error.", false)
}

func statusCommand() command {
	return rosterCommand("status", `Show convergence: per node declared vs applied version, last error, last seen, staleness; and a summary.
Exits 0 only when every live node applied the version declared for it, ran its hooks
without a failure, and is not stale; otherwise 5, naming the nodes that are not (a
failed hook with the end of its output; key_shared: a node whose key two machines hold,
one cloned after its enrolment). Offline and revoked nodes are
counted, not waited for, unless named (ID...): a named node that is revoked, or
offline and behind, exits 5 too; a name that is no node exits 4 (so does a revoked
node once its record is forgotten, 30 days or more after). With --role, --label
or --state, the table, the summary and the verdict are about the nodes selected, and a
selection of none exits 1.`, true)
}

// rosterCommand is nodes, or status when withSummary adds the convergence summary.
func rosterCommand(name, summaryText string, withSummary bool) command {
	usage := "--data DIR [--json] [ID... | --role R | --label k=v... | --state S... | --body DIGEST]"
	if withSummary {
		usage = "--data DIR [--json] [--summary] [ID... | --role R | --label k=v... | --state S... | --body DIGEST]"
	}
	return command{
		name:    name,
		usage:   usage,
		summary: summaryText,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON, summaryOnly bool
			var sel rosterSelection
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
			if withSummary {
				c.Flags().BoolVar(&summaryOnly, "summary", false, "print the summary and the verdict, not a row for each node (a fleet's thousands); the exit code is the same")
			}
			sel.register(c)
			c.ValidArgsFunction = cp.completeNodes(0, everyNode)
			return func(args []string) error {
				if len(args) > 0 && sel.active() {
					return usagef("name the nodes, or select them with --role, --label and --state, not both")
				}
				if err := checkTargets(args, sel.role); err != nil {
					return err
				}
				res, err := fetchNodes(&cp, args)
				if err != nil {
					return err
				}
				// A name that is no node: a typo, which a verdict over the nodes
				// that were found would pass as converged (exit 0).
				controlNamed, unknown := namedAbsent(args, res)
				enrolled := len(res.Nodes)
				sel.apply(&res)
				if res.Nodes == nil {
					res.Nodes = []api.NodeView{} // [] in JSON, not null
				}
				sum := summarise(res)
				switch {
				case asJSON && summaryOnly:
					if err := writeJSON(cio.stdout, struct {
						Summary summary `json:"summary"`
					}{sum}); err != nil {
						return err
					}
				case asJSON && withSummary:
					if err := writeJSON(cio.stdout, struct {
						Summary summary        `json:"summary"`
						Nodes   []api.NodeView `json:"nodes"`
					}{sum, res.Nodes}); err != nil {
						return err
					}
				case asJSON:
					if err := writeJSON(cio.stdout, res); err != nil {
						return err
					}
				case len(args) > 0 && len(res.Nodes) == 0 && len(controlNamed) == 0:
					// Every name is no node: the error says so, and an empty table
					// and a summary of nothing before it read as an answer.
				default:
					shown := res
					if len(args) > 0 || sel.active() {
						shown.Control = controlNamed // the nodes asked for alone, as the guide says
					}
					if !summaryOnly || len(res.Nodes) == 0 && len(controlNamed) > 0 {
						// Control nodes named alone have no summary: their rows.
						printNodes(cio.stdout, shown, answeredAt(res, time.Now()), len(controlNamed) > 0)
						if len(args) > 0 {
							printNamedErrors(cio.stdout, res.Nodes)
						}
					}
					switch {
					case len(res.Nodes) > 0, len(args) > 0:
					case enrolled == 0:
						fmt.Fprintln(cio.stdout, "(no nodes enrolled yet: mint a token with `meshctl token`)")
					default:
						fmt.Fprintf(cio.stdout, "(none of the %d node(s) matches %s)\n", enrolled, &sel)
					}
					if withSummary && (len(res.Nodes) > 0 || len(args) == 0) {
						// Converged, behind, failing and revoked partition the nodes;
						// stale and offline are said of some of the others, apart: in
						// one list they added up to more nodes than there were.
						if !summaryOnly {
							fmt.Fprintln(cio.stdout)
						}
						fmt.Fprintf(cio.stdout, "%d node(s): %d converged, %d behind, %d failing, %d revoked (of those not revoked: %d stale, %d offline, %d with hooks running); keyring epoch %d\n",
							sum.Nodes, sum.Converged, sum.Behind, sum.Failing, sum.Revoked, sum.Stale, sum.Offline, sum.HooksRunning, res.KeyringEpoch)
						if line := agentsLine(sum.Agents); line != "" {
							fmt.Fprintln(cio.stdout, line)
						}
						if line := putBackLine(res.Nodes, answeredAt(res, time.Now())); line != "" {
							fmt.Fprintln(cio.stdout, line)
						}
						if line := sharedKeyLine(res.Nodes, answeredAt(res, time.Now()), time.Duration(res.SharedKeyGrace)); line != "" {
							fmt.Fprintln(cio.stdout, line)
						}
					}
				}
				if len(unknown) > 0 {
					return exitError{code: exitRefused, err: fmt.Errorf("no such node: %s (`meshctl nodes` lists them; a node revoked 30 days ago or more is no longer listed)", strings.Join(unknown, ", "))}
				}
				if !withSummary {
					return nil
				}
				if sel.active() && len(res.Nodes) == 0 {
					// A verdict about no node would be a 0 a script takes for "converged",
					// after a mistyped label as well as after a real one.
					// Said with where to look for what was selected by (a
					// walkthrough: "--json its labels" while the table has them,
					// and nothing of a body).
					where := "`meshctl nodes` lists every node with its role, state and labels"
					if sel.body != "" {
						where = "`meshctl nodes --json` gives each node's declared body digest (\"declared_body\"), and `meshctl declare` printed the one it declared"
					}
					return fmt.Errorf("no node matches %s: nothing to report on; %s", &sel, where)
				}
				return notConverged(res.Nodes, len(args) > 0)
			}
		},
	}
}

// hostsText is a control node's hosts for the table: connected/most, "-" when it
// did not say.
func hostsText(h *api.HostCapacity) string {
	switch {
	case h == nil:
		return "-"
	case h.Max == 0:
		return fmt.Sprint(h.Connected)
	}
	return fmt.Sprintf("%d/%d", h.Connected, h.Max)
}

// answeredAt is the time how long ago nodes were last seen is counted from: the
// answering control node's clock, which stamped when it saw them, or, from a
// control plane too old to say it, now. By this machine's clock, a control plane
// three hours behind showed every node alive and "3h0m0s ago".
func answeredAt(res api.NodesResult, now time.Time) time.Time {
	if res.At.IsZero() {
		return now
	}
	return res.At
}

func printNodes(w io.Writer, res api.NodesResult, now time.Time, controlNamed bool) {
	if len(res.Control) > 1 || controlNamed && len(res.Control) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONTROL\tRAFT\tSTATE\tLAST SEEN\tBROKER\tHOSTS\tAPPLIED INDEX")
		removed := 0
		for _, c := range res.Control {
			if c.Raft == api.RaftRemoved && !controlNamed {
				// Kept in the roster for good, they were a row each, "removed
				// removed", as long as the mesh lived: counted below instead.
				removed++
				continue
			}
			// Heard by the answering node since it started: after a recovery
			// from lost quorum the lost voters read "never", having served for
			// months (a docs walkthrough).
			seen := "-"
			if !c.LastSeen.IsZero() {
				seen = ago(now.Sub(c.LastSeen))
			}
			name := c.ID
			if c.CAHolder {
				name += " (CA)"
			}
			state := c.State
			if c.NotFollowing != "" {
				// Alive on the brokers, and its Raft cut off: it counts towards
				// no commit (`meshctl control status` says why).
				state += ", not following"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", name, c.Raft, state, seen, c.Broker, hostsText(c.Hosts), c.AppliedIndex)
		}
		tw.Flush()
		if removed > 0 {
			fmt.Fprintf(w, "(%d control node(s) removed: meshctl nodes --json lists them, or name one)\n", removed)
		}
		if controlNamed && len(res.Nodes) == 0 {
			return // only control nodes were named: no host table under them
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tLAST SEEN\tDECLARED\tAPPLIED\tAGENT\tLABELS\tLAST ERROR")
	for _, n := range res.Nodes {
		applied := "-"
		if n.Applied != nil {
			applied = fmt.Sprintf("v%d", *n.Applied)
		}
		seen := "never"
		if !n.LastSeen.IsZero() {
			seen = ago(now.Sub(n.LastSeen))
		}
		lastErr := "-"
		if n.LastError != nil {
			lastErr = fmt.Sprintf("v%d %s: %s", n.LastError.Version, oneLine(n.LastError.Code, api.MaxStatusCodeLen), oneLine(n.LastError.Message, 60))
			if !n.LastError.RetryAt.IsZero() {
				lastErr += " (retry at " + n.LastError.RetryAt.UTC().Format(time.TimeOnly) + "Z)"
			}
		}
		state := n.State
		if n.Stale {
			state += " (stale)"
		}
		if n.HooksRunning {
			state += " (hooks running)"
		}
		if n.Connections > 1 && n.State != api.StateRevoked {
			// Only the summary said so, and only status printed it: a clone
			// hears every declaration, secrets included.
			state += fmt.Sprintf(" (%d connections)", n.Connections)
		}
		labels := "-"
		if len(n.Labels) > 0 {
			// What --label selects by: only --json showed them, and a declaration
			// by a label no node carried said only "matches no node".
			labels = oneLine(formatLabels(n.Labels), 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tv%d\t%s\t%s\t%s\t%s\n", n.ID, n.Role, state, seen, n.Declared, applied, agentText(n.Agent), labels, lastErr)
	}
	tw.Flush()
}

// printNamedErrors prints, under the table of nodes named on the command line,
// each one's last error whole, which the table cuts to 60 bytes: a keyring_gone
// says there how to enrol the node again, and the advice "meshctl nodes NODE says
// how" (signing-key status, status) led to a row cut before it.
func printNamedErrors(w io.Writer, nodes []api.NodeView) {
	for _, n := range nodes {
		if n.LastError == nil {
			continue
		}
		whole := oneLine(n.LastError.Message, 6*len(n.LastError.Message)+1)
		if whole == oneLine(n.LastError.Message, 60) {
			continue // the row shows it whole
		}
		fmt.Fprintf(w, "\n%s: last error v%d %s: %s\n", n.ID, n.LastError.Version, oneLine(n.LastError.Code, api.MaxStatusCodeLen), whole)
	}
}

func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// oneLine shows text a node reported as one line of at most about n bytes, with
// nothing in it a terminal would act on (api.CleanText): a control plane older
// than the check of statuses may hold such text.
func oneLine(s string, n int) string {
	c := api.CleanText(s, 6*len(s)) // an escape is at most six bytes a byte
	if len(c) <= n {
		return c
	}
	return api.CleanText(c, n-1) + "…"
}

// headAndTail shows text a node reported as one line: all of it if it fits in
// head+tail bytes, else its first head bytes and its last tail (where a failing
// command says why), with an ellipsis between, each cut at a blank within
// wordCut bytes of it (cut mid-word, "group a … h systemctl" read as nonsense: a
// walkthrough).
func headAndTail(s string, head, tail int) string {
	c := oneLine(s, 6*len(s)+1)
	if len(c) <= head+tail+3 {
		return c
	}
	h, t := head, len(c)-tail
	if h > 0 && inWord(c[h-1]) && inWord(c[h]) {
		if b := strings.LastIndexByte(c[max(0, h-wordCut):h], ' '); b >= 0 {
			h = max(0, h-wordCut) + b
		}
	}
	if tail > 0 && t > 0 && inWord(c[t-1]) && inWord(c[t]) {
		if b := strings.IndexByte(c[t:min(len(c), t+wordCut)], ' '); b >= 0 {
			t += b + 1
		}
	}
	for h > 0 && !utf8.RuneStart(c[h]) {
		h--
	}
	for t < len(c) && (!utf8.RuneStart(c[t]) || c[t] == ' ') {
		t++
	}
	return strings.TrimRight(c[:h], " ") + " … " + c[t:]
}

// wordCut is how far headAndTail looks back (or on) for a blank to cut at.
const wordCut = 24

// inWord reports whether c is part of a word: a cut between two such bytes is
// mid-word.
func inWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80 || strings.IndexByte("_-'./", c) >= 0
}

// agentText is a node's agent for the table: the version of meshhost it last
// reported, the agent whole if it is another program, "-" if it reported none the
// control plane keeps (or the control plane is older than the column). A control
// plane older than its check may hold anything: shown as one short line.
func agentText(agent string) string {
	if agent == "" {
		return "-"
	}
	return oneLine(strings.TrimPrefix(agent, "meshhost/"), api.MaxAgentLen)
}

// agentNone counts, in a summary's agents, the nodes that reported no agent the
// control plane keeps (every agent has a '/', so none is called this).
const agentNone = "none"

// maxAgentsShown is how many agents status's summary line names; the others are
// counted together. An upgrade has two in flight, rarely more.
const maxAgentsShown = 8

// agentsLine is status's line of the agents the nodes run, the most run first:
// "agents: 3 meshhost/0.1.0+git…, 1 meshhost/0.1.0, 1 none"; "" without nodes.
func agentsLine(agents map[string]int) string {
	names := make([]string, 0, len(agents))
	for a := range agents {
		names = append(names, a)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(agents[b], agents[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	var parts []string
	others := 0
	for i, a := range names {
		if i < maxAgentsShown {
			parts = append(parts, fmt.Sprintf("%d %s", agents[a], oneLine(a, api.MaxAgentLen)))
		} else {
			others += agents[a]
		}
	}
	if others > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d other agents", others, len(names)-maxAgentsShown))
	}
	if len(parts) == 0 {
		return ""
	}
	return "agents: " + strings.Join(parts, ", ")
}

// maxPutBackShown is how many nodes status's line of files put back names.
const maxPutBackShown = 5

// putBackLine names the nodes whose agent put back managed files changed on the
// host (by hand, by another program), the most recent first: the mesh undid them,
// and whoever made them may not know. Revoked nodes are left out.
func putBackLine(nodes []api.NodeView, now time.Time) string {
	var hit []api.NodeView
	for _, n := range nodes {
		if n.PutBack > 0 && n.State != api.StateRevoked {
			hit = append(hit, n)
		}
	}
	if len(hit) == 0 {
		return ""
	}
	slices.SortStableFunc(hit, func(a, b api.NodeView) int { return b.LastPutBackAt.Compare(a.LastPutBackAt) })
	var parts []string
	for _, n := range hit[:min(len(hit), maxPutBackShown)] {
		when := "at an unknown time"
		if !n.LastPutBackAt.IsZero() {
			when = "last " + ago(now.Sub(n.LastPutBackAt))
		}
		parts = append(parts, fmt.Sprintf("%s (%d file(s), %s)", n.ID, n.PutBack, when))
	}
	if more := len(hit) - maxPutBackShown; more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more (`--json`: put_back)", more))
	}
	return fmt.Sprintf("files changed on the host and put back as declared, on %d node(s): %s", len(hit), strings.Join(parts, ", "))
}

// sharedKeyLine names the nodes whose key holds more than one connection at once,
// with for how long when the control plane says: a reconnection whose old connection
// the broker has not seen end yet (100 s at most), or a second machine holding the
// key, which the control plane cannot tell apart from the first (a machine cloned
// after its enrolment): its reports and the first's overwrite each other, so what the
// node seems to have applied flips. Past the control plane's grace (two minutes by
// default) the node is failing key_shared, and the verdict names it. grace is the
// one the control plane says it runs (zero from an older one).
func sharedKeyLine(nodes []api.NodeView, now time.Time, grace time.Duration) string {
	var parts []string
	for _, n := range nodes {
		if n.Connections > 1 && n.State != api.StateRevoked {
			part := fmt.Sprintf("%s (%d", n.ID, n.Connections)
			if !n.SharedSince.IsZero() {
				part += ", for " + now.Sub(n.SharedSince).Round(time.Second).String()
			}
			parts = append(parts, part+")")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	// The grace the control plane runs, when it says: the default was named
	// whatever serve was given (a docs walkthrough).
	past := "past the control plane's --shared-key-grace (2 minutes unless serve was given another),"
	if grace > 0 {
		past = "past the control plane's --shared-key-grace, " + grace.String() + ","
	}
	return fmt.Sprintf("more than one connection with one node's key, on %d node(s): %s; lasting %s a second machine holds the key (cloned after its enrolment?), and the node is failing key_shared: see operations, Cloned machines",
		len(parts), strings.Join(parts, ", "), past)
}

// summary counts nodes by convergence, and the nodes not revoked by the agent they
// last reported (Agents; agentNone for those that reported none kept): how far
// an upgrade of the agents has gone.
type summary struct {
	Nodes     int `json:"nodes"`
	Converged int `json:"converged"`
	Behind    int `json:"behind"`
	Failing   int `json:"failing"`
	Stale     int `json:"stale"`
	Offline   int `json:"offline"`
	// HooksRunning counts the nodes, revoked ones aside, whose hooks are queued or
	// running: behind, or failing while a retry runs, they were named "hooks
	// running" by the verdict below a summary that said neither (a walkthrough).
	HooksRunning int            `json:"hooks_running"`
	Revoked      int            `json:"revoked"`
	Agents       map[string]int `json:"agents"`
	// PutBack counts the nodes, revoked ones aside, whose agent reported managed
	// files put back as declared since it started (NodeView.PutBack).
	PutBack int `json:"put_back"`
}

func summarise(res api.NodesResult) summary {
	s := summary{Agents: map[string]int{}}
	for _, n := range res.Nodes {
		s.Nodes++
		if n.State != api.StateRevoked {
			agent := n.Agent
			if agent == "" {
				agent = agentNone
			}
			s.Agents[agent]++
			if n.PutBack > 0 {
				s.PutBack++
			}
		}
		switch {
		case n.State == api.StateRevoked:
			s.Revoked++
			continue
		case n.Converged:
			s.Converged++
		case n.LastError != nil:
			s.Failing++
		default:
			s.Behind++
		}
		if n.Stale {
			s.Stale++
		}
		if n.State == api.StateOffline {
			s.Offline++
		}
		if n.HooksRunning {
			s.HooksRunning++
		}
	}
	return s
}

// notConverged is status's verdict: nil when every live node applied the version
// declared for it and is not stale, else an exit-5 error naming the others, grouped
// by cause (causes). Nodes that are offline or revoked are not live: they are
// shown, not waited for, unless named: `meshctl status web-1` of an offline web-1
// behind its declaration exited 0, which a script asking about that node took for
// "converged".
func notConverged(nodes []api.NodeView, named bool) error {
	var c causes
	for _, n := range nodes {
		switch {
		case n.State == api.StateRevoked && named:
			c.add("revoked", "", n.ID)
			continue
		case n.State == api.StateOffline && named && !n.Converged:
			c.add("offline, behind", "", fmt.Sprintf("%s (declared v%d)", n.ID, n.Declared))
			continue
		case n.State != api.StateAlive:
			continue
		}
		switch {
		case n.Converged && !n.Stale:
		case n.Converged:
			c.add("stale", "", n.ID)
		case n.HooksRunning:
			c.add("hooks running", "", n.ID)
		case n.LastError != nil:
			c.add(failure("failing", n.ID, n.LastError.Code, n.LastError.Message))
		default:
			c.add("behind", "", fmt.Sprintf("%s (declared v%d)", n.ID, n.Declared))
		}
	}
	if c.nodes == 0 {
		return nil
	}
	what := "live node(s)"
	if named {
		what = "node(s) named"
	}
	return exitError{code: exitNotConverged, err: fmt.Errorf("not converged: %s", c.line(fmt.Sprintf("%d %s", c.nodes, what)))}
}

// fetchNodes reads the roster (or the named nodes), all pages of it.
// namedAbsent sorts the ids asked for that are not among res's nodes: those that
// name a control node (their rows of the control table), and those that name
// nothing.
func namedAbsent(ids []string, res api.NodesResult) (control []api.ControlView, unknown []string) {
	for _, id := range ids {
		if slices.ContainsFunc(res.Nodes, func(n api.NodeView) bool { return n.ID == id }) {
			continue
		}
		if i := slices.IndexFunc(res.Control, func(c api.ControlView) bool { return c.ID == id }); i >= 0 {
			if !slices.ContainsFunc(control, func(c api.ControlView) bool { return c.ID == id }) {
				control = append(control, res.Control[i])
			}
			continue
		}
		if !slices.Contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	return control, unknown
}

func fetchNodes(cp *controlPlaneFlags, ids []string) (api.NodesResult, error) {
	c, err := cp.dial()
	if err != nil {
		return api.NodesResult{}, err
	}
	defer c.Close()
	return c.Nodes(api.NodesRequest{Nodes: ids})
}
