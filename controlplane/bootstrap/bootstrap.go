// Package bootstrap creates a mesh on its first control node: it prints its plan, runs
// the checks first, then the irreversible steps (CA, keys, Raft), each skipped when a
// previous run already did it. Running it again resumes; it never makes a second CA,
// so the pin in tokens already handed out stays valid.
package bootstrap

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/host/busyaddr"
	"mesh/tokenfmt"
)

// Options are bootstrap's inputs.
type Options struct {
	Mesh string
	// Node is this control node's id; default "cp-1".
	Node string
	// Listen is the broker's client address; Advertise is the address tokens carry
	// (default: Listen, which then must not be a wildcard address).
	Listen    string
	Advertise string
	// RaftListen and ClusterListen default to Listen's IP with the port plus 1 and 2.
	RaftListen    string
	ClusterListen string
	Dir           datadir.Dir
	DryRun        bool
	Out           io.Writer
	Now           func() time.Time
}

// ErrConflict means the data directory holds something bootstrap will not touch.
var ErrConflict = errors.New("bootstrap conflict")

// JoinedError means the data directory belongs to a control node that joined a mesh
// (`meshctl join`, finished or not): bootstrap creates meshes and has nothing to do
// or resume there. It matches ErrConflict.
type JoinedError struct {
	Dir      datadir.Dir
	Mesh     string
	Node     string
	CAHolder string // the node holding the CA key, when recorded
	// Incomplete: the join has not completed.
	Incomplete bool
}

func (e *JoinedError) Error() string {
	if e.Incomplete && e.Node == "" {
		return fmt.Sprintf("%v: %s holds the start of a `meshctl join` (%s) that has not completed; there is nothing to bootstrap or resume here. Finish the join with `meshctl join --data %s` and the same token; to create a new mesh, use an empty --data directory",
			ErrConflict, e.Dir, datadir.JoinPendingFile, e.Dir)
	}
	if e.Incomplete {
		return fmt.Sprintf("%v: %s holds control node %s of mesh %s, whose `meshctl join` has not completed; it was not bootstrapped, so there is nothing to bootstrap or resume here. Finish the join with `meshctl join --data %s` and the same token; to create a new mesh, use an empty --data directory",
			ErrConflict, e.Dir, e.Node, e.Mesh, e.Dir)
	}
	// Said as what this directory recorded: the holder, and the node itself, may
	// have been removed since (a walkthrough: "the CA key is on cp-1" and "start
	// it with serve" after both were removed).
	holder := ""
	if e.CAHolder != "" && e.CAHolder != e.Node {
		holder = fmt.Sprintf(" (when it joined, the CA key was on %s; meshctl nodes marks where it is now)", e.CAHolder)
	}
	return fmt.Sprintf("%v: %s holds control node %s of mesh %s, which joined the mesh with `meshctl join`%s; it was not bootstrapped, so there is nothing to bootstrap or resume here. If meshctl nodes still lists %s, start it with `meshctl serve --data %s`; to create a new mesh, use an empty --data directory",
		ErrConflict, e.Dir, e.Node, e.Mesh, holder, e.Node, e.Dir)
}

// Is makes errors.Is(err, ErrConflict) hold.
func (e *JoinedError) Is(target error) bool { return target == ErrConflict }

// ErrServed means the data directory is that of a control node that served (its
// mesh.json records it) and whose Raft state is lost or damaged: bootstrapping it again would
// make a new, empty Raft cluster with the mesh's CA and keys. A *ServedError
// matches it, and ErrConflict.
var ErrServed = errors.New("this control node served, and its Raft state is lost or damaged")

// ServedError refuses the raft step in the data directory of a control node that
// served: every host, declaration, revocation and token of the mesh is in its Raft
// state, and a new cluster would forget them all while hosts still trust its CA.
type ServedError struct {
	Dir  datadir.Dir
	Mesh string
	Node string
	// HoldsCAKey: the directory holds the CA key and the operator account key,
	// which a new control token is minted with.
	HoldsCAKey bool
}

