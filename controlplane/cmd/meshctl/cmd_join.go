package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/operator"
	"mesh/controlplane/replication"
	"mesh/host/readfile"
	"mesh/host/statedir"
	"mesh/host/terminal"
	hosttoken "mesh/host/token"
	"mesh/tokenfmt"
)

// joinBrokers reads join's --broker addresses: IP:PORT each, as a token names them.
func joinBrokers(given []string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, b := range given {
		ap, err := netip.ParseAddrPort(strings.TrimSpace(b))
		if err != nil {
			return nil, usagef("--broker %q: give IP:PORT (10.0.0.2:7300, [2001:db8::2]:7300), an address, not a name", b)
		}
		if err := tokenfmt.CheckBroker(ap); err != nil {
			return nil, usagef("--broker: %v", err)
		}
		out = append(out, ap)
	}
	return out, nil
}

func joinCommand() command {
	return command{
		name:       "join",
		ownSignals: true,
		usage:      "--data DIR [--token-file F] [--listen IP:PORT] [--broker IP:PORT]... [--json]   (the control token on stdin, in F, or in MESH_TOKEN)",
		summary: `Join this machine to a mesh as a control node, with a control token.
Prints each step: pin check, TLS identity and signing key received, Raft nonvoter,
proof that it replicates, promotion, a NATS route to the other brokers. Reports
success only when confirmed; a join that cannot be confirmed is rolled back and says
why (or that rolling back failed, and what to do). Running it again resumes an
unfinished join, and is a no-op on a joined node. SIGINT, SIGTERM or SIGHUP (a terminal
closed) stops it at any step (exit 9), rolling back a join the mesh had as a
nonvoter; running it again with the same token resumes. It refuses at once a data
directory another process holds (exit 8), one that holds another mesh, another node or other files (exit 7), and
that of a control node that was removed (exit 6); a token that cannot be used, or
that the mesh's answer refuses, exits 4; no broker reached, no answer, a mesh that
cannot admit or confirm anyone now (an election), a login the brokers refused
(wait a minute) or a clock that disagrees with the mesh's certificates exits 3, and
running it again with the same token goes on. A machine that cannot listen on the
addresses the node was admitted with is told so before anything is added to Raft
(exit 1); behind NAT, --listen gives the address its broker listens on, while hosts
dial the one in the token. A token minted before the other control nodes served names
the bootstrap machine alone: if it is gone, --broker gives a broker of a control
node that runs (the mesh's CA pin is checked there as at the token's). Then start
the node with meshctl serve.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var dir, tokenFile, listen string
			var brokers []string
			var heartbeat time.Duration
			var asJSON bool
			fs.StringVar(&dir, "data", "", "data directory for the new control node (required)")
			fs.StringVar(&tokenFile, "token-file", "", "read the control token from this file instead of stdin (\"-\": stdin)")
			fs.StringVar(&listen, "listen", "", "ip:port this node's broker listens on, when hosts dial another (its token's --addr, through NAT); 0.0.0.0:PORT or [::]:PORT for every address (default: the token's address)")
			fs.StringArrayVar(&brokers, "broker", nil, "a broker of the mesh (ip:port) to try after those the token names, for a token whose brokers are gone; repeat for several")
			fs.DurationVar(&heartbeat, "raft-heartbeat", replication.DefaultTimeouts().Heartbeat, "Raft heartbeat and election timeout (100ms to 1m)")
			fs.BoolVar(&asJSON, "json", false, "print the result as JSON on stdout (the steps go to stderr)")
			_ = c.MarkFlagDirname("data")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if dir == "" {
					return usagef("--data is required")
				}
				if err := checkRaftHeartbeat(heartbeat); err != nil {
					return err
				}
				if listen != "" {
					if _, err := bootstrap.CheckListen("--listen", listen); err != nil {
						return err
					}
				}
				extra, err := joinBrokers(brokers)
				if err != nil {
					return err
				}
				text, err := readSecretInput(tokenFile, cio)
				if err != nil {
					return err
				}
				steps := cio.stdout
				if asJSON {
					steps = cio.stderr
				}
				// A terminal closed under it (an SSH session dropped) stops it as
				// Ctrl-C does, with its clean stop (a join's rollback), where
				// SIGHUP's default ended it at once (a review).
				ctx, stop := signalContext(syscall.SIGHUP)
				defer stop()
				err = interruptible(ctx, func() error {
					privateUmask() // the Raft store it makes, as serve's
					return join.Join(ctx, join.Options{Dir: datadir.Dir(dir), Token: text, Command: joinRerun(dir, tokenFile, listen, extra, heartbeat), Out: steps, Listen: listen, Brokers: extra,
						Timeouts: replication.Timeouts{Heartbeat: heartbeat, Election: heartbeat, LeaderLease: heartbeat / 2, Commit: 50 * time.Millisecond}})
				})
				already := errors.Is(err, join.ErrAlreadyJoined)
				if already {
					fmt.Fprintln(steps, err)
				} else if err != nil {
					return err
				}
				if !asJSON {
					return madeOutput(cio.stdout, nil, dir)
				}
				cfg, err := datadir.Dir(dir).LoadConfig()
				if err != nil {
					return err
				}
				return madeOutput(cio.stdout, writeJSON(cio.stdout, joinResult{Mesh: cfg.Mesh, Node: cfg.Node, Broker: join.Dialled(cfg), Brokers: cfg.Brokers, AlreadyJoined: already,
					Next: "meshctl serve --data " + dir}), dir)
			}
		},
	}
}

// joinResult is what `join --json` prints.
type joinResult struct {
	Mesh          string   `json:"mesh"`
	Node          string   `json:"node"`
	Broker        string   `json:"broker"`
	Brokers       []string `json:"brokers"`
	AlreadyJoined bool     `json:"already_joined"`
	Next          string   `json:"next"`
}

// maxTokenInput bounds what is read as a control token: a token is one line of a few
// hundred characters.
const maxTokenInput = 16 << 10

// readSecretInput reads a token from a file ("-": stdin, as `declare --file -`),
// MESH_TOKEN or stdin; never from the command line. Whatever keeps the input from
// being a token (a file missing, a directory or a device, one too large, a read that
// fails) is join.ErrToken, exit 4, as an empty or garbled token is; a file another
// user could have written stays the data directory's kind of refusal (exit 7), and an
// interrupted prompt an interruption (exit 9).
func readSecretInput(file string, cio *cliIO) (string, error) {
	if file != "" && cio.getenv("MESH_TOKEN") != "" {
		// Set and forgotten perhaps: --token-file wins, said, as a pipe not read
		// beside MESH_TOKEN is (a walkthrough).
		fmt.Fprintf(cio.stderr, "meshctl join: reading the token from --token-file %s; MESH_TOKEN is set and not read\n", file)
	}
	switch file {
	case "":
		if v := cio.getenv("MESH_TOKEN"); v != "" {
			if f, ok := cio.stdin.(*os.File); ok && !cio.stdinIsTTY {
				// `MESH_TOKEN=… meshctl join < cp2.txt`: two tokens, one of them
				// set and forgotten perhaps; MESH_TOKEN won without a word.
				if readfile.OffersInput(f, hosttoken.LooksLikeToken) {
					return "", usagef("a token in MESH_TOKEN and another on stdin: give one (unset MESH_TOKEN, or --token-file - to read stdin)")
				}
				// A pipe is not read (it may be the script running this): said.
				if readfile.IsPipe(f) {
					fmt.Fprintln(cio.stderr, "meshctl join: using the token in MESH_TOKEN; stdin, a pipe, is not read (unset MESH_TOKEN, or --token-file -, to read a token from it)")
				}
			}
			return v, nil
		}
	case "-":
		// Said so: MESH_TOKEN, set and forgotten, does not win over it.
	default:
		data, err := readfile.StreamWaiting(file, maxTokenInput, readfile.PipeWait, trustedToken(file, cio), pipeWaiting("join", file, cio))
		switch {
		case errors.Is(err, readfile.ErrTooLarge):
			err = tooLargeError(fmt.Sprintf("%s is larger than %d bytes, and a token is one line of a few hundred characters", file, maxTokenInput))
		case errors.Is(err, fs.ErrNotExist):
			// It was a bare "open X: no such file or directory", exit 1.
			err = fmt.Errorf("--token-file %s does not exist: give the file the control token was saved in, or the token on stdin", file)
		}
		return string(data), tokenInputError(err)
	}
	if cio.stdinIsTTY {
		// Pasted: its line, and the rest of a paste of several lines, not shown
		// (see package terminal).
		line, _, err := terminal.ReadHidden(cio.stdin, cio.stderr,
			"paste the control token and press Enter (it is not shown): ", "paste the control token and press Enter: ",
			maxTokenInput, cio.hideInput, tokenfmt.CutShort)
		return line, tokenInputError(err)
	}
	// `meshctl join < cp2.txt`: the file the shell opened is judged as
	// --token-file's is.
	if f, ok := cio.stdin.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			if err := trustedToken("on stdin", cio)(fi); err != nil {
				return "", err
			}
		}
	}
	data, err := io.ReadAll(io.LimitReader(cio.stdin, maxTokenInput+1))
	if err != nil {
		return "", tokenInputError(fmt.Errorf("read the token on stdin: %w", err))
	}
	if len(data) > maxTokenInput {
		return "", fmt.Errorf("%w: the input is over %d bytes; a token is one line of a few hundred characters", join.ErrToken, maxTokenInput)
	}
	return string(data), nil
}

// tokenInputError makes err, from reading the token input, join.ErrToken: what
// cannot be read as a token cannot be used as one (exit 4, as join's help says). A
// refusal of a file another user could have written (exit 7) and an interrupted
// prompt (exit 9) keep their own codes.
func tokenInputError(err error) error {
	if err == nil || errors.Is(err, statedir.ErrUnsafePath) || errors.Is(err, terminal.ErrInterrupted) || errors.Is(err, join.ErrToken) {
		return err
	}
	return fmt.Errorf("%w: %w", join.ErrToken, err)
}

// trustedToken judges the file a control token is read from (statedir.CheckInput,
// as meshhost enrol judges a host's): the token names the mesh this node joins and
// whose CA key and signing key it will hold, so a file another user could have
// written is refused (exit 7). The user who ran meshctl through sudo (SUDO_UID, as
// root) counts as its own. A file group or others may read is taken, with a
// warning: the token may have been copied, and used first.
func trustedToken(name string, cio *cliIO) func(fs.FileInfo) error {
	invoker := statedir.Invoker(cio.getenv)
	return func(fi fs.FileInfo) error {
		if err := statedir.CheckInput("the control token file", name, fi, invoker); err != nil {
			return err
		}
		if statedir.ReadableByOthers(fi) {
			fmt.Fprintf(cio.stderr, "warning: the control token file %s may be read by group or others (mode %#o): whoever read it may join a control node of theirs with it first; if join says the token was used, cancel it (`meshctl token cancel`) and remove what joined (`meshctl control remove`)\n",
				name, fi.Mode().Perm())
		}
		return nil
	}
}

func controlCommand() command {
	return command{
		name:    "control",
		changes: true,
		usage:   "remove NODE | status [--wait D] | renew-certificate --certificate F [--out F] --data DIR [--json]",
		summary: `Manage control nodes.
"control remove NODE" removes one for good: it takes the node out of Raft and of the
control plane (stop it first if it is the leader).
"control status" asks every control node for its own view (Raft state, the leader
it follows, its configuration) and names the members that did not answer within
--wait. It needs no leader: with the quorum lost it says which voters are missing.
It exits 0 when the control plane has a leader and every voter answers and follows
it (what a rolling restart waits for before the next node), 5 when one does not
answer or does not follow it (named, with why: a candidate, no leader or another, a
Raft log it cannot write, or the leader's heartbeats say so) or when a control node
serves with a certificate that has expired, 3 when there is no leader. It names each
control node whose certificate, or the CA's it serves with, expires within 180 days,
with the command that renews it, and exits 0 all the same. See docs/operations.md.
"control renew-certificate" runs where the mesh CA key is (--data) and calls no
control plane: it re-issues the certificate in --certificate, a copy of a control
node's tls.pem or the mesh CA's ca.pem, over the key it already has, valid anew (10
years for a node's, 20 for the CA's), and writes it to --out (by default over
--certificate), atomically. Every pin is of a key, so none changes: put the file in
place (tls.pem in that node's data directory; the CA's ca.pem in every one) and
restart the node(s). --out replaces only a copy of that certificate (the same key),
and in the data directory only tls.pem or ca.pem: anything else there, a key, or a
link is refused (exit 2, nothing written). It exits 4 where the CA key is not, 7 for
a --certificate that is missing, damaged or of another mesh. See docs/operations.md,
"Certificate lifetimes".`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			var wait time.Duration
			var certificate, out string
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
			c.Flags().DurationVar(&wait, "wait", operator.DefaultGatherWait, fmt.Sprintf("status: how long to wait for the control nodes' answers (%s to %s)", minGatherWait, broker.MaxGatherWait))
			c.Flags().StringVar(&certificate, "certificate", "", "renew-certificate: the certificate to renew (a copy of a control node's tls.pem, or the mesh CA's ca.pem)")
			c.Flags().StringVar(&out, "out", "", "renew-certificate: where to write the renewed certificate (default: over --certificate)")
			_ = c.MarkFlagFilename("certificate", "pem")
			_ = c.MarkFlagFilename("out", "pem")
			c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
				switch len(args) {
				case 0:
					return []cobra.Completion{"remove\tremove a control node for good", "status\teach control node's own view; needs no leader",
						renewSub + "\tre-issue a certificate over its key, where the CA key is"}, cobra.ShellCompDirectiveNoFileComp
				case 1:
					if args[0] == renewSub {
						return nil, cobra.ShellCompDirectiveNoFileComp
					}
					return cp.nodeNames(controlNodes), cobra.ShellCompDirectiveNoFileComp
				}
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return func(args []string) error {
				if len(args) >= 1 && args[0] == renewSub {
					if len(args) > 1 {
						return usagef("unexpected argument %q after %s (the certificate is --certificate)", args[1], renewSub)
					}
					return renewCertificate(&cp, cio, certificate, out, asJSON, time.Now())
				}
				if certificate != "" || out != "" {
					return usagef("--certificate and --out are flags of meshctl control %s", renewSub)
				}
				if len(args) == 1 && args[0] == "status" {
					return controlStatus(&cp, cio, wait, asJSON)
				}
				if len(args) != 2 || args[0] != "remove" {
					return usagef("usage: meshctl control remove NODE --data DIR, meshctl control status --data DIR, or meshctl control %s --certificate F --data DIR", renewSub)
				}
				if c.Flags().Changed("wait") {
					return usagef("--wait is how long control status waits for the control nodes' answers; control remove waits --timeout for its answer")
				}
				node := strings.TrimSpace(args[1])
				// The removal revokes the operator credentials of the node's own data
				// directory and closes their connections before the answer comes
				// back: run from there, it always ended "the connection was lost …
				// look", the removal done and a voter's demotion unsaid.
				if cp.dir != "" && !cp.remote() {
					if cfg, err := datadir.Dir(cp.dir).LoadConfig(); err == nil && cfg.Node == node {
						return usagef("--data %s is %s's own data directory, whose operator credentials the removal revokes before its answer comes back: run meshctl control remove %s with another control node's --data, or from an operator's machine (--creds/--ca/--servers of another node)", cp.dir, node, node)
					}
				}
				// Asked first: once removed, a node is no one's CA holder.
				// Another node holding them too (copied there, as moving a control
				// node says) is named: the warning that no control token could be
				// minted was given all the same (a docs walkthrough).
				heldCA := false
				var otherCA []string
				var before api.NodesResult
				if err := cp.call(api.OpNodes, api.NodesRequest{Limit: 1}, &before); err == nil {
					for _, c := range before.Control {
						heldCA = heldCA || c.ID == node && c.CAHolder
						if c.ID != node && c.CAHolder && c.Raft != api.RaftRemoved {
							otherCA = append(otherCA, oneLine(c.ID, 64))
						}
						if c.ID == node && c.Raft != api.RaftRemoved {
							// Its broker stops with the removal, and the answer
							// comes back only the way the request went: sent
							// through it, the removal was done and the command
							// ended exit 3, "look" (a docs walkthrough).
							cp.last = c.Broker
						}
					}
				} else if errors.Is(err, operator.ErrUnreachable) || errors.Is(err, operator.ErrNoLeader) {
					// Asked again for the removal, it waited --leader-wait a
					// second time and said it had waited once (a walkthrough).
					return err
				}
				var res api.ControlRemoveResult
				if err := cp.call(api.OpControlRemove, api.ControlRequest{Node: args[1]}, &res); err != nil {
					return err
				}
				heldCA = heldCA && !res.AlreadyRemoved && !res.NeverAdmitted
				if asJSON {
					return writeJSON(cio.stdout, struct {
						Removed         string          `json:"removed"`
						AlreadyRemoved  bool            `json:"already_removed,omitempty"`
						PendingTokens   []string        `json:"pending_tokens,omitempty"`
						Demoted         string          `json:"demoted,omitempty"`
						NotServing      bool            `json:"demoted_not_serving,omitempty"`
						HeldCAKey       bool            `json:"held_ca_key,omitempty"`
						OtherCAHolders  []string        `json:"other_ca_holders,omitempty"`
						NeverAdmitted   bool            `json:"never_admitted,omitempty"`
						CancelledTokens []api.TokenView `json:"cancelled_tokens,omitempty"`
						// Every admitted control node held the signing key: the text's
						// advice to rotate it, which the JSON left out (a walkthrough).
						HeldSigningKey bool `json:"held_signing_key,omitempty"`
					}{node, res.AlreadyRemoved, res.PendingTokens, res.Demoted, res.DemotedNotServing, heldCA, otherCAHolders(heldCA, otherCA), res.NeverAdmitted, res.CancelledTokens, !res.NeverAdmitted})
				}
				printRemoval(cio.stdout, node, res)
				switch {
				case heldCA && len(otherCA) > 0:
					fmt.Fprintf(cio.stdout, "%s held the mesh CA key and the operator account key; %s hold(s) them too: mint control tokens there\n", node, strings.Join(otherCA, ", "))
				case heldCA:
					fmt.Fprintf(cio.stdout, "%s held the mesh CA key and the operator account key: no control token can be minted until ca-key.pem and admin-account.nk are restored from their backup on another control node (docs/operations.md, \"Losing the bootstrap machine\")\n", node)
				}
				return nil
			}
		},
	}
}

// otherCAHolders is the other control nodes holding the CA key, said when the
// removed node held it.
func otherCAHolders(heldCA bool, others []string) []string {
	if !heldCA {
		return nil
	}
	return others
}

// printRemoval says what `meshctl control remove` did and, for a removal just done,
// what it does not take back: the pending tokens that list the node's broker
// address, and the signing key, which every control node holds (docs/operations.md,
// "Removing a control node": the command says so, with or without pending tokens).
func printRemoval(w io.Writer, node string, res api.ControlRemoveResult) {
	if res.NeverAdmitted {
		// Nothing was a member: its tokens were what could still make one.
		for _, t := range res.CancelledTokens {
			fmt.Fprintf(w, "control node %s was never admitted: cancelled its pending control token %s (%s); it admits nothing from now on, and a join running with it is refused (token_cancelled)\n",
				node, t.ID, tokenTerms(t))
		}
		return
	}
	if res.AlreadyRemoved {
		// Said again: the operator of a rerun, or of a second removal, did not
		// see the first one's advice.
		fmt.Fprintf(w, "control node %s was already removed from Raft and from the control plane; nothing to do but what its removal said:\n", node)
	} else {
		fmt.Fprintf(w, "removed control node %s from the control plane (and from Raft, where it was a member)\n", node)
	}
	switch {
	case res.Demoted != "" && res.DemotedNotServing:
		fmt.Fprintf(w, "%s does not serve: it was made a nonvoter before %s was taken out (it sent no heartbeat, or did not follow the leader), so that the voters left are a quorum that serves "+
			"(taken out with %s still a voter, the leader would have needed its vote, and the control plane would have stopped until it came back); "+
			"once it serves and follows again, it catches up as a nonvoter and becomes a voter again with the next control node that serves\n", res.Demoted, node, res.Demoted)
	case res.Demoted != "":
		fmt.Fprintf(w, "%s is now a nonvoter, so that the voters stay an odd number (two voters stop when either stops); it keeps the log and becomes a voter again with the next control node that serves\n", res.Demoted)
	}
	if len(res.PendingTokens) > 0 {
		fmt.Fprintf(w, "pending tokens list its broker address (nodes: %s). If the machine is lost or suspected, "+
			"cancel them (meshctl token cancel NODE) and mint new ones: a machine answering at that address with its certificate passes the token's CA pin; "+
			"it cannot log in with what a host sends it, but it delays the hosts that try it first, and it would read the secret of an agent older than this version. "+
			"Rotate the signing key too (meshctl signing-key rotate)\n", strings.Join(res.PendingTokens, ", "))
		return
	}
	fmt.Fprintf(w, "it held the declaration signing key: if the machine is lost or suspected, rotate it (meshctl signing-key rotate)\n")
}

// joinRerun is the join's command line as it is run again: the token's file
// named (a resume printed without it waited on stdin, or said the token is empty:
// a docs walkthrough), and the flags a resume may need again (--listen behind NAT,
// the brokers given beside the token, a Raft heartbeat not the default). Each part
// is quoted for a POSIX shell when it needs to be (an IPv6 address's brackets are a
// glob: a review).
func joinRerun(dir, tokenFile, listen string, brokers []netip.AddrPort, heartbeat time.Duration) string {
	cmd := "meshctl join --data " + shellWord(dir)
	if tokenFile != "" && tokenFile != "-" {
		cmd += " --token-file " + shellWord(tokenFile)
	}
	if listen != "" {
		cmd += " --listen " + shellWord(listen)
	}
	for _, b := range brokers {
		cmd += " --broker " + shellWord(b.String())
	}
	if heartbeat != replication.DefaultTimeouts().Heartbeat {
		cmd += " --raft-heartbeat " + heartbeat.String()
	}
	return cmd
}

// shellWord is s as one word for a POSIX shell: as it is when it holds only
// characters no shell treats apart, single-quoted otherwise.
func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:,@=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
