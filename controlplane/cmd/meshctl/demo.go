package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/host/agent"
	"mesh/host/enrol"
	"mesh/host/identity"
	"mesh/tokenfmt"
)

func demoCommand() command {
	return command{
		name:       "demo",
		ownSignals: true,
		usage:      "[--keep] [--dir DIR] [--verbose]",
		summary: `Run a whole mesh on loopback in a temporary directory and narrate each step.
Bootstrap, serve, mint a token, enrol a host, run its agent, declare a file, watch it
converge, refuse an impostor broker, refuse a login relayed by something holding the
mesh's own certificate, revoke the node. Everything is real: the embedded
nats-server with TLS, Raft on disk, signed declarations.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var (
				keep, verbose bool
				dir           string
			)
			fs.BoolVar(&keep, "keep", false, "keep the temporary directory afterwards")
			fs.StringVar(&dir, "dir", "", "use this directory instead of a temporary one (must not exist or be empty; what the demo wrote there is removed afterwards unless --keep)")
			fs.BoolVar(&verbose, "verbose", false, "also show the control plane's and the agent's logs")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if err := refuseToken("--dir", dir); err != nil {
					return err
				}
				if dir != "" {
					// The demo removes what it wrote afterwards: a directory that holds
					// anything already is refused, so that nothing else goes with it.
					entries, err := os.ReadDir(dir)
					if err != nil && !errors.Is(err, os.ErrNotExist) {
						return usagef("--dir %s: %v", dir, err)
					}
					if len(entries) > 0 {
						return usagef("--dir %s is not empty: give a directory that does not exist or is empty (the demo removes what it wrote there afterwards)", dir)
					}
				}
				// SIGINT ends it as the two minutes do: what it started stops, and what
				// it wrote is removed (unless --keep).
				sctx, stop := signalContext()
				defer stop()
				ctx, cancel := context.WithTimeout(sctx, 2*time.Minute)
				defer cancel()
				return demoIn(sctx, cio.stdout, dir, keep, func(dir string) error { return runDemo(ctx, cio.stdout, dir, verbose) })
			}
		},
	}
}

type narrator struct {
	w     io.Writer
	n     int
	start time.Time
}

func (n *narrator) chapter(format string, args ...any) {
	n.n++
	fmt.Fprintf(n.w, "\n== %d. %s\n", n.n, fmt.Sprintf(format, args...))
}

func (n *narrator) say(format string, args ...any) {
	fmt.Fprintf(n.w, "   %s\n", fmt.Sprintf(format, args...))
}

// indent prefixes every line written through it, for output of the real commands.
type indent struct {
	w   io.Writer
	mid bool // inside a line: the prefix is already written
}

func (i *indent) Write(p []byte) (int, error) {
	for _, part := range strings.SplitAfter(string(p), "\n") {
		if part == "" {
			continue
		}
		if !i.mid {
			if _, err := io.WriteString(i.w, "   | "); err != nil {
				return 0, err
			}
		}
		if _, err := io.WriteString(i.w, part); err != nil {
			return 0, err
		}
		i.mid = !strings.HasSuffix(part, "\n")
	}
	return len(p), nil
}

// demoIn runs the demo in dir (a new temporary directory when dir is empty) and then,
// unless keep, removes the directory: also when a signal stopped the demo and it did
// not return within the grace, since the directory holds the demo mesh's CA key and
// an exit without its removal left that in the temporary directory for good.
func demoIn(sctx context.Context, out io.Writer, dir string, keep bool, run func(dir string) error) (err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", "mesh-demo-"); err != nil {
			return err
		}
	}
	err = interruptible(sctx, func() error { return run(dir) })
	if keep {
		fmt.Fprintf(out, "\neverything is kept in %s\n", dir)
		return err
	}
	if rmErr := removeDemoDir(dir); rmErr != nil {
		return errors.Join(err, fmt.Errorf("could not remove the demo's directory: %w; remove it by hand (it holds the demo mesh's CA key)", rmErr))
	}
	return err
}

// removeDemoDir removes dir, trying again a few times: a demo that did not stop in
// time may still be writing into it while it goes.
func removeDemoDir(dir string) (err error) {
	for range 5 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func runDemo(ctx context.Context, out io.Writer, dir string, verbose bool) (err error) {
	n := &narrator{w: out, start: time.Now()}
	logOut := io.Discard
	if verbose {
		logOut = &indent{w: out}
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelInfo}))

	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	cpDir := datadir.Dir(filepath.Join(dir, "cp"))
	hostState := filepath.Join(dir, "web-1")
	root := filepath.Join(hostState, "managed")

	n.chapter("bootstrap: create mesh \"demo\" with its broker on %s (meshctl bootstrap)", listen)
	if err := bootstrap.Run(bootstrap.Options{
		Mesh: "demo", Listen: listen, RaftListen: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[2]), Dir: cpDir, Out: &indent{w: out},
	}); err != nil {
		return err
	}

	n.chapter("serve: start the control plane: Raft (one voter), embedded nats-server with TLS (meshctl serve)")
	fast := replication.Timeouts{Heartbeat: 300 * time.Millisecond, Election: 300 * time.Millisecond, LeaderLease: 150 * time.Millisecond, Commit: 20 * time.Millisecond}
	d, err := daemon.Open(ctx, daemon.Options{Dir: cpDir, Logger: log, Timeouts: fast, ReconcileInterval: 2 * time.Second})
	if err != nil {
		return err
	}
	defer d.Close()
	dctx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	go d.Run(dctx)
	n.say("control node cp-1 is the Raft leader; the broker accepts TLS (handshake first) on %s", d.BrokerAddr())

	n.chapter("token: the operator mints a one-time token for node web-1, valid 15 minutes (meshctl token)")
	op, err := operator.Dial(cpDir, operator.Options{})
	if err != nil {
		return err
	}
	defer op.Close()
	tok, err := op.MintToken("web-1", tokenfmt.RoleWorker, 15*time.Minute, nil)
	if err != nil {
		return err
	}
	text := tok.Encode()
	n.say("%s", tok) // redacted: a token is a credential, even in a demo
	n.say("it carries the broker address, the CA pin, the signing key and a 256-bit secret (shown redacted)")
	n.say("the mesh stored only the secret's hash; the token travels to the new machine out of band")

	n.chapter("enrol: on the new machine, the person pastes the token (meshhost enrol)")
	if _, err := enrol.Enrol(ctx, enrol.Options{StateDir: hostState, Token: text, Out: &indent{w: out}, Agent: demoAgent()}); err != nil {
		return err
	}

	n.chapter("run: the agent connects as web-1 and keeps the managed root in line (meshhost run)")
	a, err := agent.New(agent.Options{StateDir: hostState, Agent: demoAgent(), Root: root, Logger: log, Heartbeat: time.Second})
	if err != nil {
		return err
	}
	agentDone := make(chan error, 1)
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	go func() { agentDone <- a.Run(actx) }()
	n.say("managed root: %s", root)

	n.chapter("declare: the operator declares web-1's whole state: one file (meshctl declare)")
	body := []byte(`{"files":[{"path":"etc/motd","content":"welcome to web-1, managed by the mesh\n","mode":"0644"}]}`)
	n.say("body: %s", body)
	var dres api.DeclareResult
	if err := op.Call(api.OpDeclare, api.DeclareRequest{Nodes: []string{"web-1"}, Body: body}, &dres); err != nil {
		return err
	}
	n.say("committed through Raft as web-1 v%d, signed with the mesh's Ed25519 key, published to web-1's subject", dres.Assignments[0].Version)

	n.chapter("converge: the agent verified signature, audience, version and validity, applied, reported back (meshctl nodes)")
	var nodes api.NodesResult
	if err := waitFor(ctx, 20*time.Second, func() bool {
		var err error
		if nodes, err = op.Nodes(api.NodesRequest{}); err != nil {
			return false
		}
		return len(nodes.Nodes) == 1 && nodes.Nodes[0].Converged && nodes.Nodes[0].Declared == dres.Assignments[0].Version
	}); err != nil {
		return fmt.Errorf("web-1 did not converge: %w", err)
	}
	printNodes(&indent{w: out}, nodes, time.Now(), false)
	content, err := os.ReadFile(filepath.Join(root, "etc", "motd"))
	if err != nil {
		return err
	}
	n.say("%s now holds: %q", filepath.Join(root, "etc", "motd"), content)

	n.chapter("impostor: something else answers at a broker address, with a CA of its own")
	imp, err := startImpostor(ctx, fmt.Sprintf("127.0.0.1:%d", ports[3]))
	if err != nil {
		return err
	}
	defer imp.srv.Shutdown()
	n.say("a real nats-server with another CA listens on %s and accepts any credential", imp.srv.Addr())
	forged := tok
	forged.Node = "web-2"
	forged.Brokers = []netip.AddrPort{netip.MustParseAddrPort(imp.srv.Addr())}
	if _, err := rand.Read(forged.Secret[:]); err != nil {
		return err
	}
	impState := filepath.Join(dir, "web-2")
	_, err = enrol.Enrol(ctx, enrol.Options{StateDir: impState, Token: forged.Encode(), Out: &indent{w: out}})
	if !errors.Is(err, enrol.ErrSubstituted) {
		return fmt.Errorf("the impostor was not refused as a substitution: %v", err)
	}
	_, inBytes, _ := imp.srv.Traffic()
	_, idErr := identity.Load(impState)
	n.say("refused: %v", err)
	n.say("application bytes the impostor received: %d; credentials it saw: %d; identity saved: %v",
		inBytes, imp.attempts.Load(), !errors.Is(idErr, identity.ErrNotEnrolled))

	n.chapter("relay: something on the path holds a certificate of the mesh itself (a removed control node, say)")
	rel, err := startLeafRelay(cpDir, fmt.Sprintf("127.0.0.1:%d", ports[4]), d.BrokerAddr())
	if err != nil {
		return err
	}
	defer rel.ln.Close()
	n.say("it listens on %s with cp-1's own leaf, so it passes the pin check, and relays to the real broker", rel.ln.Addr())
	tok3, err := op.MintToken("web-3", tokenfmt.RoleWorker, 15*time.Minute, nil)
	if err != nil {
		return err
	}
	relayed := tok3
	relayed.Brokers = []netip.AddrPort{netip.MustParseAddrPort(rel.ln.Addr().String())}
	_, err = enrol.Enrol(ctx, enrol.Options{StateDir: filepath.Join(dir, "web-3"), Token: relayed.Encode(), Out: &indent{w: out}})
	var refused *enrol.RefusedError
	if !errors.As(err, &refused) {
		return fmt.Errorf("the enrolment through the relay was not refused by the mesh: %v", err)
	}
	read := rel.read()
	n.say("meshhost enrol: refused (%s)", refused.Code)
	n.say("the mesh refused the relayed login: the node key signed the nonce bound to its own TLS session, not the relay's")
	n.say("bytes the relay read in clear: %d; the token's secret among them: %v (the host proved the secret, it did not send it)",
		len(read), strings.Contains(strings.ToLower(string(read)), hex.EncodeToString(tok3.Secret[:])))

	n.chapter("revoke: the operator revokes web-1 (meshctl revoke)")
	var rres api.RevokeResult
	if err := op.Call(api.OpRevoke, api.RevokeRequest{Node: "web-1"}, &rres); err != nil {
		return err
	}
	if len(rres.Revoked) != 1 {
		return fmt.Errorf("revoke answered %+v", rres)
	}
	n.say("revoked: web-1 held %d connection(s); the brokers close them after the signed notice", rres.Revoked[0].Connections)
	select {
	case err := <-agentDone:
		n.say("the agent stopped: %v", err)
	case <-time.After(10 * time.Second):
		return errors.New("the agent did not stop after its revocation")
	}
	// Started again, as after a reboot: the broker lets the revoked key in only to
	// hear, signed, that it was revoked; a bare refusal would not stop the agent.
	again, err := agent.New(agent.Options{StateDir: hostState, Agent: demoAgent(), Root: root, Logger: log, Heartbeat: time.Second})
	if err != nil {
		return err
	}
	againCtx, stopAgain := context.WithTimeout(ctx, 10*time.Second)
	defer stopAgain()
	if err := again.Run(againCtx); errors.Is(err, agent.ErrRevoked) {
		n.say("the agent started again with the revoked key: stopped on the signed notice (%v)", err)
	} else {
		return fmt.Errorf("the agent started again with the revoked key did not stop on a signed notice: %v", err)
	}
	if nodes, err = op.Nodes(api.NodesRequest{}); err == nil {
		printNodes(&indent{w: out}, nodes, time.Now(), false)
	}

	fmt.Fprintf(out, "\nthe whole story took %s on loopback. The same commands on two machines:\n", time.Since(n.start).Round(100*time.Millisecond))
	fmt.Fprintln(out, "   control:  meshctl bootstrap --mesh demo --listen IP:7300 --data ./cp && meshctl serve --data ./cp")
	fmt.Fprintln(out, "   operator: meshctl token --data ./cp --node web-1 --ttl 15m --out token.txt   (carry it to the machine)")
	fmt.Fprintln(out, "   machine:  meshhost enrol --state ./h1 < token.txt && meshhost run --state ./h1 --root ./managed")
	return nil
}

type impostor struct {
	srv      *broker.Server
	attempts atomic.Int64
}

// Authenticate accepts anyone: an impostor wants the credentials.
func (i *impostor) Authenticate(broker.Client) (broker.Grant, error) {
	i.attempts.Add(1)
	return broker.Grant{User: "victim", Account: broker.AccountControl, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

func startImpostor(ctx context.Context, addr string) (*impostor, error) {
	ca, _, err := pki.NewCA("impostor", time.Now())
	if err != nil {
		return nil, err
	}
	ip := net.ParseIP(strings.Split(addr, ":")[0])
	leaf, err := ca.IssueLeaf("impostor", []net.IP{ip}, time.Now())
	if err != nil {
		return nil, err
	}
	cfg, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		return nil, err
	}
	imp := &impostor{}
	imp.srv, err = broker.Start(ctx, broker.Config{Name: "impostor", Mesh: "impostor", Listen: addr, TLS: cfg, Auth: imp, Logger: slog.New(slog.DiscardHandler)})
	return imp, err
}

// leafRelay stands for a removed control node on a host's path: it holds the mesh's
// own leaf, ends the host's TLS session, opens its own to the real broker and relays
// the NATS protocol both ways, reading what the host sends.
type leafRelay struct {
	ln   net.Listener
	mu   sync.Mutex
	sent []byte
}

func startLeafRelay(dir datadir.Dir, listen, target string) (*leafRelay, error) {
	leaf, err := dir.LoadLeaf()
	if err != nil {
		return nil, err
	}
	caPEM, err := dir.ReadFile(datadir.CACertFile)
	if err != nil {
		return nil, err
	}
	cfg, err := pki.ServerConfig(leaf, caPEM)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", listen, cfg)
	if err != nil {
		return nil, err
	}
	r := &leafRelay{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.relay(c, target)
		}
	}()
	return r, nil
}

func (r *leafRelay) relay(c net.Conn, target string) {
	defer c.Close()
	up, err := tls.Dial("tcp", target, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the attacker's side
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			r.mu.Lock()
			r.sent = append(r.sent, buf[:k]...)
			r.mu.Unlock()
			if _, werr := up.Write(buf[:k]); err != nil || werr != nil {
				up.Close()
				return
			}
		}
	}()
	_, _ = io.Copy(c, up)
}

func (r *leafRelay) read() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.sent...)
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// demoAgent is what the demo's agent, built into meshctl, names itself to the mesh:
// meshhost of this build, as the AGENT column of meshctl nodes shows it.
func demoAgent() string { return enrol.Agent(readVersion("meshctl").Version) }