func (e *ServedError) Error() string {
	keys := ""
	if e.HoldsCAKey {
		keys = fmt.Sprintf(" (copy %s and %s from here first, mode 0600, into a running control node's data directory: control tokens are minted where they are)",
			datadir.CAKeyFile, datadir.AccountKeyFile)
	}
	return fmt.Sprintf("%v: control node %s of mesh %s served from %s (mesh.json records \"served\": true), and its Raft store %s is lost or damaged (`meshctl serve --data %s` says how). "+
		"Bootstrapping it again would make a new, empty Raft cluster with this mesh's CA and keys, which hosts still trust: every host, declaration, revocation and token would be forgotten. "+
		"Nothing was changed. Restore this data directory from a backup (one serve --backup-dir took, or a copy taken while serve was stopped; docs/operations.md, \"Backing up\"); "+
		"or, if other control nodes run with a quorum, remove this one (`meshctl control remove %s` on another) and `meshctl join` it again with a new control token on a fresh data directory%s "+
		"(\"A damaged Raft store\"); or, if too few voters are left for a quorum, recover the control plane from the survivors (\"Recovering from lost quorum\"). "+
		"To create a new mesh, use an empty --data directory",
		ErrConflict, e.Node, e.Mesh, e.Dir, e.Dir.Path(datadir.RaftDir), e.Dir, e.Node, keys)
}

// Is makes errors.Is(err, ErrServed) and errors.Is(err, ErrConflict) hold.
func (e *ServedError) Is(target error) bool { return target == ErrServed || target == ErrConflict }

// OptionError is a bootstrap option that cannot be used; nothing was changed.
type OptionError struct {
	Flag   string
	Reason string
}

func (e *OptionError) Error() string { return e.Flag + ": " + e.Reason }

func optionError(flag, format string, args ...any) error {
	return &OptionError{Flag: flag, Reason: fmt.Sprintf(format, args...)}
}

// idReason is a short reason for an invalid id, without the token vocabulary.
func idReason(err error) string {
	var fe *tokenfmt.FieldError
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return err.Error()
}

// step is one line of the plan.
type step struct {
	kind  string
	what  string
	done  func() bool // already carried out by an earlier run
	run   func() (string, error)
	check bool // a check: runs every time, changes nothing
}

// Run prints the plan and, unless DryRun, carries it out.
func Run(o Options) error {
	_, err := RunContext(context.Background(), o)
	return err
}

// Outcome is what a run found: whether an earlier run had bootstrapped the mesh
// whole, and this one did nothing.
type Outcome struct {
	AlreadyBootstrapped bool
}

// RunContext is Run, stopping between steps once ctx ends (SIGINT or SIGTERM): every
// step is whole or not begun, so running bootstrap again resumes. It holds the data
// directory's lock throughout, and refuses at once a directory another process holds.
func RunContext(ctx context.Context, o Options) (Outcome, error) {
	if err := o.defaults(); err != nil {
		return Outcome{}, err
	}
	b := &run{o: o}
	lock, err := b.lock()
	if err != nil {
		return Outcome{}, err
	}
	defer lock.Release()
	return b.carryOut(ctx)
}

// carryOut prints the plan and carries it out, under the data directory's lock.
func (b *run) carryOut(ctx context.Context) (Outcome, error) {
	o := b.o
	steps := b.plan()
	fmt.Fprintf(o.Out, "bootstrap mesh %q in %s (control node %s)\nplan:\n", o.Mesh, o.Dir, o.Node)
	for i, s := range steps {
		mark := ""
		if !s.check && s.done() {
			mark = "  (already done: skipped)"
		}
		fmt.Fprintf(o.Out, "  %d. %-9s %s%s\n", i+1, s.kind, s.what, mark)
	}
	if o.DryRun {
		return Outcome{}, b.dryRun(steps)
	}
	if b.complete() {
		// What the first run said, again: the pin and what to keep safe are what a
		// run again is most often for.
		fmt.Fprintf(o.Out, "mesh %s is already bootstrapped in %s; nothing to do.\n", o.Mesh, o.Dir)
		b.summary()
		return Outcome{AlreadyBootstrapped: true}, nil
	}
	fmt.Fprintln(o.Out, "running:")
	checksOnly := true // no step but checks has run yet
	for i, s := range steps {
		if ctx.Err() != nil {
			fmt.Fprintf(o.Out, "  %d. %-9s not begun: interrupted\n", i+1, s.kind)
			if checksOnly {
				b.unmake()
			}
			return Outcome{}, fmt.Errorf("%w before step %d (%s) began\nthe steps before it are done; run bootstrap again to resume", context.Cause(ctx), i+1, s.kind)
		}
		if !s.check && s.done() {
			fmt.Fprintf(o.Out, "  %d. %-9s already done\n", i+1, s.kind)
			continue
		}
		checksOnly = checksOnly && s.check
		note, err := s.run()
		if err != nil {
			fmt.Fprintf(o.Out, "  %d. %-9s FAILED\n", i+1, s.kind)
			if checksOnly {
				b.unmake()
				return Outcome{}, fmt.Errorf("step %d (%s): %w\nnothing was written; fix the cause and run bootstrap again", i+1, s.kind, err)
			}
			return Outcome{}, fmt.Errorf("step %d (%s): %w\nnothing after this step was done; fix the cause and run bootstrap again to resume", i+1, s.kind, err)
		}
		fmt.Fprintf(o.Out, "  %d. %-9s ok%s\n", i+1, s.kind, note)
	}
	fmt.Fprintf(o.Out, "mesh %s is bootstrapped.\n", o.Mesh)
	b.summary()
	return Outcome{}, nil
}

