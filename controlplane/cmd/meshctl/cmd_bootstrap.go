package main

import (
	"syscall"

	"github.com/spf13/cobra"

	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
)

func bootstrapCommand() command {
	return command{
		name:       "bootstrap",
		ownSignals: true,
		usage:      "--mesh ID --listen IP:PORT --data DIR [--dry-run | --json]",
		summary: `Create a mesh on this machine, its first control node.
Prints its plan, checks first (data directory, addresses, clock), then makes the CA,
this node's TLS identity, the declaration signing key, operator credentials and a
one-voter Raft cluster. Running it again resumes an unfinished bootstrap and never
makes a second CA; SIGINT, SIGTERM or SIGHUP (a terminal closed) stops it between steps (exit 9), and running it
again resumes. It refuses at once a data directory another process holds (exit 8),
the directory of a control node that joined a mesh (exit 7), and that of a control
node that was removed (exit 6). With --json the plan and its steps go to stderr, and stdout is the
mesh as bootstrapped (its id, this node, addresses and CA pin) as JSON.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var o bootstrap.Options
			var dir string
			fs.StringVar(&o.Mesh, "mesh", "", "mesh id: 1-63 characters of a-z, 0-9 and - (required)")
			fs.StringVar(&o.Listen, "listen", "", "broker address hosts connect to, ip:port (required)")
			fs.StringVar(&o.Advertise, "advertise", "", "address tokens carry, ip:port (default: --listen)")
			fs.StringVar(&o.RaftListen, "raft-listen", "", "Raft address the other control nodes dial, ip:port (default: --listen port+1)")
			fs.StringVar(&o.ClusterListen, "cluster-listen", "", "broker route address the other control nodes dial, ip:port (default: --listen port+2)")
			fs.StringVar(&o.Node, "node", "cp-1", "this control node's id")
			fs.StringVar(&dir, "data", "", "data directory (required)")
			_ = c.MarkFlagDirname("data")
			fs.BoolVar(&o.DryRun, "dry-run", false, "print the plan, run its checks, and change nothing")
			var asJSON bool
			fs.BoolVar(&asJSON, "json", false, "print the bootstrapped mesh as JSON on stdout (the plan goes to stderr)")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if o.Mesh == "" || o.Listen == "" || dir == "" {
					return usagef("--mesh, --listen and --data are required")
				}
				// The others are checked as addresses and ids, and refused before
				// anything prints them; the directory is printed as it is.
				if err := refuseToken("--data", dir); err != nil {
					return err
				}
				if asJSON && o.DryRun {
					return usagef("--dry-run prints a plan for a person; --json describes a mesh that exists: give one of them")
				}
				o.Dir = datadir.Dir(dir)
				o.Out = cio.stdout
				if asJSON {
					o.Out = cio.stderr
				}
				// A terminal closed under it (an SSH session dropped) stops it as
				// Ctrl-C does, with its clean stop (a join's rollback), where
				// SIGHUP's default ended it at once (a review).
				ctx, stop := signalContext(syscall.SIGHUP)
				defer stop()
				privateUmask() // the Raft store it makes, as serve's
				var done bootstrap.Outcome
				err := interruptible(ctx, func() (err error) {
					done, err = bootstrap.RunContext(ctx, o)
					return err
				})
				if err != nil || o.DryRun {
					return err
				}
				if !asJSON {
					return madeOutput(cio.stdout, nil, dir)
				}
				cfg, err := o.Dir.LoadConfig()
				if err != nil {
					return err
				}
				return madeOutput(cio.stdout, writeJSON(cio.stdout, bootstrapResult{Mesh: cfg.Mesh, Node: cfg.Node, Listen: cfg.Listen, RaftListen: cfg.RaftListen,
					ClusterListen: cfg.ClusterListen, Brokers: cfg.Brokers, CAPin: cfg.CAPin, Data: dir, Next: "meshctl serve --data " + dir,
					AlreadyBootstrapped: done.AlreadyBootstrapped}), dir)
			}
		},
	}
}

// bootstrapResult is what `bootstrap --json` prints.
type bootstrapResult struct {
	Mesh          string   `json:"mesh"`
	Node          string   `json:"node"`
	Listen        string   `json:"listen"`
	RaftListen    string   `json:"raft_listen"`
	ClusterListen string   `json:"cluster_listen"`
	Brokers       []string `json:"brokers"`
	CAPin         string   `json:"ca_pin"`
	Data          string   `json:"data"`
	Next          string   `json:"next"`
	// AlreadyBootstrapped: an earlier run had bootstrapped the mesh, and this one
	// found it so and did nothing (as join's already_joined).
	AlreadyBootstrapped bool `json:"already_bootstrapped"`
}
