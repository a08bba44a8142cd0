package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"mesh/controlplane/api"
)

func nodesCommand() command {
	return rosterCommand("nodes", "Show the mesh's nodes: role, alive or offline, last seen, declared and applied version, last error.", false)
}

func statusCommand() command {
	return rosterCommand("status", "Show convergence: per node declared vs applied version, last error, last seen, staleness; and a summary.", true)
}

// rosterCommand is nodes, or status when withSummary adds the convergence summary.
func rosterCommand(name, summaryText string, withSummary bool) command {
	return command{
		name:    name,
		usage:   "--data DIR [--json] [ID...]",
		summary: summaryText,
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			cp.register(fs)
			fs.BoolVar(&asJSON, "json", false, "print JSON")
			return func(args []string) error {
				if cp.dir == "" {
					return usagef("--data is required")
				}
				res, err := fetchNodes(&cp, args)
				if err != nil {
					return err
				}
				sum := summarise(res)
				switch {
				case asJSON && withSummary:
					return writeJSON(cio.stdout, struct {
						Summary summary        `json:"summary"`
						Nodes   []api.NodeView `json:"nodes"`
					}{sum, res.Nodes})
				case asJSON:
					return writeJSON(cio.stdout, res)
				}
				printNodes(cio.stdout, res, time.Now())
				if withSummary {
					fmt.Fprintf(cio.stdout, "\n%d node(s): %d converged, %d behind, %d failing, %d stale, %d offline, %d revoked; keyring epoch %d\n",
						sum.Nodes, sum.Converged, sum.Behind, sum.Failing, sum.Stale, sum.Offline, sum.Revoked, res.KeyringEpoch)
				}
				return nil
			}
		},
	}
}

func printNodes(w io.Writer, res api.NodesResult, now time.Time) {
	if len(res.Control) > 1 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CONTROL\tRAFT\tSTATE\tLAST SEEN\tBROKER\tAPPLIED INDEX")
		for _, c := range res.Control {
			seen := "never"
			if !c.LastSeen.IsZero() {
				seen = ago(now.Sub(c.LastSeen))
			}
			name := c.ID
			if c.CAHolder {
				name += " (CA)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", name, c.Raft, c.State, seen, c.Broker, c.AppliedIndex)
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tLAST SEEN\tDECLARED\tAPPLIED\tLAST ERROR")
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
			lastErr = fmt.Sprintf("v%d %s: %s", n.LastError.Version, n.LastError.Code, oneLine(n.LastError.Message, 60))
		}
		state := n.State
		if n.Stale {
			state += " (stale)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tv%d\t%s\t%s\n", n.ID, n.Role, state, seen, n.Declared, applied, lastErr)
	}
	tw.Flush()
	if len(res.Nodes) == 0 {
		fmt.Fprintln(w, "(no nodes enrolled yet: mint a token with `meshctl token`)")
	}
}

func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

func oneLine(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

// summary counts nodes by convergence.
type summary struct {
	Nodes     int `json:"nodes"`
	Converged int `json:"converged"`
	Behind    int `json:"behind"`
	Failing   int `json:"failing"`
	Stale     int `json:"stale"`
	Offline   int `json:"offline"`
	Revoked   int `json:"revoked"`
}

func summarise(res api.NodesResult) summary {
	var s summary
	for _, n := range res.Nodes {
		s.Nodes++
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
	}
	return s
}

// fetchNodes reads the roster (or the named nodes), all pages of it.
func fetchNodes(cp *controlPlaneFlags, ids []string) (api.NodesResult, error) {
	c, err := cp.dial()
	if err != nil {
		return api.NodesResult{}, err
	}
	defer c.Close()
	return c.Nodes(api.NodesRequest{Nodes: ids})
}