// summary is what a finished bootstrap says: the pin, the credentials, what to keep
// safe and what to run next.
func (b *run) summary() {
	o := b.o
	fmt.Fprintf(o.Out, "  CA pin:            sha256:%s\n  operator creds:    %s\n  keep safe offline: %s and %s (only this machine can mint control tokens)\nnext: meshctl serve --data %s\n",
		b.cfg.CAPin, o.Dir.Path(datadir.AdminCredsFile), o.Dir.Path(datadir.CAKeyFile), o.Dir.Path(datadir.AccountKeyFile), o.Dir)
}

// dryRun runs the checks of the plan, which change nothing, and says ok or FAILED
// for each, as the real run would: a dry run that skipped them said yes to a port in
// use or an address not on this machine, and the real run then failed. A bootstrap
// already complete needs no checks (the real run does nothing), and its serve would
// hold the ports.
func (b *run) dryRun(steps []step) error {
	out := b.o.Out
	if !b.complete() {
		fmt.Fprintln(out, "checking (a dry run runs the checks only):")
		for i, s := range steps {
			if !s.check {
				continue
			}
			note, err := s.run()
			if err != nil {
				fmt.Fprintf(out, "  %d. %-9s FAILED\n", i+1, s.kind)
				return fmt.Errorf("step %d (%s): %w\ndry run: nothing was changed; fix the cause and run it again", i+1, s.kind, err)
			}
			fmt.Fprintf(out, "  %d. %-9s ok%s\n", i+1, s.kind, note)
		}
	}
	fmt.Fprintln(out, "dry run: nothing was changed")
	return nil
}

func (o *Options) defaults() error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Node == "" {
		o.Node = "cp-1"
	}
	if o.Dir == "" {
		return optionError("--data", "is required")
	}
	if err := tokenfmt.ValidateMeshID(o.Mesh); err != nil {
		return optionError("--mesh", "%s", idReason(err))
	}
	if err := tokenfmt.ValidateNodeID(o.Node); err != nil {
		return optionError("--node", "%s", idReason(err))
	}
	// Said first: it is what a wildcard --listen lacks above all.
	if listen, err := netip.ParseAddrPort(o.Listen); err == nil && listen.Addr().IsUnspecified() && o.Advertise == "" {
		more := ""
		if o.RaftListen == "" || o.ClusterListen == "" {
			// Named now: each was asked for by a run of its own (a newcomer's audit).
			more = ", and --raft-listen and --cluster-listen, the concrete addresses the other control nodes reach this one's Raft and routes at"
		}
		return optionError("--listen", "%s is a wildcard address; give --advertise ip:port, the address hosts will dial%s", o.Listen, more)
	}
	// All three before the data directory is touched: they are recorded in mesh.json
	// and the Raft configuration for good, and serve listens on each.
	addrs, err := CheckAddresses(o.Listen, o.RaftListen, o.ClusterListen, ListenFlags(), true)
	if err != nil {
		return err
	}
	if o.RaftListen == "" {
		o.RaftListen = addrs.Raft.String()
	}
	if o.ClusterListen == "" {
		o.ClusterListen = addrs.Cluster.String()
	}
	advertiseFlag := "--advertise"
	if o.Advertise == "" {
		o.Advertise, advertiseFlag = o.Listen, "--listen"
	}
	adv, err := netip.ParseAddrPort(o.Advertise)
	if err != nil || adv.Addr().IsUnspecified() {
		return optionError("--advertise", "%q must be a concrete ip:port hosts can dial", o.Advertise)
	}
	// Every token carries it: one no token takes (a zone, IPv4 written as IPv6,
	// not in canonical form) made every mint fail, each leaving a pending token
	// whose secret nobody held (a review).
	if err := tokenfmt.CheckAddress(o.Advertise); err != nil {
		return optionError(advertiseFlag, "%v: give the ip:port hosts dial, as a token carries it", err)
	}
	return nil
}

