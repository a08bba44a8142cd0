package main

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
)

// Environment variables an operator's machine can name the control plane with,
// instead of flags.
const (
	envServers = "MESH_SERVERS"
	envCreds   = "MESH_CREDS"
	envCA      = "MESH_CA"
	envContext = "MESH_CONTEXT"
)

// controlPlaneFlags are the flags of every command that calls a running control
// plane: where it is and which operator credentials to use (a control node's data
// directory, or on an operator's own machine the brokers, a .creds file and the CA),
// and how long to wait while no control node serves (an election, a daemon still
// starting).
type controlPlaneFlags struct {
	dir           string
	servers       []string
	creds, ca     string
	context       string
	leaderWait    time.Duration
	timeout       time.Duration
	getenv        func(string) string
	remoteAllowed bool
	// sent records the op of the first change request sent (cliIO.sent).
	sent *atomic.Pointer[string]
	// waiting says on a terminal that a call waits for its answer (nil off one).
	waiting func(op string, timeout time.Duration)
	// last is a broker to dial only after the others: that of a control node
	// being removed, which stops, and takes with it the answer to a request that
	// went in through it.
	last string
}

func (f *controlPlaneFlags) register(c *cobra.Command, cio *cliIO) {
	fs := c.Flags()
	f.getenv = cio.getenv
	f.sent = cio.sent
	if cio.stderrIsTTY {
		stderr := cio.stderr
		f.waiting = func(op string, timeout time.Duration) {
			fmt.Fprintf(stderr, "meshctl: no answer to %s yet; waiting up to %s (--timeout). A leader that cannot reach a quorum of voters answers late or not at all: meshctl control status shows them\n", op, timeout)
		}
	}
	f.remoteAllowed = true
	fs.StringVar(&f.dir, "data", "", "data directory of a control node (or, on an operator's machine, --servers, --creds and --ca)")
	fs.StringSliceVar(&f.servers, "servers", nil, "broker addresses host:port, comma-separated or repeated (env "+envServers+"; with --data: instead of mesh.json's)")
	fs.StringVar(&f.creds, "creds", "", "operator credentials, a NATS .creds file (env "+envCreds+")")
	fs.StringVar(&f.ca, "ca", "", "the mesh CA certificate; brokers must prove it (env "+envCA+")")
	fs.StringVar(&f.context, "context", "", "a NATS CLI context (~/.config/nats/context/NAME.json: url, creds, ca) (env "+envContext+")")
	fs.DurationVar(&f.leaderWait, "leader-wait", operator.DefaultLeaderWait, "how long to wait while no control node serves the request (an election); 0 fails at once; at most 10m")
	fs.DurationVar(&f.timeout, "timeout", operator.DefaultTimeout, "how long each call waits for its answer once a control node took it (a read or a token creation is sent again meanwhile, after 2s, 4s, ...); 1s to 10m")
	_ = c.MarkFlagDirname("data")
	_ = c.MarkFlagFilename("creds", "creds")
	_ = c.MarkFlagFilename("ca", "pem", "crt")
}

// registerDataOnly registers the flags of a command that needs a control node's
// data directory itself (control tokens: the CA key is there).
func (f *controlPlaneFlags) registerDataOnly(c *cobra.Command, cio *cliIO) {
	f.register(c, cio)
	f.remoteAllowed = false
}

// options are the operator client's options the flags ask for.
func (f *controlPlaneFlags) options() (operator.Options, error) {
	if err := checkDuration("leader-wait", f.leaderWait, 0, maxLeaderWait, operator.DefaultLeaderWait); err != nil {
		return operator.Options{}, err
	}
	// Below a second, the timeout cut the connection itself short, and was
	// reported as a control plane that cannot be reached (exit 3).
	if err := checkDuration("timeout", f.timeout, minTimeout, maxTimeout, operator.DefaultTimeout); err != nil {
		return operator.Options{}, err
	}
	o := operator.Options{LeaderWait: f.leaderWait, Timeout: f.timeout, Waiting: f.waiting}
	if f.leaderWait == 0 {
		o.LeaderWait = -1 // negative there means do not wait
	}
	if sent := f.sent; sent != nil {
		o.Sending = func(op string) { sent.CompareAndSwap(nil, &op) }
	}
	return o, nil
}

