package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/tokenfmt"
)

func revokeCommand() command {
	return command{
		name:    "revoke",
		changes: true,
		usage:   "--data DIR NODE [NODE...] [--json]  |  --data DIR --key PUBKEY NODE [--json]",
		summary: `Revoke nodes for good: their agents stop and their keys are refused.
Each is sent a signed notice and its agent stops; its connections are closed on every
broker right after, and its key is refused from then on. Several nodes are revoked in
one commit (at most 1000); their pending tokens are cancelled with them. Enrolling a
machine under a revoked id needs a token minted after the revocation.
It names the key it revoked and when that machine enrolled, and says when the id was
revoked before, under another key: run again after another machine enrolled under
the id (a script retried), it revokes that machine. --key PUBKEY revokes the node
only while it holds that key (its public_key in nodes --json): run again then, it
is refused (exit 4, key_mismatch) and revokes nothing.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var cp controlPlaneFlags
			var asJSON bool
			var key string
			cp.register(c, cio)
			c.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
			c.Flags().StringVar(&key, "key", "", "revoke the node only if it holds this key (its public_key): not a machine enrolled under the id since")
			c.ValidArgsFunction = cp.completeNodes(0, nodesNotRevoked)
			return func(args []string) error {
				if len(args) == 0 {
					return usagef("name the node(s) to revoke")
				}
				if c.Flags().Changed("key") && len(args) != 1 {
					return usagef("--key is the key of one node: name that node alone")
				}
				if c.Flags().Changed("key") && !nkeys.IsValidPublicUserKey(key) {
					return usagef("--key %q: not a node's public key (a U... key of 56 characters, as meshctl nodes --json shows it as public_key)", key)
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
				if err := cp.call(api.OpRevoke, api.RevokeRequest{Nodes: args, Key: key}, &res); err != nil {
					var ae *api.Error
					if errors.As(err, &ae) && ae.Code == api.CodeKeyMismatch {
						// The mesh suggests the command without the flags that
						// reached it.
						ae.Message = strings.Replace(ae.Message, "meshctl revoke --key ", "meshctl revoke "+cp.given()+"--key ", 1)
					}
					return olderKey(err)
				}
				if asJSON {
					return writeJSON(cio.stdout, res)
				}
				for _, r := range res.Revoked {
					printRevoked(cio.stdout, r)
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

// printRevoked says what a revocation did to one node: which machine (its key and
// when it enrolled), and whether the id was revoked before under another key, which
// a revocation run again after another machine enrolled under the id is: the same
// words as the first revocation told the operator nothing.
func printRevoked(w io.Writer, r api.RevokedNode) {
	machine := ""
	switch {
	case r.PublicKey != "" && !r.EnrolledAt.IsZero():
		machine = fmt.Sprintf("key %s, enrolled %s; ", r.PublicKey, r.EnrolledAt.UTC().Format(time.RFC3339))
	case r.PublicKey != "":
		// A record forgotten since its revocation keeps no enrolment time.
		machine = fmt.Sprintf("key %s; ", r.PublicKey)
	}
	if !r.AlreadyRevokedAt.IsZero() {
		fmt.Fprintf(w, "%s was already revoked (%sat %s); its key stays refused\n", r.Node, machine, r.AlreadyRevokedAt.UTC().Format(time.RFC3339))
	} else {
		open := "no connection open"
		if r.Connections > 0 {
			open = fmt.Sprintf("%d connection(s) open, closed now", r.Connections)
		}
		fmt.Fprintf(w, "revoked %s (%s%s); its key is refused from now on\n", r.Node, machine, open)
	}
	if r.EarlierRevocations == 0 {
		return
	}
	times := "once"
	switch r.EarlierRevocations {
	case 1:
	case 2:
		times = "twice"
	default:
		times = fmt.Sprintf("%d times", r.EarlierRevocations)
	}
	when := ""
	if !r.EarlierRevokedAt.IsZero() {
		when = ", the last at " + r.EarlierRevokedAt.UTC().Format(time.RFC3339)
		if r.EarlierRevocations == 1 {
			when = ", at " + r.EarlierRevokedAt.UTC().Format(time.RFC3339)
		}
	}
	if !r.AlreadyRevokedAt.IsZero() {
		// Nothing was revoked now: the earlier revocations are the id's history.
		fmt.Fprintf(w, "%s was also revoked %s before that%s, under another key\n", r.Node, times, when)
		return
	}
	fmt.Fprintf(w, "%s was revoked %s before%s, under another key: the machine revoked here is the one enrolled under the id since. "+
		"If this command was run again for that earlier revocation, it revoked a machine it did not mean to: enrolling it again needs a new token, and on the machine its state directory removed (or moved away: it holds the node's applied declaration, secrets included). "+
		"meshctl revoke --key KEY revokes a node only while it holds KEY\n", r.Node, times, when)
}

// olderKey explains the refusal of a control plane older than --key: it reads
// requests strictly, so it refuses the member, and revokes nothing.
func olderKey(err error) error {
	if api.RefusedMember(err, "key") {
		return fmt.Errorf("%w\nthe control plane is older than this meshctl and cannot check --key; it revoked nothing: look at the node's key (meshctl nodes NODE --json) and revoke without --key, or upgrade the control plane", err)
	}
	return err
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
					return cp.completeNodes(1, nodesNotRevoked)(cmd, args, toComplete)
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
					fmt.Fprintf(cio.stderr, "meshctl label: %s had no label %s: nothing to remove (a typo? its labels are below)\n", v.ID, k)
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
