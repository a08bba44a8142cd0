package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operatorcreds"
)

func operatorCommand() command {
	return command{
		name:    "operator",
		changes: true,
		usage:   "add NAME --data DIR [--ttl 90d] [--out FILE] [--renew] [--json]  |  list [--json]  |  revoke NAME... [--json]  |  revoke NAME --key KEY [--json]",
		summary: `Operator credentials of one's own, by name: expiring, and revoked one by one.
  add     issues credentials named NAME (a person's login, an automation's name),
          valid for --ttl (1h to 2y, default 90d), on the control node holding the
          operator account key (the bootstrap machine's --data); the mesh records
          the name and public key, and the file --out (default NAME.creds, mode
          0600, never one that exists) holds the only copy of the seed. Hand it out
          with ca.pem and the brokers' addresses: meshctl --servers ... --creds
          NAME.creds --ca ca.pem. With --renew, while NAME's credentials are
          valid: new ones beside them (two at most), the older staying valid
          until they expire or are revoked by their key.
  list    shows the credentials recorded: valid, expired or revoked.
  revoke  refuses the credentials issued under each NAME from now on, and closes
          their open connections on every control node; the name may be issued
          anew. With --key, only NAME's credentials of that key (the older of a
          renewal; as list shows it, or whole from list --json). Revoked
          credentials stay listed until 90 days after they expire.
A control node's own admin.creds is not among them: it lasts as long as its node.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var cp controlPlaneFlags
			var asJSON, renew bool
			var out string
			var keys []string
			ttl := dayDuration(operatorcreds.DefaultTTL)
			cp.register(c, cio)
			c.ValidArgs = []cobra.Completion{"add\tissue credentials by name", "list\tthe credentials recorded", "revoke\trevoke credentials by name"}
			fs.Var(&ttl, "ttl", "add: how long the credentials live, 1h to 2y (a Go duration, or days or years: 90d, 2y)")
			fs.StringVar(&out, "out", "", "add: the file to write the credentials to, mode 0600; one that exists is refused (default NAME.creds)")
			fs.BoolVar(&renew, "renew", false, "add: issue them while NAME's credentials are valid, beside them (the older stay valid until they expire or are revoked by key)")
			fs.StringArrayVar(&keys, "key", nil, "revoke: only NAME's credentials of this key (repeatable; the key as operator list shows it, or whole)")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
			return func(args []string) error {
				if len(args) == 0 {
					return usagef("say add, list or revoke")
				}
				action, names := args[0], args[1:]
				switch action {
				case "add":
					if len(names) != 1 {
						return usagef("operator add takes one NAME")
					}
					if err := api.CheckOperatorName(names[0]); err != nil {
						return usagef("%v", err)
					}
				case "list":
					if len(names) > 0 {
						return usagef("unexpected argument %q: operator list takes none", names[0])
					}
				case "revoke":
					if len(names) == 0 {
						return usagef("operator revoke takes the NAMEs to revoke (meshctl operator list shows them)")
					}
					if len(names) > api.MaxOperatorNames {
						return usagef("%d names: at most %d in one revocation", len(names), api.MaxOperatorNames)
					}
					for _, n := range names {
						if err := api.CheckOperatorName(n); err != nil {
							return usagef("%v", err)
						}
					}
				default:
					return usagef("unknown operator action %q: say add, list or revoke", action)
				}
				if action != "add" && (fs.Changed("ttl") || fs.Changed("out") || renew) {
					return usagef("--ttl, --out and --renew apply to operator add")
				}
				if fs.Changed("key") && (action != "revoke" || len(names) != 1) {
					return usagef("--key applies to operator revoke of one NAME")
				}
				for _, k := range keys {
					// An empty --key "$OLD" must not become a revocation of the
					// whole name.
					if len(strings.TrimSuffix(k, "…")) < minKeyPrefix {
						return usagef("--key %q: give the key as operator list shows it (%d characters or more), or whole", k, minKeyPrefix)
					}
				}
				switch action {
				case "add":
					return operatorAdd(cio, &cp, names[0], time.Duration(ttl), out, renew, asJSON)
				case "list":
					var res api.OperatorListResult
					if err := cp.call(api.OpOperatorList, api.OperatorListRequest{}, &res); err != nil {
						return err
					}
					if asJSON {
						return writeJSON(cio.stdout, res)
					}
					printOperators(cio.stdout, res.Operators)
					return nil
				default:
					req := api.OperatorRevokeRequest{Names: names}
					if len(keys) > 0 {
						var err error
						if req.Keys, err = operatorKeys(&cp, names[0], keys); err != nil {
							return err
						}
					}
					var res api.OperatorRevokeResult
					if err := cp.call(api.OpOperatorRevoke, req, &res); err != nil {
						if api.RefusedMember(err, "keys") {
							return &api.Error{Code: api.CodeOlderControlNode, Message: "the control plane is older than revocations by key (--key): nothing was revoked; upgrade every control node first"}
						}
						return err
					}
					if asJSON {
						return writeJSON(cio.stdout, res)
					}
					for _, o := range res.Revoked {
						if o.AlreadyRevoked {
							// Run again, it read as a revocation made now (a docs
							// walkthrough), as `revoke` says of a node already revoked.
							fmt.Fprintf(cio.stdout, "%s (key %s…) was already revoked, at %s: nothing changed\n",
								oneLine(o.Name, 128), keyPrefix(o.Key), o.RevokedAt.UTC().Format(time.RFC3339))
							continue
						}
						fmt.Fprintf(cio.stdout, "revoked %s (key %s…) at %s: each control node refuses it at login, and closes its open connections, as it applies the revocation (within a heartbeat, on a node that follows the leader)\n",
							oneLine(o.Name, 128), keyPrefix(o.Key), o.RevokedAt.UTC().Format(time.RFC3339))
					}
					return nil
				}
			}
		},
	}
}

// operatorAdd issues credentials named name and writes them to out (NAME.creds by
// default): the file is made beside its name first, mode 0600, and takes the name
// only once the mesh recorded the credentials; a name that exists is never written
// over (a second run of the same command line refuses, and the first file, the one
// copy of that seed, stays).
func operatorAdd(cio *cliIO, cp *controlPlaneFlags, name string, ttl time.Duration, out string, renew, asJSON bool) error {
	if cp.dir == "" || cp.remote() {
		return usagef("operator add runs on the control node that holds the operator account key: --data DIR of the node meshctl nodes marks (CA)")
	}
	if ttl < operatorcreds.MinTTL || ttl > operatorcreds.MaxTTL {
		d := dayDuration(ttl)
		return usagef("--ttl %s: must be between 1h and 2y; the default is 90d", d.String())
	}
	if out == "" {
		out = name + ".creds"
	}
	if _, err := os.Lstat(out); err == nil {
		return usagef("--out %s exists: nothing was issued; name a new file (the one there may hold the only copy of credentials issued before)", out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("--out %s: %w; nothing was issued", out, err)
	}
	if _, err := os.Stat(filepath.Dir(out)); errors.Is(err, fs.ErrNotExist) {
		// A usage error, as renew-certificate's --out (it was exit 1: a
		// walkthrough).
		return usagef("--out %s: its directory %s does not exist: nothing was issued; give a path in a directory that exists", out, filepath.Dir(out))
	}
	tmp, tmpName, err := privateTemp(out)
	if err != nil {
		return fmt.Errorf("--out %s: no file can be made in %s (%w); nothing was issued", out, filepath.Dir(out), err)
	}
	defer os.Remove(tmpName) // gone by then once linked; otherwise the seed goes with it
	opts, err := cp.options()
	if err != nil {
		tmp.Close()
		return err
	}
	issued, err := operatorcreds.Issue(datadir.Dir(cp.dir), operatorcreds.Options{Name: name, TTL: ttl, Renew: renew, Operator: opts})
	if err != nil {
		tmp.Close()
		return err
	}
	_, err = tmp.Write(issued.Creds)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, not rename: a file made under the name meanwhile is not replaced.
		if err = os.Link(tmpName, out); err != nil && !errors.Is(err, fs.ErrExist) {
			// A file system without hard links (a vfat stick, a likely way to
			// hand credentials over): made under the name, never over one.
			err = writeNew(out, issued.Creds)
		}
	}
	if err != nil {
		revoke := "meshctl operator revoke " + name
		if renew {
			// The name holds the credentials renewed too, which stay.
			revoke += " --key " + issued.Record.Key
		}
		return fmt.Errorf("operator credentials %s were recorded, but could not be written to %s (%w): nobody holds their seed; revoke them (%s) and issue them again", name, out, err, revoke)
	}
	if d, err := os.Open(filepath.Dir(out)); err == nil {
		_ = d.Sync() // the new name survives a crash
		d.Close()
	}
	cio.carriedOut()
	if asJSON {
		return writeJSON(cio.stdout, struct {
			api.OperatorView
			Out string `json:"out"`
		}{issued.Record, out})
	}
	fmt.Fprintf(cio.stdout, "operator credentials %s written to %s (mode 0600), valid until %s\n"+
		"hand them over privately, with ca.pem and the brokers' addresses: meshctl nodes --servers ADDR --creds %s --ca ca.pem\n",
		name, out, issued.Record.Expires.UTC().Format(time.RFC3339), filepath.Base(out))
	if renew {
		// The new key was the only one on the screen beside "revoke them:
		// --key KEY", and pasting it revoked the file just handed over (a
		// walkthrough): it is named as the one to keep.
		fmt.Fprintf(cio.stdout, "the earlier credentials of %s stay valid until they expire; once the new file is in use, revoke the earlier ones by their key: meshctl operator revoke %s --key KEY, KEY from meshctl operator list, the key of %s's other credentials, NOT this new one's (%s…)\n",
			name, name, name, keyPrefix(issued.Record.Key))
	} else {
		fmt.Fprintf(cio.stdout, "revoke them with: meshctl operator revoke %s\n", name)
	}
	return nil
}

// minKeyPrefix is how much of a key operator list shows, and --key takes.
const minKeyPrefix = 12

// operatorKeys resolves the keys --key gave (each whole, or as operator list shows
// it) to the whole keys of name's recorded credentials: one each, or an error that
// says which matched none or several.
func operatorKeys(cp *controlPlaneFlags, name string, given []string) ([]string, error) {
	var list api.OperatorListResult
	if err := cp.call(api.OpOperatorList, api.OperatorListRequest{}, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, g := range given {
		prefix := strings.TrimSuffix(g, "…")
		var found []string
		for _, o := range list.Operators {
			if o.Name == name && strings.HasPrefix(o.Key, prefix) {
				found = append(found, o.Key)
			}
		}
		switch len(found) {
		case 0:
			return nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no credentials of %s have a key that starts %s (meshctl operator list shows them): nothing was revoked", name, api.CleanText(prefix, 60))}
		case 1:
			out = append(out, found[0])
		default:
			return nil, &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf("%d credentials of %s have a key that starts %s: give more of it (meshctl operator list --json shows them whole); nothing was revoked", len(found), name, api.CleanText(prefix, 60))}
		}
	}
	return out, nil
}

// writeNew writes data to a new file name, mode 0600, and syncs it; a name that
// exists is left as it is (fs.ErrExist).
func writeNew(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(name)
	}
	return err
}

func printOperators(w io.Writer, ops []api.OperatorView) {
	if len(ops) == 0 {
		fmt.Fprintln(w, "no operator credentials are recorded (meshctl operator add issues them; control nodes' admin.creds are not listed)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tISSUED\tEXPIRES\tREVOKED\tKEY\tISSUED BY")
	for _, o := range ops {
		revoked, by := "-", "-"
		if !o.RevokedAt.IsZero() {
			revoked = o.RevokedAt.UTC().Format(time.RFC3339)
		}
		if o.IssuedBy != "" {
			by = oneLine(o.IssuedBy, 128)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s…\t%s\n", oneLine(o.Name, 128), oneLine(o.State, 32), o.IssuedAt.UTC().Format(time.RFC3339),
			o.Expires.UTC().Format(time.RFC3339), revoked, keyPrefix(o.Key), by)
	}
	tw.Flush()
}

// keyPrefix is the start of an operator key as the listings show it (and --key
// takes it), made safe for a terminal: it comes from the control plane's answer,
// which a broker that passes the CA pin (a removed control node on the path) writes.
func keyPrefix(key string) string {
	return oneLine(key[:min(minKeyPrefix, len(key))], 64)
}

// dayDuration is a duration flag that also takes whole days (90d) and years of 365
// days (2y), as credentials' lives are counted: "1h to 2y" is the range the help
// gives, and 2y was refused (a docs walkthrough).
type dayDuration time.Duration

func (d *dayDuration) String() string {
	v := time.Duration(*d)
	if v > 0 && v%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(v/(24*time.Hour)), 10) + "d"
	}
	return v.String()
}

func (d *dayDuration) Set(s string) error {
	for unit, days := range map[string]int{"d": 1, "y": 365} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v < 0 || v > 100*366/days { // before multiplying: 5508753709683126373y wrapped to a day
				return fmt.Errorf("%q: a whole number of days (90d) or years (2y), or a Go duration (36h)", s)
			}
			*d = dayDuration(time.Duration(v*days) * 24 * time.Hour)
			return nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q: a whole number of days (90d) or years (2y), or a Go duration (36h)", s)
	}
	*d = dayDuration(v)
	return nil
}

func (d *dayDuration) Type() string { return "duration" }

func isDays(v any) bool {
	_, ok := v.(*dayDuration)
	return ok
}