// given is how the command line named the control plane, as flags (each followed
// by a blank) to repeat in a command a message suggests: one suggested without
// them failed as pasted (a walkthrough). What the environment gives, it gives
// again.
func (f *controlPlaneFlags) given() string {
	var b strings.Builder
	add := func(flag, v string) {
		if v != "" {
			b.WriteString(flag + " " + shellWord(v) + " ")
		}
	}
	add("--data", f.dir)
	add("--context", f.context)
	add("--servers", strings.Join(f.servers, ","))
	add("--creds", f.creds)
	add("--ca", f.ca)
	return b.String()
}

// remote reports whether the command line names the control plane by creds and CA
// rather than by a data directory.
func (f *controlPlaneFlags) remote() bool {
	return f.creds != "" || f.ca != "" || f.context != ""
}

// endpoint resolves where the control plane is and how to log in. A data directory
// is used as it is (--servers may replace its brokers). Otherwise each of servers,
// creds and CA comes from its flag, else the NATS context named by --context, else
// its environment variable, else the context named by MESH_CONTEXT. A --context
// given on the command line comes before the environment: after it, with
// MESH_SERVERS, MESH_CREDS and MESH_CA exported for one mesh, `--context other`
// was never read and the command changed the first mesh (a review: same node ids,
// the same CA pin for the set, nothing to refuse it).
func (f *controlPlaneFlags) endpoint() (operator.Endpoint, error) {
	if f.dir != "" {
		if f.remote() {
			return operator.Endpoint{}, usagef("--data uses the data directory's credentials and CA: give either --data or --creds/--ca/--context")
		}
		e, err := operator.DirEndpoint(datadir.Dir(f.dir), false)
		if err != nil {
			return e, err
		}
		if len(f.servers) > 0 {
			if e.Servers, err = operator.ParseServers(f.servers...); err != nil {
				return e, usagef("--servers: %v", err)
			}
		}
		return e, nil
	}
	servers, creds, ca := strings.Join(f.servers, ","), f.creds, f.ca
	fill := func(name, from string) error {
		if servers != "" && creds != "" && ca != "" {
			return nil
		}
		ctx, err := operator.LoadContext(name, f.getenv)
		var fe *operator.InputFileError
		if errors.As(err, &fe) {
			fe.Flag = from // the context file's own faults name where it was given
		}
		if err != nil {
			return err
		}
		servers = orElse(servers, ctx.URL)
		creds = orElse(creds, ctx.Creds)
		ca = orElse(ca, ctx.CA)
		return nil
	}
	if f.context != "" {
		if err := fill(f.context, "--context"); err != nil {
			return operator.Endpoint{}, err
		}
	}
	if servers == "" {
		servers = f.getenv(envServers)
	}
	// From the environment, ~/ is expanded as in a context (an Environment=
	// line or a .env file does not expand it, as a shell does), and a fault of
	// the file is named by its variable, not by a flag never given (a
	// walkthrough).
	credsFrom, caFrom := "", ""
	if creds == "" {
		if creds = operator.ExpandHome(f.getenv(envCreds), f.getenv); creds != "" {
			credsFrom = envCreds
		}
	}
	if ca == "" {
		if ca = operator.ExpandHome(f.getenv(envCA), f.getenv); ca != "" {
			caFrom = envCA
		}
	}
	if name := f.getenv(envContext); f.context == "" && name != "" {
		if err := fill(name, envContext); err != nil {
			return operator.Endpoint{}, err
		}
	}
	if servers == "" && creds == "" && ca == "" {
		if !f.remoteAllowed {
			return operator.Endpoint{}, usagef("--data is required")
		}
		return operator.Endpoint{}, usagef("say which control plane: --data DIR on a control node; elsewhere --servers, --creds and --ca (or %s, %s, %s, or --context NAME)", envServers, envCreds, envCA)
	}
	if !f.remoteAllowed {
		return operator.Endpoint{}, usagef("this needs a control node's data directory (--data), not operator credentials")
	}
	var missing []string
	for _, m := range []struct{ v, name string }{{servers, "--servers (" + envServers + ")"}, {creds, "--creds (" + envCreds + ")"}, {ca, "--ca (" + envCA + ")"}} {
		if m.v == "" {
			missing = append(missing, m.name)
		}
	}
	if len(missing) > 0 {
		return operator.Endpoint{}, usagef("an operator's machine needs the broker addresses, the .creds file and the mesh CA; missing: %s", strings.Join(missing, ", "))
	}
	list, err := operator.ParseServers(servers)
	if err != nil {
		return operator.Endpoint{}, usagef("servers: %v", err)
	}
	e, err := operator.CAEndpoint(list, creds, ca)
	var fe *operator.InputFileError
	if errors.As(err, &fe) {
		switch {
		case fe.Flag == "--creds" && credsFrom != "" && fe.Path == creds:
			fe.Flag = credsFrom
		case fe.Flag == "--ca" && caFrom != "" && fe.Path == ca:
			fe.Flag = caFrom
		}
	}
	return e, err
}

