package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/operator"
	"mesh/tokenfmt"
)

func tokenCommand() command {
	return command{
		name:    "token",
		changes: true,
		usage:   "--data DIR --node ID [--ttl 15m] [--label k=v]... [--replace] [--out FILE] [--json]  |  --data DIR --role control --node ID --addr IP:PORT [--raft-addr IP:PORT] [--cluster-addr IP:PORT] [--ttl 15m] [--out FILE] [--json]\n       meshctl token list [--node ID] [--json]  |  meshctl token cancel NODE [ID]... [--json]",
		summary: `Mint a one-time enrolment token for one node; stdout is the token and nothing else.
The secret is generated here and only its hash reaches the control plane. The token
carries the broker addresses, the CA pin and the signing key the node will believe.
Hand it to the machine out of band: meshhost reads it from stdin, a file, MESH_TOKEN
or a systemd credential. With --json, stdout is a JSON object whose "token" is the
token, beside what it admits and until when.
Scripts write it with --out FILE: the file (mode 0600) is written only once the token
is minted, and a file that holds data already is refused, nothing minted, unless
--replace (` + "`> token.txt`" + ` run again empties the file before meshctl runs, and
with it the pending token's only copy). With --out, stdout has no token: --json prints
the object without "token", with "out".
Control tokens are minted with the data directory of the node holding the CA key.
A node has one pending token at a time: while one is, minting is refused (exit 4,
token_pending) unless --replace cancels it; revoking a node cancels its pending tokens.
  token list         the tokens the mesh remembers: node, role, labels, expiry and
                     state (pending, used, expired, cancelled, stale: its signing
                     key was retired since); never a secret. Tokens
                     are forgotten a day after they expire.
  token cancel NODE [ID]...
                     NODE's pending tokens stop admitting anything at once: those
                     named by ID (as token list shows them), or, without IDs, those
                     pending as it reads them. It names each token cancelled; a
                     token minted since it read them (another operator's --replace)
                     is left pending, and named. Run again with the IDs it named,
                     it cancels nothing more.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var (
				cp                          controlPlaneFlags
				node, role                  string
				addr, raftAddr, clusterAddr string
				ttl                         time.Duration
				labels                      = labelFlag{}
				asJSON, replace             bool
				outFile                     string
			)
			cp.register(c, cio)
			fs.BoolVar(&asJSON, "json", false, "print the token and what it admits as JSON")
			fs.StringVar(&node, "node", "", "id of the node the token admits (required to mint; for list, only that node's tokens)")
			fs.StringVar(&role, "role", "worker", "role the token admits: worker or control")
			fs.DurationVar(&ttl, "ttl", tokenfmt.DefaultTTL, "how long the token stays valid (at most 1h)")
			fs.Var(valuedLabels{labelFlag: labels, mint: true}, "label", "label k=v given to the node (repeatable; v may not be empty)")
			fs.BoolVar(&replace, "replace", false, "cancel the node's pending token(s) as this one is minted (else a pending token refuses the mint)")
			fs.StringVar(&outFile, "out", "", "write the token to this file, mode 0600, once it is minted (not to stdout); a file holding data is refused, nothing minted, unless --replace")
			fs.StringVar(&addr, "addr", "", "control tokens: the new control node's broker address ip:port (its TLS identity carries it)")
			fs.StringVar(&raftAddr, "raft-addr", "", "control tokens: its Raft address (default: --addr port+1)")
			fs.StringVar(&clusterAddr, "cluster-addr", "", "control tokens: its broker route address (default: --addr port+2)")
			_ = c.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]cobra.Completion{"worker", "control"}, cobra.ShellCompDirectiveNoFileComp))
			c.ValidArgsFunction = func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
				switch {
				case len(args) == 0:
					return []cobra.Completion{"list\tthe tokens the mesh remembers", "cancel\tcancel a node's pending tokens"}, cobra.ShellCompDirectiveNoFileComp
				case len(args) >= 1 && args[0] == "cancel" && node != "":
					// --node NODE names the node: what follows are its ids (a
					// walkthrough was offered node ids there).
					return cp.pendingTokenIDs(node, args[1:]), cobra.ShellCompDirectiveNoFileComp
				case len(args) == 1 && args[0] == "cancel":
					return cp.pendingTokenNodes(), cobra.ShellCompDirectiveNoFileComp
				case len(args) >= 2 && args[0] == "cancel":
					return cp.pendingTokenIDs(args[1], args[2:]), cobra.ShellCompDirectiveNoFileComp
				}
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return func(args []string) (err error) {
				if len(args) > 0 && (args[0] == "list" || args[0] == "cancel") {
					for _, f := range []string{"role", "ttl", "label", "replace", "out", "addr", "raft-addr", "cluster-addr"} {
						if fs.Changed(f) {
							return usagef("--%s is for minting a token, not for token %s", f, args[0])
						}
					}
					if args[0] == "list" {
						if len(args) > 1 {
							return usagef("token list takes no argument; --node ID filters by node")
						}
						return listTokens(cio, &cp, node, asJSON)
					}
					var ids []string
					switch {
					case len(args) >= 2 && node == "":
						node, ids = args[1], args[2:]
					case len(args) >= 1 && node != "":
						ids = args[1:]
					default:
						return usagef("say which node: meshctl token cancel NODE [ID]...")
					}
					if err := tokenfmt.CheckNodeID(node); err != nil {
						return usagef("node: %v", err)
					}
					if len(ids) > api.MaxCancelTokens {
						return usagef("%d token ids; at most %d in one command", len(ids), api.MaxCancelTokens)
					}
					for i, id := range ids {
						ids[i] = strings.ToLower(id)
						if err := api.CheckTokenID(ids[i]); err != nil {
							return usagef("%v", err)
						}
					}
					return cancelTokens(cio, &cp, node, ids, asJSON)
				}
				if err := noPositional(args); err != nil {
					return err
				}
				if node == "" {
					return usagef("--node is required")
				}
				if err := tokenfmt.CheckNodeID(node); err != nil {
					return usagef("--node: %v", err)
				}
				r, err := tokenfmt.ParseRole(role)
				if err != nil {
					// Not the token parser's words ("token field role is
					// malformed"): no token exists yet (a docs walkthrough).
					return usagef(`--role: must be "worker" or "control" (lowercase)`)
				}
				if ttl < time.Second || ttl > tokenfmt.MaxTTL {
					return usagef("--ttl %s: must be at least 1s and at most %s (a long-lived token is a long-lived root credential)", ttl, tokenfmt.MaxTTL)
				}
				if fs.Changed("out") && outFile == "" {
					return usagef("--out: name the file to write the token to")
				}
				// Before anything is minted: a token goes only where other users cannot
				// read it, and, with --out, to no file that holds data.
				var out tokenOutput
				emptied := false // stdout as `>` leaves it: see mintFailed
				if outFile != "" {
					out, err = fileOutput(outFile, replace, node)
				} else {
					emptied = emptyFile(cio.stdout)
					out, err = privateOutput(cio.stdout)
				}
				if err != nil {
					return err
				}
				stdout := cio.stdout
				cio = cio.withStdout(out.w)
				var minted *tokenfmt.Token
				var replaced []api.TokenView
				defer func() {
					if out.commit != nil {
						var changed *outputChangedError
						if cerr := out.commit(err == nil); err == nil && errors.As(cerr, &changed) {
							// Most likely another run for the node wrote its token
							// there, cancelling this one: "mint another with
							// --replace" would cancel that one in turn (a review).
							err = fmt.Errorf("the token for %s was minted, but not written: %w (another meshctl token run for %s?). "+
								"This run cancelled the node's tokens pending before it; the one it minted is pending unless a later --replace cancelled it, with a secret no one holds: "+
								"see meshctl token list --node %s, hand out the token the file holds if it is the node's pending one, and cancel the others (meshctl token cancel %s ID)",
								node, cerr, node, node, node)
						} else if err == nil && cerr != nil {
							err = fmt.Errorf("the token was minted, but could not be written out (%w): it stays pending with a secret no one holds; mint another with --replace", cerr)
						}
					}
					if err == nil {
						cio.carriedOut() // written out whole: a signal now ends nothing
						if outFile != "" && minted != nil {
							err = reportOut(cio.withStdout(stdout), *minted, labels, outFile, asJSON, replaced)
						}
					}
				}()
				// With --out, the file holds the token alone; what stdout says of it
				// comes once the file is written.
				show := func(tok tokenfmt.Token, rep []api.TokenView) error {
					if outFile != "" {
						// The file holds the token alone; the tokens it replaced
						// are told once it is written (reportOut), once.
						minted, replaced = &tok, rep
						return printToken(cio, tok, nil, false, nil)
					}
					return printToken(cio, tok, labels, asJSON, rep)
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
					if cp.dir == "" || cp.remote() {
						return usagef("control tokens are minted with the data directory of the control node that holds the CA key: --data DIR")
					}
					opts, err := cp.options()
					if err != nil {
						return err
					}
					asked := time.Now()
					tok, rep, err := join.Mint(datadir.Dir(cp.dir), join.MintOptions{Node: node, Broker: addr, Raft: raftAddr, Cluster: clusterAddr, TTL: ttl, Operator: opts, Replace: replace})
					if err != nil {
						return mintFailed(olderClaim(err), node, emptied)
					}
					warnMintClock(cio, tok.Expiry, asked, time.Now(), ttl)
					return show(tok, rep)
				}
				if addr != "" || raftAddr != "" || clusterAddr != "" {
					return usagef("--addr, --raft-addr and --cluster-addr are for --role control")
				}
				client, err := cp.dial()
				if err != nil {
					return err
				}
				defer client.Close()
				asked := time.Now()
				tok, rep, err := client.Mint(operator.TokenTerms{Node: node, Role: r, TTL: ttl, Labels: labels, Replace: replace})
				if err != nil {
					return mintFailed(olderReplace(err, node), node, emptied)
				}
				warnMintClock(cio, tok.Expiry, asked, time.Now(), ttl)
				return show(tok, rep)
			}
		},
	}
}

// olderReplace explains the refusal of a control plane older than --replace: it
// reads requests strictly, so it refuses the replace member (and mints nothing)
// with only the decoder's text.
func olderReplace(err error, node string) error {
	if api.RefusedMember(err, "replace") {
		return fmt.Errorf("%w\nthe control plane is older than this meshctl and cannot replace tokens; it minted nothing: cancel the pending token (meshctl token cancel %s) and mint again without --replace, or upgrade the control plane", err, node)
	}
	return err
}

// olderClaim explains the refusal of a control token by a leader older than its
// claim's expiry (claim_expiry, an unknown member to it): the CA's claim now covers
// the token's proof key, sealed identity and expiry, which an older control plane
// does not take.
func olderClaim(err error) error {
	if api.RefusedMember(err, "claim_expiry") {
		return fmt.Errorf("%w\nthe leading control node is older than this meshctl, and does not take the CA's claim this meshctl signs (it covers the token's proof key, sealed identity and expiry); nothing was minted: upgrade every control node, then mint the control token again (docs/operations.md, Upgrading)", err)
	}
	return err
}

// mintFailed explains a mint that failed. Refused token_pending while stdout is an
// empty file (emptied), the refusal's "use that token" may be impossible: the same
// command run again with the same `>` had the shell empty the file, the pending
// token's one copy, before meshctl ran. With no answer (exit 3) the token may have
// been minted and never shown, as after a signal: --replace mints another.
func mintFailed(err error, node string, emptied bool) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeTokenPending && emptied:
		return fmt.Errorf("%w (%s)\nstdout is an empty file: if it held that token (this command run again with the same `>`), the shell emptied it before meshctl ran and the token is lost: "+
			"mint again with --replace, which cancels it; scripts write the token with --out FILE, which writes only once a token is minted and refuses a file that holds one", err, ae.Code)
	case errors.Is(err, operator.ErrNoAnswer), errors.Is(err, operator.ErrConnectionLost):
		return fmt.Errorf("%w\nthe token may have been minted and never shown: it is then pending for %s (meshctl token list --node %s), and this command run again is refused token_pending; "+
			"run it again with --replace, which mints another and cancels it", err, node, node)
	}
	return err
}

// reportOut says, once --out's file is written, where the token is: on stderr as
// text, or as the JSON object on stdout, without the token, with "out".
func reportOut(cio *cliIO, tok tokenfmt.Token, labels map[string]string, name string, asJSON bool, replaced []api.TokenView) error {
	// Without the "meshctl token:" of an error's line: it is what a mint that
	// worked says (on stderr, stdout holding data only, none with --out).
	tellReplaced(cio, replaced, labels, asJSON)
	if asJSON {
		res := newTokenResult(tok, labels, replaced)
		res.Out = name
		return writeJSON(cio.stdout, res)
	}
	fmt.Fprintf(cio.stderr, "minted: the token for %s is in %s (mode 0600), pending until %s\n", tok.Node, name, tok.Expiry.UTC().Format(time.RFC3339))
	return nil
}

// tellReplaced says on stderr which pending tokens a mint cancelled (stdout is the
// token alone), and the labels one gave its node that the new token does not: a
// token minted again with --replace and no --label enrolled its machine without
// them, and declarations by label missed it without a word (a walkthrough).
//
// The command it suggests is built from the control plane's answer, which a broker
// passing the pin writes (a removed control node on the path): only a node id and
// labels as the mesh admits them go into it, characters a shell takes as they are
// (a review: a label's value `$(…)` or a line break was printed for pasting).
//
// With --json (asJSON) the cancelled tokens are the object's "replaced", and only
// the labels' warning is said: it was not, and scripts, which --json is for, lost
// the labels without a word (a docs walkthrough).
func tellReplaced(cio *cliIO, replaced []api.TokenView, labels map[string]string, asJSON bool) {
	for _, t := range replaced {
		if !asJSON {
			fmt.Fprintf(cio.stderr, "cancelled token %s of %s (minted %s): it admits nothing from now on\n", oneLine(t.ID, 64), oneLine(t.Node, 64), t.CreatedAt.UTC().Format(time.RFC3339))
		}
		if tokenfmt.CheckNodeID(t.Node) != nil {
			continue
		}
		var lost, all []string
		for k, v := range t.Labels {
			if api.CheckValuedLabel(k, v) != nil {
				continue
			}
			if w, ok := labels[k]; !ok || w != v {
				lost = append(lost, "--label "+api.TerminalText(k+"="+v))
				if !ok {
					all = append(all, "--label "+api.TerminalText(k+"="+v))
				}
			}
		}
		if len(lost) > 0 {
			// The command given keeps the labels given now too: run as said, it
			// warns no more (a review).
			for k, v := range labels {
				all = append(all, "--label "+api.TerminalText(k+"="+v))
			}
			slices.Sort(lost)
			slices.Sort(all)
			// The same command, not one spelled here: a command without the
			// --data or --out given failed, or printed the token where the
			// operator's file kept the one it replaced (a walkthrough).
			fmt.Fprintf(cio.stderr, "warning: the cancelled token gave %s labels this one does not: %s; to give them, run the same command again with --replace and these labels: %s\n",
				t.Node, strings.Join(lost, " "), strings.Join(all, " "))
		}
	}
}

// listTokens prints the tokens the mesh remembers, oldest first.
func listTokens(cio *cliIO, cp *controlPlaneFlags, node string, asJSON bool) error {
	if node != "" {
		if err := tokenfmt.CheckNodeID(node); err != nil {
			return usagef("--node: %v", err)
		}
	}
	var res api.TokenListResult
	if err := cp.call(api.OpTokenList, api.TokenListRequest{Node: node}, &res); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(cio.stdout, res)
	}
	if len(res.Tokens) == 0 {
		fmt.Fprintln(cio.stdout, "no tokens (the mesh forgets a token a day after it expires)")
		return nil
	}
	tw := tabwriter.NewWriter(cio.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNODE\tROLE\tSTATE\tEXPIRES\tLABELS")
	for _, t := range res.Tokens {
		// The answer's text, as nodes prints it: a broker passing the pin writes it.
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", oneLine(t.ID, 64), oneLine(t.Node, 64), oneLine(t.Role, 16), oneLine(t.State, 16), t.ExpiresAt.UTC().Format(time.RFC3339), oneLine(formatLabels(t.Labels), 16384))
	}
	return tw.Flush()
}

// cancelTokens cancels node's pending tokens named by ids, or, without ids, those it
// reads pending first, and names each token cancelled. The control plane cancels
// what it is sent and nothing else: a token minted since this read (another
// operator's `token --replace`, a mint between a cancellation and its rerun) is
// left pending, and said so. Sending the node alone, as meshctl did before, had
// the control plane cancel whatever was pending when it applied the command: the
// token another operator had just handed out.
func cancelTokens(cio *cliIO, cp *controlPlaneFlags, node string, ids []string, asJSON bool) error {
	client, err := cp.dial()
	if err != nil {
		return err
	}
	defer client.Close()
	return cancelWith(cio, client, node, ids, asJSON)
}

// caller is what cancelWith needs of an operator.Client.
type caller interface {
	Call(op string, req, res any) error
}

// cancelWith is cancelTokens through client.
func cancelWith(cio *cliIO, client caller, node string, ids []string, asJSON bool) error {
	res := api.TokenCancelResult{Node: node, Cancelled: []api.TokenView{}}
	read := len(ids) == 0 // the ids are the pending tokens read here, not the operator's
	if read {
		var list api.TokenListResult
		if err := client.Call(api.OpTokenList, api.TokenListRequest{Node: node}, &list); err != nil {
			return err
		}
		if len(list.Tokens) == 0 {
			return &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf(
				"node %s: no token for this node is known (none was minted, or the last expired over a day ago); meshctl token list shows the tokens the mesh knows", node)}
		}
		for _, t := range list.Tokens {
			// A stale token (its signing key retired) is still a pending one.
			// Only an id as the mesh makes them: the ids go into the command
			// printed for sending it again (a review: an answer a broker passing
			// the pin wrote put shell text there).
			if (t.State == "pending" || t.State == "stale") && api.CheckTokenID(t.ID) == nil {
				ids = append(ids, t.ID)
			}
		}
		if len(ids) == 0 {
			// Nothing to send: a token minted after this read is not cancelled.
			if asJSON {
				return writeJSON(cio.stdout, res)
			}
			fmt.Fprintf(cio.stdout, "%s has no pending token: nothing to cancel (meshctl token list --node %s shows its tokens)\n", node, node)
			return nil
		}
	}
	cio.rerunWith(cancelRerun(node, ids))
	if err := client.Call(api.OpTokenCancel, api.TokenCancelRequest{Node: node, IDs: ids}, &res); err != nil {
		return cancelFailed(err, node, ids)
	}
	if asJSON {
		return writeJSON(cio.stdout, res)
	}
	for _, t := range res.Cancelled {
		fmt.Fprintf(cio.stdout, "cancelled token %s of %s (%s): it admits nothing from now on\n", oneLine(t.ID, 64), oneLine(t.Node, 64), tokenTerms(t))
	}
	for _, t := range res.NotPending {
		fmt.Fprintf(cio.stdout, "token %s of %s was not pending: %s\n", oneLine(t.ID, 64), oneLine(t.Node, 64), notPendingBecause(t))
	}
	if len(res.Cancelled) == 0 && len(res.NotPending) == 0 {
		fmt.Fprintf(cio.stdout, "%s has no pending token: nothing to cancel (meshctl token list --node %s shows its tokens)\n", node, node)
	}
	for _, t := range res.StillPending {
		why := "it was not named"
		if read {
			why = fmt.Sprintf("it was minted after this command read %s's tokens (another operator's token --replace?), and may be one just handed out", node)
		}
		if api.CheckTokenID(t.ID) != nil {
			// No command with what the mesh would not make an id of.
			fmt.Fprintf(cio.stderr, "meshctl token cancel: a token of %s the answer names is pending and was left: %s; meshctl token list --node %s shows it\n",
				oneLine(t.Node, 64), why, node)
			continue
		}
		fmt.Fprintf(cio.stderr, "meshctl token cancel: token %s of %s (%s) is pending and was left: %s; to cancel it too: meshctl token cancel %s %s\n",
			t.ID, oneLine(t.Node, 64), tokenTerms(t), why, node, t.ID)
	}
	return nil
}

// tokenTerms is what tells a token apart for a person: when it was minted, its
// expiry and labels.
func tokenTerms(t api.TokenView) string {
	out := fmt.Sprintf("minted %s, expiring %s", t.CreatedAt.UTC().Format(time.RFC3339), t.ExpiresAt.UTC().Format(time.RFC3339))
	if len(t.Labels) > 0 {
		out += ", labels " + oneLine(formatLabels(t.Labels), 16384)
	}
	return out
}

// notPendingBecause says what became of a token named for cancelling that was not
// pending.
func notPendingBecause(t api.TokenView) string {
	switch t.State {
	case "cancelled":
		return "cancelled already, at " + t.CancelledAt.UTC().Format(time.RFC3339)
	case "used":
		if tokenfmt.CheckNodeID(t.Node) != nil {
			return "it enrolled its node at " + t.UsedAt.UTC().Format(time.RFC3339) + ", which cancelling cannot undo (meshctl revoke NODE takes the node out)"
		}
		return fmt.Sprintf("it enrolled %s at %s, which cancelling cannot undo (meshctl revoke %s takes the node out)", t.Node, t.UsedAt.UTC().Format(time.RFC3339), t.Node)
	case "expired":
		return "expired at " + t.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return oneLine(t.State, 64)
}

// cancelFailed explains a cancellation that failed: a control plane older than
// cancelling by id refuses the ids (and cancels nothing); one whose answer was lost
// may have cancelled them, and sent again with the same ids it cancels nothing more.
func cancelFailed(err error, node string, ids []string) error {
	if api.RefusedMember(err, "ids") {
		return fmt.Errorf("%w\nthe control plane is older than this meshctl and cannot cancel tokens by id; it cancelled nothing: upgrade it, or cancel with the meshctl of its version (which cancels every token of %s pending when the control plane applies it, one minted meanwhile included)", err, node)
	}
	if errors.Is(err, operator.ErrNoAnswer) || errors.Is(err, operator.ErrConnectionLost) {
		return fmt.Errorf("%w\n%s", err, cancelRerun(node, ids))
	}
	return err
}

// cancelRerun says which tokens a cancellation was sent for, and the command that
// sends it again without cancelling a token minted since (run again without the
// ids, it would cancel whatever is pending then: another operator's --replace).
func cancelRerun(node string, ids []string) string {
	return fmt.Sprintf("it was sent for token(s) %s; sent again with them named, it cancels those still pending and no token minted since: meshctl token cancel %s %s",
		strings.Join(ids, ", "), node, strings.Join(ids, " "))
}

// pendingTokenNodes is the nodes with a pending token, for completion.
func (f *controlPlaneFlags) pendingTokenNodes() []string {
	c, err := f.completionClient()
	if err != nil {
		return nil
	}
	defer c.Close()
	var res api.TokenListResult
	if err := c.Call(api.OpTokenList, api.TokenListRequest{}, &res); err != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, t := range res.Tokens {
		if t.State == "pending" && !seen[t.Node] {
			seen[t.Node] = true
			out = append(out, t.Node+"\t"+t.Role+" token, expires "+t.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	return out
}

// pendingTokenIDs is node's pending tokens not named yet, for completion.
func (f *controlPlaneFlags) pendingTokenIDs(node string, named []string) []string {
	c, err := f.completionClient()
	if err != nil {
		return nil
	}
	defer c.Close()
	var res api.TokenListResult
	if err := c.Call(api.OpTokenList, api.TokenListRequest{Node: node}, &res); err != nil {
		return nil
	}
	var out []string
	for _, t := range res.Tokens {
		if (t.State == "pending" || t.State == "stale") && !slices.Contains(named, t.ID) {
			out = append(out, t.ID+"\t"+t.State+", minted "+t.CreatedAt.UTC().Format(time.RFC3339))
		}
	}
	return out
}

// tokenResult is what `token --json` prints.
type tokenResult struct {
	// Token is left out with --out, where the file holds it (Out).
	Token     string    `json:"token,omitempty"`
	Out       string    `json:"out,omitempty"`
	Mesh      string    `json:"mesh"`
	Node      string    `json:"node"`
	Role      string    `json:"role"`
	Brokers   []string  `json:"brokers"`
	ExpiresAt time.Time `json:"expires_at"`
	// Labels are those the node is given when it enrols (--label): the token does
	// not carry them, the mesh's record of it does.
	Labels map[string]string `json:"labels,omitempty"`
	// Replaced lists the node's pending tokens the mint cancelled (--replace).
	Replaced []api.TokenView `json:"replaced,omitempty"`
}

// newTokenResult is what `token --json` says of tok, minted with labels; the
// token itself or the file holding it is the caller's to add.
func newTokenResult(tok tokenfmt.Token, labels map[string]string, replaced []api.TokenView) tokenResult {
	res := tokenResult{Mesh: tok.Mesh, Node: tok.Node, Role: string(tok.Role), ExpiresAt: tok.Expiry.UTC(), Replaced: replaced}
	if len(labels) > 0 {
		res.Labels = labels
	}
	for _, b := range tok.Brokers {
		res.Brokers = append(res.Brokers, b.String())
	}
	return res
}

// mintClockTolerance is how far the control plane's clock may be from this machine's
// before a token minted by it is worth a warning: a host refuses offline only a token
// expired by more than as much by its own clock (decision 0006).
const mintClockTolerance = 5 * time.Minute

// warnMintClock says on stderr when the token's expiry, set by the leader's clock as
// its time plus ttl, shows that clock off from this machine's by more than
// mintClockTolerance: a clock behind mints tokens that hosts with a right clock
// refuse offline as expired (and blame their own clock), a clock ahead tokens that
// live longer than asked. asked and got bracket the request by this machine's clock.
func warnMintClock(cio *cliIO, expiry, asked, got time.Time, ttl time.Duration) {
	var off time.Duration
	switch {
	case expiry.Before(asked.Add(ttl).Truncate(time.Second)):
		off = expiry.Sub(asked.Add(ttl))
	case expiry.After(got.Add(ttl)):
		off = expiry.Sub(got.Add(ttl))
	}
	if off.Abs() <= mintClockTolerance {
		return
	}
	if off < 0 {
		fmt.Fprintf(cio.stderr, "meshctl token: warning: the control plane's clock is %s behind this machine's: the token expires at %s, %s from now by this clock, not %s; a host whose clock is right refuses it once it is 5 minutes past that. Fix the control nodes' clocks (NTP), or mint with a longer --ttl meanwhile\n",
			(-off).Round(time.Minute), expiry.UTC().Format(time.RFC3339), expiry.Sub(got).Round(time.Second), ttl)
		return
	}
	fmt.Fprintf(cio.stderr, "meshctl token: warning: the control plane's clock is %s ahead of this machine's: the token expires at %s, %s from now by this clock, not %s. Fix the control nodes' clocks (NTP)\n",
		off.Round(time.Minute), expiry.UTC().Format(time.RFC3339), expiry.Sub(got).Round(time.Second), ttl)
}

// printToken prints the token alone on a line, or with what it admits as JSON.
// The token is minted by then: one that could not be written (a full disk under a
// redirection) is pending at the mesh with a secret nobody holds, and is said so.
func printToken(cio *cliIO, tok tokenfmt.Token, labels map[string]string, asJSON bool, replaced []api.TokenView) error {
	var err error
	tellReplaced(cio, replaced, labels, asJSON)
	if !asJSON {
		_, err = fmt.Fprintln(cio.stdout, tok.Encode())
	} else {
		res := newTokenResult(tok, labels, replaced)
		res.Token = tok.Encode()
		err = writeJSON(cio.stdout, res)
	}
	if err != nil {
		return fmt.Errorf("the token for %s was minted, but could not be written out (%w): it stays pending until %s with a secret no one holds. "+
			"Mint another with --replace, which cancels it (or meshctl token cancel %s)", tok.Node, err, tok.Expiry.UTC().Format(time.RFC3339), tok.Node)
	}
	return nil
}
