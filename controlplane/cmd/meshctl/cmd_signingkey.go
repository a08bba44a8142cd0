package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

func signingKeyCommand() command {
	return command{
		name:    "signing-key",
		changes: true,
		usage:   "(rotate | status | retire [--force]) --data DIR [--json]",
		summary: `Roll the declaration signing key over, with overlap and no flag day.
  rotate  adds a new key: the keyring lists old and new, signed by both; declarations
          are signed by both; every control node receives the new key sealed to it.
  status  shows which live nodes acknowledged which keyring; exits 5 while a live
          node has not acknowledged the current one (a script waits on it).
  retire  drops the old key; refused while a live node has not acknowledged the
          current keyring, unless --force, which names the nodes it strands.
Hosts offline throughout catch up by following the chain of keyrings.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var cp controlPlaneFlags
			var force, asJSON bool
			cp.register(c, cio)
			c.ValidArgs = []cobra.Completion{"rotate\tadd a new signing key", "status\twhich nodes acknowledged which keyring", "retire\tdrop the old key"}
			fs.BoolVar(&force, "force", false, "retire even if live nodes have not acknowledged the new keyring")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
			return func(args []string) error {
				switch {
				case len(args) == 0:
					return usagef("say rotate, status or retire")
				case len(args) > 1:
					return usagef("unexpected argument %q: signing-key %s takes none", args[1], args[0])
				}
				// Checked before the control plane is called: a misspelt action is a
				// usage error wherever the control plane is, or whether it answers.
				switch args[0] {
				case "rotate", "status", "retire":
				default:
					return usagef("unknown signing-key action %q: say rotate, status or retire", args[0])
				}
				if force && args[0] != "retire" {
					return usagef("--force applies to retire")
				}
				client, err := cp.dial()
				if err != nil {
					return err
				}
				defer client.Close()
				switch args[0] {
				case "rotate":
					var res api.KeyringResult
					if err := client.Call(api.OpSigningKeyRotate, struct{}{}, &res); err != nil {
						return err
					}
					if asJSON {
						return writeJSON(cio.stdout, res)
					}
					fmt.Fprintf(cio.stdout, "keyring epoch %d: %d keys (old and new); new tokens carry the new key\nwhen `meshctl signing-key status` shows every live node on epoch %d: meshctl signing-key retire\n", res.Epoch, len(res.Keys), res.Epoch)
				case "status":
					var res api.KeyringStatus
					if err := client.Call(api.OpSigningKeyStatus, struct{}{}, &res); err != nil {
						return err
					}
					if asJSON {
						if err := writeJSON(cio.stdout, res); err != nil {
							return err
						}
					} else {
						printKeyringStatus(cio.stdout, res)
					}
					return keyringNotAcknowledged(res)
				case "retire":
					var res api.KeyringResult
					if err := client.Call(api.OpSigningKeyRetire, api.RetireRequest{Force: force}, &res); err != nil {
						return err
					}
					if asJSON {
						return writeJSON(cio.stdout, res)
					}
					if res.Unchanged {
						// Retired before (a retire run twice), or never rotated: the
						// one key there is, is the one in use.
						key := ""
						if len(res.Keys) > 0 {
							key = res.Keys[0][:min(12, len(res.Keys[0]))] + "…"
						}
						fmt.Fprintf(cio.stdout, "keyring epoch %d holds one key, %s, and no rotation is in progress: nothing was retired now. "+
							"If a retire of yours ran before, it is done; if a rotate of yours did not complete, the key it was to replace is still the one in use: run meshctl signing-key rotate, then retire\n", res.Epoch, key)
						return nil
					}
					fmt.Fprintf(cio.stdout, "keyring epoch %d: the old key is retired; declarations it signs are refused from now on\n", res.Epoch)
					for _, s := range res.Stranded {
						fmt.Fprintf(cio.stdout, "stranded: %s (it catches up when it accepts the chain of keyrings)\n", s)
					}
					if len(res.StaleTokens) > 0 {
						fmt.Fprintf(cio.stdout, "pending tokens of %s carry the retired key and are refused from now on (token_stale_key): mint new ones with --replace (meshctl token --node NODE --replace), which cancels them\n",
							strings.Join(res.StaleTokens, ", "))
					}
				default:
					return usagef("unknown signing-key action %q: say rotate, status or retire", args[0])
				}
				return nil
			}
		},
	}
}

// keyringNotAcknowledged is `signing-key status`'s exit: 5 (not converged) while a
// live node has not acknowledged the current keyring, or a node holds a newer one
// than the control plane, as status exits 5 while a live node has not applied what
// was declared. It exited 0 either way, and the rotation's "wait until every live
// node shows the new epoch" could not be scripted (a newcomer's audit). A node past
// the keyring history does not count: it will never acknowledge (it is sent nothing
// more), holds back no retirement, and `status` and `nodes` show it failing
// (keyring_gone, exit 5); counted, it kept the rotation's wait loop going for ever
// (a docs walkthrough).
func keyringNotAcknowledged(res api.KeyringStatus) error {
	behind, ahead := 0, 0
	for _, n := range res.Nodes {
		switch {
		case n.Epoch > res.Epoch:
			ahead++
		case n.Epoch < res.Epoch && n.State == api.StateAlive && !n.Gone:
			behind++
		}
	}
	switch {
	case ahead > 0:
		return exitError{code: exitNotConverged, err: fmt.Errorf("not converged: %d node(s) hold a keyring newer than the control plane's epoch %d", ahead, res.Epoch)}
	case behind > 0:
		return exitError{code: exitNotConverged, err: fmt.Errorf("not converged: %d live node(s) have not acknowledged keyring epoch %d", behind, res.Epoch)}
	}
	return nil
}

// printKeyringStatus prints `signing-key status`: the keyring and which nodes
// acknowledged it.
func printKeyringStatus(w io.Writer, res api.KeyringStatus) {
	fmt.Fprintf(w, "keyring epoch %d, %d key(s)\n", res.Epoch, len(res.Keys))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tKEYRING\tACKNOWLEDGED")
	behind, ahead, gone := 0, 0, 0
	for _, n := range res.Nodes {
		mark, held := "yes", fmt.Sprintf("epoch %d", n.Epoch)
		if n.Epoch < res.Epoch {
			mark = "no (behind)"
			if n.State == api.StateAlive && !n.Gone {
				behind++
			}
		}
		if n.Epoch > res.Epoch {
			// It holds a keyring the control plane does not: the control plane
			// was restored from a copy older than a rotation. It was "yes".
			mark = "no (ahead of the control plane)"
			ahead++
		}
		if n.Epoch == 0 {
			// Epochs start at 1: the node never reported one (enrolled,
			// its agent not run yet).
			held, mark = "-", "no (never reported)"
		}
		if n.Gone {
			mark = "no (past the keyring history: enrol it again)"
			gone++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", n.Node, n.State, held, mark)
	}
	tw.Flush()
	if gone > 0 {
		fmt.Fprintf(w, "%d node(s) hold a keyring older than the %d the mesh keeps and refused the chain they were sent: they refuse all it sends and are sent nothing more, "+
			"and hold back neither a retirement nor this command's exit; enrol each again (meshctl revoke NODE, then a new token; meshctl nodes NODE says how)\n", gone, state.MaxKeyringHistory)
	}
	if ahead > 0 {
		fmt.Fprintf(w, "%d node(s) hold a keyring newer than the control plane's: it was restored from a copy older than a rotation, and they refuse what it signs now; "+
			"after a rotation alone, meshctl signing-key rotate takes the keyring past theirs; after a retirement they must enrol again: see docs/operations.md, Backing up\n", ahead)
	}
	switch {
	case len(res.Keys) > 1 && behind > 0:
		fmt.Fprintf(w, "%d live node(s) behind; retire is refused until they acknowledge (or --force)\n", behind)
	case len(res.Keys) > 1:
		fmt.Fprintln(w, "every live node acknowledged this keyring: the old key can be retired (meshctl signing-key retire)")
	}
}