type run struct {
	o   Options
	cfg datadir.Config
	ca  *pki.CA
	// made is what this run created to hold its lock: the lock file, and the
	// directory itself when it did not exist. A check that fails before anything
	// else is written takes them away again.
	madeLock, madeDir bool
}

// unmake removes the lock file and directory this run made, when a check failed
// before anything else was written: "nothing is created if one fails". The lock
// is still held; removing its file does not release it.
func (b *run) unmake() {
	if b.madeLock {
		_ = os.Remove(b.o.Dir.Path(datadir.LockFile))
	}
	if b.madeDir {
		_ = os.Remove(string(b.o.Dir)) // only if empty
	}
}

// lock takes the data directory's lock and reads what an earlier run left. A lock
// file is created only in a directory bootstrap may use, never in one it refuses; a
// dry run creates nothing, and takes the lock only if the file exists.
func (b *run) lock() (*datadir.Lock, error) {
	command := "meshctl bootstrap"
	if b.o.DryRun {
		command += " --dry-run"
	}
	// Before anything is written: the CA key goes where no other user could
	// swap the directory, or a link on the way to it.
	if err := b.o.Dir.CheckPlace(); err != nil {
		return nil, err
	}
	lock, err := b.o.Dir.LockExisting(command)
	if err != nil {
		return nil, err
	}
	if err := b.loadPrevious(); err != nil {
		lock.Release()
		return nil, err
	}
	if lock != nil || b.o.DryRun {
		return lock, nil
	}
	if _, err := os.Stat(string(b.o.Dir)); errors.Is(err, fs.ErrNotExist) {
		b.madeDir = true
	}
	// A read-only file system, a parent this user may not write or a full disk is
	// the directory's place, said as the lock says it of one that exists (exit 7).
	if err := b.o.Dir.Make(); err != nil {
		return nil, err
	}
	if lock, err = b.o.Dir.Lock(command); err != nil {
		if b.madeDir && !errors.Is(err, datadir.ErrInUse) {
			// No room for the lock's record (a full disk): the directory this run
			// made, and the empty lock file in it, are not left behind.
			b.madeLock = true
			b.unmake()
		}
		return nil, err
	}
	b.madeLock = true
	// Read again under the lock: another process may have used the directory since.
	if err := b.loadPrevious(); err != nil {
		lock.Release()
		return nil, err
	}
	return lock, nil
}