// orElse is a unless it is empty, else b.
func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// dial connects to the control plane the flags name.
func (f *controlPlaneFlags) dial() (*operator.Client, error) {
	o, err := f.options()
	if err != nil {
		return nil, err
	}
	e, err := f.endpoint()
	if err != nil {
		return nil, err
	}
	e.Servers = lastOf(e.Servers, f.last)
	return operator.DialEndpoint(e, o)
}

// lastOf is servers with last, however written (an IPv6 address in another form),
// moved to the end, the others in their order; servers as they are when last is
// not among them or is "".
func lastOf(servers []string, last string) []string {
	want, err := netip.ParseAddrPort(last)
	if err != nil {
		return servers
	}
	var front, back []string
	for _, s := range servers {
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Unmap() == want.Addr().Unmap() && ap.Port() == want.Port() {
			back = append(back, s)
		} else {
			front = append(front, s)
		}
	}
	return append(front, back...)
}

// call runs one operator API call.
func (f *controlPlaneFlags) call(op string, req, res any) error {
	c, err := f.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(op, req, res)
}

// completionTimeout bounds the call a completion makes: a shell must not hang.
const completionTimeout = 2 * time.Second

// completionClient is a client for completions: it does not wait for a leader and
// gives up after completionTimeout, so a shell never hangs on a tab.
func (f *controlPlaneFlags) completionClient() (*operator.Client, error) {
	e, err := f.endpoint()
	if err != nil {
		return nil, err
	}
	return operator.DialEndpoint(e, operator.Options{LeaderWait: -1, Timeout: completionTimeout})
}

// nodeNames lists the node ids the control plane knows, for shell completion; it
// fails silently (no candidates) when the control plane cannot answer at once. The
// whole of it is bounded by completionTimeout: the dial's timeout is each broker's,
// and a tab hung 4 s a broker that accepts and never answers (a walkthrough).
func (f *controlPlaneFlags) nodeNames(which nodeChoice) []string {
	done := make(chan []string, 1)
	go func() { done <- f.nodeNamesNow(which) }()
	t := time.NewTimer(completionTimeout)
	defer t.Stop()
	select {
	case names := <-done:
		return names
	case <-t.C:
		return nil // the call goes on, and ends with the process
	}
}

// nodeChoice is which nodes a completion offers.
type nodeChoice int

const (
	// everyNode: the hosts, revoked ones too (nodes, status: a revoked node's
	// record is worth reading).
	everyNode nodeChoice = iota
	// nodesNotRevoked: the hosts a change can still reach (label, declare, revoke:
	// a revoked node offered there was refused, a docs walkthrough).
	nodesNotRevoked
	// controlNodes: the control nodes.
	controlNodes
)

// nodeNamesNow is nodeNames without its bound.
func (f *controlPlaneFlags) nodeNamesNow(which nodeChoice) []string {
	c, err := f.completionClient()
	if err != nil {
		return nil
	}
	defer c.Close()
	res, err := c.Nodes(api.NodesRequest{})
	if err != nil {
		return nil
	}
	return nodeCompletions(res, which)
}

// nodeCompletions are the candidates of which in res, each host's with its role
// and state.
func nodeCompletions(res api.NodesResult, which nodeChoice) []string {
	var names []string
	if which == controlNodes {
		for _, n := range res.Control {
			names = append(names, n.ID)
		}
		return names
	}
	for _, n := range res.Nodes {
		if which == nodesNotRevoked && n.State == api.StateRevoked {
			continue
		}
		names = append(names, n.ID+"\t"+n.Role+", "+n.State)
	}
	return names
}

// completeNodes completes positional arguments with the ids of which nodes, at most
// max of them (0: any number).
func (f *controlPlaneFlags) completeNodes(max int, which nodeChoice) cobra.CompletionFunc {
	return func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f.nodeNames(which), cobra.ShellCompDirectiveNoFileComp
	}
}
