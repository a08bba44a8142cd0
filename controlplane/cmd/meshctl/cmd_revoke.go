package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
)

func revokeCommand() command {
	return command{
		name:  "revoke",
		usage: "--data DIR NODE [--json]",
		summary: `Revoke a node for good: connections closed at once, its key refused from then on.
Its agent stops. Enrolling the machine again needs a new token.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
			c.ValidArgsFunction = cp.completeNodes(1)
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("name exactly one node to revoke")
				}
				var res api.RevokeResult
				if err := cp.call(api.OpRevoke, api.RevokeRequest{Node: args[0]}, &res); err != nil {
					return err
				}
				if asJSON {
					return writeJSON(cio.stdout, res)
				}
				fmt.Fprintf(cio.stdout, "revoked %s: %d connection(s) closed; its key is refused from now on\n", res.Node, res.Kicked)
				return nil
			}
		},
	}
}

func labelCommand() command {
	return command{
		name:    "label",
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
				labels := labelFlag{}
				for _, a := range args[1:] {
					if err := labels.Set(a); err != nil {
						return usagef("%v", err)
					}
				}
				var v api.NodeView
				if err := cp.call(api.OpLabel, api.LabelRequest{Node: args[0], Labels: labels}, &v); err != nil {
					return err
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