// loadPrevious reads what an earlier run left, and refuses a directory that holds
// another mesh or unrelated files.
func (b *run) loadPrevious() error {
	d := b.o.Dir
	if err := d.CheckNotRemoved(); err != nil {
		return err
	}
	if d.Exists(datadir.ConfigFile) {
		cfg, err := readConfigLoose(d)
		if err != nil {
			return err
		}
		if cfg.JoinedNode() {
			return &JoinedError{Dir: d, Mesh: cfg.Mesh, Node: cfg.Node, CAHolder: cfg.CAHolder, Incomplete: cfg.Joining}
		}
		if cfg.Mesh != b.o.Mesh {
			return fmt.Errorf("%w: %s already holds mesh %q; use another --data directory", ErrConflict, d, cfg.Mesh)
		}
		// The Raft and cluster addresses too: a run given others resumed, or said
		// "nothing to do", with the recorded ones, and the node served where the
		// operator had just said it should not. And the advertised address, the
		// first of the brokers (this node joined first, and stays first while it
		// is a member): every token carries it, and the TLS certificate names it.
		advertised := ""
		if len(cfg.Brokers) > 0 {
			advertised = cfg.Brokers[0]
		}
		if cfg.Node != b.o.Node || cfg.Listen != b.o.Listen ||
			(cfg.RaftListen != "" && cfg.RaftListen != b.o.RaftListen) || (cfg.ClusterListen != "" && cfg.ClusterListen != b.o.ClusterListen) ||
			(advertised != "" && advertised != b.o.Advertise) {
			recorded := fmt.Sprintf("--node %s --listen %s --advertise %s --raft-listen %s --cluster-listen %s", cfg.Node, cfg.Listen, advertised, cfg.RaftListen, cfg.ClusterListen)
			if done, err := replication.HasState(d.Path(datadir.RaftDir)); err == nil && done && cfg.CAPin != "" && cfg.AdminAccount != "" {
				// Finished: "run it again to resume" sent the operator after
				// nothing (a walkthrough).
				return fmt.Errorf("%w: %s holds mesh %s, bootstrapped already with %s: nothing is left to resume there; serve it (meshctl serve --data %s), or bootstrap with other flags into a fresh --data directory",
					ErrConflict, d, cfg.Mesh, recorded, d)
			}
			return fmt.Errorf("%w: the bootstrap in %s was started with %s; run it again with the same flags to resume, or use a fresh --data directory",
				ErrConflict, d, recorded)
		}
		if cfg.Served {
			// Only bootstrap's own raft step leaves no state behind it; serve was
			// ready here, so the state was there, and is lost or damaged.
			if ok, err := replication.HasState(d.Path(datadir.RaftDir)); err != nil || !ok {
				return &ServedError{Dir: d, Mesh: cfg.Mesh, Node: cfg.Node, HoldsCAKey: d.Exists(datadir.CAKeyFile) && d.Exists(datadir.AccountKeyFile)}
			}
		}
		b.cfg = cfg
		return nil
	}
	entries, err := os.ReadDir(string(d))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", d, err)
	}
	if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == datadir.JoinPendingFile }) {
		return &JoinedError{Dir: d, Incomplete: true}
	}
	// The lock file alone is left by a command that found nothing to do here.
	if slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() != datadir.LockFile }) {
		return fmt.Errorf("%w: %s is not empty and holds no mesh.json; bootstrap only uses an empty or new directory", ErrConflict, d)
	}
	b.cfg = datadir.Config{
		Format:        datadir.ConfigFormat,
		Mesh:          b.o.Mesh,
		Node:          b.o.Node,
		Listen:        b.o.Listen,
		RaftListen:    b.o.RaftListen,
		ClusterListen: b.o.ClusterListen,
		Brokers:       []string{b.o.Advertise},
		CAHolder:      b.o.Node,
	}
	return nil
}

func (b *run) complete() bool {
	ok, err := replication.HasState(b.o.Dir.Path(datadir.RaftDir))
	return err == nil && ok && b.cfg.CAPin != "" && b.cfg.AdminAccount != ""
}

func (b *run) plan() []step {
	d := b.o.Dir
	return []step{
		{kind: "check", check: true, what: fmt.Sprintf("data directory %s is new, empty, or an unfinished bootstrap of mesh %s", d, b.o.Mesh),
			run: func() (string, error) {
				if b.o.DryRun {
					// Nothing is made: whether it could be is asked instead.
					return "", d.CheckWritable()
				}
				return "", d.Make()
			}},
		{kind: "check", check: true, what: fmt.Sprintf("addresses can be bound: broker %s, raft %s, cluster %s", b.cfg.Listen, b.cfg.RaftListen, b.cfg.ClusterListen),
			run: func() (string, error) { return "", checkBindable(b.cfg.Listen, b.cfg.RaftListen, b.cfg.ClusterListen) }},
		{kind: "check", check: true, what: "the clock is sane (certificates and token expiry depend on it)",
			run: func() (string, error) { return checkClock(b.o.Now()) }},
		{kind: "config", what: "record the mesh's parameters in " + d.Path(datadir.ConfigFile),
			done: func() bool { return d.Exists(datadir.ConfigFile) },
			run:  func() (string, error) { return "", d.SaveConfig(b.cfg) }},
		{kind: "ca", what: fmt.Sprintf("generate the mesh CA (its private key stays in %s)", d.Path(datadir.CAKeyFile)),
			done: func() bool { return d.Exists(datadir.CACertFile) && d.Exists(datadir.CAKeyFile) && b.cfg.CAPin != "" },
			run:  b.makeCA},
		{kind: "tls", what: "issue this control node's TLS identity (broker, raft, cluster) for " + hostsOf(b.cfg),
			done: func() bool { return d.Exists(datadir.TLSCertFile) && d.Exists(datadir.TLSKeyFile) },
			run:  b.makeLeaf},
		{kind: "signing", what: "generate the declaration signing key (Ed25519), and this node's curve key for later rotations",
			done: func() bool { return d.Exists(datadir.SigningKeyFile) && d.Exists(datadir.CurveKeyFile) },
			run:  b.makeSigningKey},
		{kind: "operator", what: "create operator credentials " + d.Path(datadir.AdminCredsFile),
			done: func() bool {
				return d.Exists(datadir.AdminCredsFile) && d.Exists(datadir.AccountKeyFile) && b.cfg.AdminAccount != ""
			},
			run: b.makeOperator},
		{kind: "raft", what: "bootstrap a one-voter Raft cluster (the mesh exists after this)",
			done: func() bool {
				ok, err := replication.HasState(d.Path(datadir.RaftDir))
				return err == nil && ok
			},
			run: b.makeRaft},
	}
}

