package main

import (
	"flag"
	"fmt"

	"mesh/controlplane/api"
)

func revokeCommand() command {
	return command{
		name:  "revoke",
		usage: "--data DIR NODE",
		summary: `Revoke a node for good: connections closed at once, its key refused from then on.
Its agent stops. Enrolling the machine again needs a new token.`,
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			cp.register(fs)
			return func(args []string) error {
				if cp.dir == "" {
					return usagef("--data is required")
				}
				if len(args) != 1 {
					return usagef("name exactly one node to revoke")
				}
				var res api.RevokeResult
				if err := cp.call(api.OpRevoke, api.RevokeRequest{Node: args[0]}, &res); err != nil {
					return err
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
		usage:   "--data DIR NODE k=v [k=v...]   (k= removes a label)",
		summary: "Set or remove labels on a node; declarations can target labels with --label.",
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			cp.register(fs)
			return func(args []string) error {
				if cp.dir == "" {
					return usagef("--data is required")
				}
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
				fmt.Fprintf(cio.stdout, "%s labels: %v\n", v.ID, v.Labels)
				return nil
			}
		},
	}
}

func versionCommand() command {
	return command{
		name:    "version",
		usage:   "",
		summary: "Print the version.",
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			return func([]string) error {
				fmt.Fprintln(cio.stdout, "meshctl", version)
				return nil
			}
		},
	}
}

// version is the program's version.
const version = "0.1.0"
