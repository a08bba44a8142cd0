package main

import (
	"flag"
	"fmt"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/tokenfmt"
)

func tokenCommand() command {
	return command{
		name:  "token",
		usage: "--data DIR --node ID [--ttl 15m] [--role worker] [--label k=v]...",
		summary: `Mint a one-time enrolment token for one node; stdout is the token and nothing else.
The secret is generated here and only its hash reaches the control plane. The token
carries the broker addresses, the CA pin and the signing key the node will believe.
Hand it to the machine out of band: meshhost reads it from stdin, a file or MESH_TOKEN.`,
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var (
				dir, node, role string
				ttl             time.Duration
				labels          = labelFlag{}
			)
			fs.StringVar(&dir, "data", "", "data directory of a control node (required)")
			fs.StringVar(&node, "node", "", "id of the node the token admits (required)")
			fs.StringVar(&role, "role", "worker", "role the token admits: worker or control")
			fs.DurationVar(&ttl, "ttl", tokenfmt.DefaultTTL, "how long the token stays valid (at most 1h)")
			fs.Var(labels, "label", "label k=v given to the node (repeatable)")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if dir == "" || node == "" {
					return usagef("--data and --node are required")
				}
				if err := tokenfmt.ValidateNodeID(node); err != nil {
					return usagef("--node: %v", err)
				}
				r, err := tokenfmt.ParseRole(role)
				if err != nil {
					return usagef("--role: %v", err)
				}
				if r == tokenfmt.RoleControl {
					return fmt.Errorf("control tokens are minted with the control-node join flow, which this build does not include yet; mint a worker token")
				}
				if ttl < time.Second || ttl > tokenfmt.MaxTTL {
					return usagef("--ttl %s: must be at least 1s and at most %s (a long-lived token is a long-lived root credential)", ttl, tokenfmt.MaxTTL)
				}
				text, err := mintToken(datadir.Dir(dir), node, r, ttl, labels)
				if err != nil {
					return err
				}
				fmt.Fprintln(cio.stdout, text)
				return nil
			}
		},
	}
}

// mintToken mints a token through the control plane of dir and returns its text.
func mintToken(dir datadir.Dir, node string, role tokenfmt.Role, ttl time.Duration, labels map[string]string) (string, error) {
	c, err := operator.Dial(dir, operator.Options{})
	if err != nil {
		return "", err
	}
	defer c.Close()
	t, err := c.MintToken(node, role, ttl, labels)
	if err != nil {
		return "", err
	}
	return t.Encode(), nil
}