func (b *run) makeCA() (string, error) {
	d := b.o.Dir
	hasCert, hasKey := d.Exists(datadir.CACertFile), d.Exists(datadir.CAKeyFile)
	switch {
	case hasCert && hasKey:
		// A previous run made the CA but stopped before recording its pin.
		ca, err := d.LoadCA()
		if err != nil {
			return "", err
		}
		b.ca = ca
	case hasCert || hasKey && b.cfg.CAPin != "":
		return "", fmt.Errorf("%w: only one of %s and %s exists; restore the other from backup, or start over in an empty directory",
			ErrConflict, datadir.CACertFile, datadir.CAKeyFile)
	default:
		// Nothing yet, or the key of a CA whose certificate was never written (a run
		// killed between the two): no pin was recorded, so nothing trusts that CA and
		// it is replaced.
		ca, keyPEM, err := pki.NewCA(b.o.Mesh, b.o.Now())
		if err != nil {
			return "", err
		}
		// Key first: a certificate without its key is useless, a key without its
		// certificate is never written by itself.
		if err := datadir.WriteFile(d.Path(datadir.CAKeyFile), keyPEM, 0o600); err != nil {
			return "", err
		}
		if err := datadir.WriteFile(d.Path(datadir.CACertFile), ca.CertPEM, 0o644); err != nil {
			return "", err
		}
		b.ca = ca
	}
	pin := b.ca.Pin()
	b.cfg.CAPin = hex.EncodeToString(pin[:])
	if err := d.SaveConfig(b.cfg); err != nil {
		return "", err
	}
	return " (pin sha256:" + b.cfg.CAPin + ")", nil
}

func (b *run) loadCA() (*pki.CA, error) {
	if b.ca != nil {
		return b.ca, nil
	}
	ca, err := b.o.Dir.LoadCA()
	if err != nil {
		return nil, err
	}
	b.ca = ca
	return ca, nil
}

func (b *run) makeLeaf() (string, error) {
	ca, err := b.loadCA()
	if err != nil {
		return "", err
	}
	leaf, err := ca.IssueLeaf("control "+b.o.Node, ipsOf(b.cfg), b.o.Now())
	if err != nil {
		return "", err
	}
	d := b.o.Dir
	if err := datadir.WriteFile(d.Path(datadir.TLSKeyFile), leaf.KeyPEM, 0o600); err != nil {
		return "", err
	}
	return "", datadir.WriteFile(d.Path(datadir.TLSCertFile), leaf.CertPEM, 0o644)
}

func (b *run) makeSigningKey() (string, error) {
	if !b.o.Dir.Exists(datadir.CurveKeyFile) {
		ck, err := nkeys.CreateCurveKeys()
		if err != nil {
			return "", err
		}
		if err := b.o.Dir.SaveCurveKey(ck); err != nil {
			return "", err
		}
	}
	if b.o.Dir.Exists(datadir.SigningKeyFile) {
		return "", nil
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", err
	}
	pemData, err := datadir.EncodeSigningKey(key)
	if err != nil {
		return "", err
	}
	if err := datadir.WriteFile(b.o.Dir.Path(datadir.SigningKeyFile), pemData, 0o600); err != nil {
		return "", err
	}
	return " (public key " + hex.EncodeToString(pub) + ")", nil
}

