package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/tokenfmt"
)

func revokeCommand() command {
	return command{
		name:    "revoke",
		changes: true,
		usage:   "--data DIR NODE [NODE...] [--json]",
		summary: `Revoke nodes for good: their agents stop and their keys are refused.
Each is sent a signed notice and its agent stops; its connections are closed on every
broker right after, and its key is refused from then on. Several nodes are revoked in
one commit (at most 1000); their pending tokens are cancelled with them. Enrolling a
machine under a revoked id needs a token minted after the revocation.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
			c.ValidArgsFunction = cp.completeNodes(0)
			return func(args []string) error {
				if len(args) == 0 {
					return usagef("name the node(s) to revoke")
				}
				if len(args) > api.MaxRevokeNodes {
					return usagef("%d nodes; one revoke takes at most %d", len(args), api.MaxRevokeNodes)
				}
				for _, n := range args {
					if err := tokenfmt.CheckNodeID(n); err != nil {
						return usagef("node %q: %v", n, err)
					}
				}
				var res api.RevokeResult
				if err := cp.call(api.OpRevoke, api.RevokeRequest{Nodes: args}, &res); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cio.stdout, res)
				}
				for _, r := range res.Revoked {
					if !r.AlreadyRevokedAt.IsZero() {
						fmt.Fprintf(cio.stdout, "%s was already revoked (at %s); its key stays refused\n", r.Node, r.AlreadyRevokedAt.UTC().Format(time.RFC3339))
						continue
					}
					fmt.Fprintf(cio.stdout, "revoked %s (%d connection(s) open, closed now); its key is refused from now on\n", r.Node, r.Connections)
				}
				for _, t := range res.CancelledTokens {
					fmt.Fprintf(cio.stdout, "cancelled %s's pending token %s (minted %s): a machine enrolled under %s again needs a new token\n",
						t.Node, t.ID, t.CreatedAt.UTC().Format(time.RFC3339), t.Node)
				}
				return nil
			}
		},
	}
}

func labelCommand() command {
	return command{
		name:    "label",
		changes: true,
		usage:   "--data DIR NODE k=v [k=v...] [--json]   (k= removes a label)",
		summary: "Set or remove labels on a node; declarations can target labels with --label.",
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print the node as JSON")
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) == 0 {
					return cp.completeNodes(1)(cmd, args, toComplete)
				}
				return nil, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
			}
			return func(args []string) error {
				if len(args) < 2 {
					return usagef("name a node and at least one k=v")
				}
				if err := checkTargets(args[:1], ""); err != nil {
					return err
				}
				labels := labelFlag{}
				for _, a := range args[1:] {
					if err := labels.Set(a); err != nil {
						return usagef("%v", err)
					}
				}
				client, err := cp.dial()
				if err != nil {
					return err
				}
				defer client.Close()
				// A label removed that the node does not have is most likely a
				// typo of one it has: said, as kubectl does, not passed over.
				var unset []string
				if removes := labels.removed(); len(removes) > 0 {
					if res, err := client.Nodes(api.NodesRequest{Nodes: args[:1]}); err == nil && len(res.Nodes) == 1 {
						for _, k := range removes {
							if _, ok := res.Nodes[0].Labels[k]; !ok {
								unset = append(unset, k)
							}
						}
					}
				}
				var v api.NodeView
				if err := client.Call(api.OpLabel, api.LabelRequest{Node: args[0], Labels: labels}, &v); err != nil {
					return err
				}
				for _, k := range unset {
					fmt.Fprintf(cio.stderr, "meshctl: %s had no label %s: nothing to remove (a typo? its labels are below)\n", v.ID, k)
				}
				if asJSON {
					return writeJSON(cio.stdout, v)
				}
				fmt.Fprintf(cio.stdout, "%s labels: %s\n", v.ID, formatLabels(v.Labels))
				return nil
			}
		},
	}
}
