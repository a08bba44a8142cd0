package main

import (
	"flag"
	"fmt"
	"time"

	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/tokenfmt"
)

func tokenCommand() command {
	return command{
		name:  "token",
		usage: "--data DIR --node ID [--ttl 15m] [--label k=v]...  |  --data DIR --role control --node ID --addr IP:PORT",
		summary: `Mint a one-time enrolment token for one node; stdout is the token and nothing else.
The secret is generated here and only its hash reaches the control plane. The token
carries the broker addresses, the CA pin and the signing key the node will believe.
Hand it to the machine out of band: meshhost reads it from stdin, a file or MESH_TOKEN.`,
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			var (
				cp                          controlPlaneFlags
				node, role                  string
				addr, raftAddr, clusterAddr string
				ttl                         time.Duration
				labels                      = labelFlag{}
			)
			cp.register(fs)
			fs.StringVar(&node, "node", "", "id of the node the token admits (required)")
			fs.StringVar(&role, "role", "worker", "role the token admits: worker or control")
			fs.DurationVar(&ttl, "ttl", tokenfmt.DefaultTTL, "how long the token stays valid (at most 1h)")
			fs.Var(labels, "label", "label k=v given to the node (repeatable)")
			fs.StringVar(&addr, "addr", "", "control tokens: the new control node's broker address ip:port (its TLS identity carries it)")
			fs.StringVar(&raftAddr, "raft-addr", "", "control tokens: its Raft address (default: --addr port+1)")
			fs.StringVar(&clusterAddr, "cluster-addr", "", "control tokens: its broker route address (default: --addr port+2)")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if cp.dir == "" || node == "" {
					return usagef("--data and --node are required")
				}
				if err := tokenfmt.ValidateNodeID(node); err != nil {
					return usagef("--node: %v", err)
				}
				r, err := tokenfmt.ParseRole(role)
				if err != nil {
					return usagef("--role: %v", err)
				}
				if ttl < time.Second || ttl > tokenfmt.MaxTTL {
					return usagef("--ttl %s: must be at least 1s and at most %s (a long-lived token is a long-lived root credential)", ttl, tokenfmt.MaxTTL)
				}
				if r == tokenfmt.RoleControl {
					if addr == "" {
						return usagef("--role control needs --addr, the new control node's broker address")
					}
					if len(labels) > 0 {
						return usagef("--label applies to workers; control nodes take no declarations")
					}
					if _, err := join.ControlAddresses(addr, raftAddr, clusterAddr); err != nil {
						return usagef("%v", err)
					}
					opts, err := cp.options()
					if err != nil {
						return err
					}
					tok, err := join.Mint(datadir.Dir(cp.dir), join.MintOptions{Node: node, Broker: addr, Raft: raftAddr, Cluster: clusterAddr, TTL: ttl, Operator: opts})
					if err != nil {
						return err
					}
					fmt.Fprintln(cio.stdout, tok.Encode())
					return nil
				}
				if addr != "" || raftAddr != "" || clusterAddr != "" {
					return usagef("--addr, --raft-addr and --cluster-addr are for --role control")
				}
				c, err := cp.dial()
				if err != nil {
					return err
				}
				defer c.Close()
				tok, err := c.MintToken(node, r, ttl, labels)
				if err != nil {
					return err
				}
				fmt.Fprintln(cio.stdout, tok.Encode())
				return nil
			}
		},
	}
}