func (b *run) makeOperator() (string, error) {
	d := b.o.Dir
	var account nkeys.KeyPair
	if d.Exists(datadir.AccountKeyFile) {
		seed, err := d.ReadFile(datadir.AccountKeyFile)
		if err != nil {
			return "", err
		}
		if account, err = nkeys.FromSeed(seed); err != nil {
			return "", fmt.Errorf("%s: %w", datadir.AccountKeyFile, err)
		}
	} else {
		var err error
		if account, err = nkeys.CreateAccount(); err != nil {
			return "", err
		}
		seed, _ := account.Seed()
		if err := datadir.WriteFile(d.Path(datadir.AccountKeyFile), seed, 0o600); err != nil {
			return "", err
		}
	}
	accountPub, _ := account.PublicKey()
	creds, err := OperatorCreds(account, "admin")
	if err != nil {
		return "", err
	}
	if err := datadir.WriteFile(d.Path(datadir.AdminCredsFile), creds, 0o600); err != nil {
		return "", err
	}
	b.cfg.AdminAccount = accountPub
	return "", d.SaveConfig(b.cfg)
}

// OperatorCreds issues a standard NATS .creds file (user JWT + seed) for an operator,
// signed by the mesh's admin account key.
func OperatorCreds(account nkeys.KeyPair, name string) ([]byte, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	claims := jwt.NewUserClaims(userPub)
	claims.Name = name
	token, err := claims.Encode(account)
	if err != nil {
		return nil, fmt.Errorf("sign operator JWT: %w", err)
	}
	return jwt.FormatUserConfig(token, userSeed)
}

func (b *run) makeRaft() (string, error) {
	_, err := replication.Bootstrap(replication.Config{
		Dir:  b.o.Dir.Path(datadir.RaftDir),
		ID:   b.o.Node,
		Bind: b.cfg.RaftListen,
	})
	return "", err
}

func checkBindable(addrs ...string) error { return busyaddr.Check(addrs...) }

func checkClock(now time.Time) (string, error) {
	if now.Year() < 2025 || now.Year() > 2200 {
		return "", fmt.Errorf("the clock says %s; set the time before creating a CA", now.UTC().Format(time.RFC3339))
	}
	return " (" + now.UTC().Format(time.RFC3339) + ")", nil
}

func ipsOf(cfg datadir.Config) []net.IP {
	var ips []net.IP
	add := func(hostport string) {
		ap, err := netip.ParseAddrPort(hostport)
		if err != nil || ap.Addr().IsUnspecified() {
			return
		}
		ip := net.IP(ap.Addr().AsSlice())
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	// Every address another node dials: its TLS check wants the address it
	// dialled in the certificate, the cluster's (NATS routes) as much as Raft's.
	add(cfg.Listen)
	for _, b := range cfg.Brokers {
		add(b)
	}
	add(cfg.RaftListen)
	add(cfg.ClusterListen)
	return ips
}

func hostsOf(cfg datadir.Config) string {
	s := ""
	for i, ip := range ipsOf(cfg) {
		if i > 0 {
			s += ", "
		}
		s += ip.String()
	}
	return s
}

// readConfigLoose reads mesh.json of an unfinished bootstrap, where the pin and the
// account are not recorded yet.
func readConfigLoose(d datadir.Dir) (datadir.Config, error) {
	cfg, err := d.LoadConfig()
	if err == nil {
		return cfg, nil
	}
	// Read as LoadConfig reads it, without judging the fields: a file it cannot
	// decode one way only is not read another way here.
	cfg, rerr := d.ReadConfigRaw()
	if errors.Is(rerr, datadir.ErrCorrupt) || errors.Is(rerr, datadir.ErrTruncated) {
		return datadir.Config{}, fmt.Errorf("%w: %s is corrupt (%v); move it away or use a fresh directory", ErrConflict, d.Path(datadir.ConfigFile), rerr)
	}
	if rerr != nil {
		return datadir.Config{}, rerr
	}
	if cfg.Mesh == "" || cfg.Node == "" {
		return datadir.Config{}, fmt.Errorf("%w: %s is incomplete", ErrConflict, d.Path(datadir.ConfigFile))
	}
	return cfg, nil
}
