package daemon

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// startFiles is what serve reads of its data directory before it opens its Raft
// store, each part read and checked by one of startChecks.
type startFiles struct {
	cfg   datadir.Config
	caPEM []byte
	leaf  pki.Leaf
	// certs are set once their dates were found good.
	certs          certificates
	keys           []ed25519.PrivateKey
	curve          nkeys.KeyPair
	mutual, server *tls.Config
}

// Names of the checks CheckDir makes, as `meshctl check` shows them.
const (
	CheckRemoval      = "removal"
	CheckPrivate      = "owners and modes"
	CheckConfig       = datadir.ConfigFile
	CheckIdentity     = "CA and TLS identity"
	CheckCertDates    = "certificate dates"
	CheckSigningKeys  = datadir.SigningKeyFile
	CheckCurveKey     = datadir.CurveKeyFile
	CheckOperatorKey  = datadir.AdminCredsFile
	CheckRaftStore    = "raft store"
	CheckState        = "replicated state"
	CheckKeyringMatch = "signing keys and keyring"
)

// startCheck is one of the checks of its data directory serve makes before it opens
// its Raft store: Open stops at the first that fails, CheckDir makes each whose
// needs passed.
type startCheck struct {
	name string
	// needs are the earlier checks whose results run reads.
	needs []string
	// run makes the check at now, recording what it read in f; detail says, for a
	// person, what it found.
	run func(dir datadir.Dir, now time.Time, f *startFiles) (detail string, err error)
}

// startChecks are serve's checks of its data directory, in the order it makes them.
func startChecks() []startCheck {
	return []startCheck{
		{name: CheckRemoval, run: func(dir datadir.Dir, _ time.Time, _ *startFiles) (string, error) {
			return "no " + datadir.RemovedFile + ": this node was not removed (as far as this directory knows)", dir.CheckNotRemoved()
		}},
		{name: CheckPrivate, run: func(dir datadir.Dir, _ time.Time, _ *startFiles) (string, error) {
			return "this user's, and no other user may read its keys or change its files", dir.CheckPrivate()
		}},
		{name: CheckConfig, run: func(dir datadir.Dir, _ time.Time, f *startFiles) (_ string, err error) {
			if f.cfg, err = dir.LoadConfig(); err != nil {
				return "", err
			}
			return fmt.Sprintf("control node %s of mesh %s, broker %s, Raft %s", f.cfg.Node, f.cfg.Mesh, f.cfg.Listen, f.cfg.RaftListen), nil
		}},
		// Checked whole here, each file named when it cannot be used: tls.X509KeyPair
		// named neither file, and blamed the key for an empty certificate.
		{name: CheckIdentity, needs: []string{CheckConfig}, run: func(dir datadir.Dir, _ time.Time, f *startFiles) (_ string, err error) {
			if f.caPEM, f.leaf, err = dir.LoadIdentity(f.cfg.CAPin); err != nil {
				return "", err
			}
			if f.mutual, err = pki.MutualConfig(f.leaf, f.caPEM); err != nil {
				return "", err
			}
			if f.server, err = pki.ServerConfig(f.leaf, f.caPEM); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s has %s's CA pin; %s is the key of %s, which %s issued", datadir.CACertFile, datadir.ConfigFile,
				datadir.TLSKeyFile, datadir.TLSCertFile, datadir.CACertFile), nil
		}},
		{name: CheckCertDates, needs: []string{CheckIdentity}, run: func(dir datadir.Dir, now time.Time, f *startFiles) (string, error) {
			certs, err := readCertificates(dir, f.caPEM, f.leaf.CertPEM, now)
			if err != nil {
				return "", err
			}
			f.certs = certs
			return fmt.Sprintf("%s valid until %s, %s until %s", datadir.TLSCertFile, certs.leaf.NotAfter.UTC().Format(time.DateOnly),
				datadir.CACertFile, certs.ca.NotAfter.UTC().Format(time.DateOnly)), nil
		}},
		{name: CheckSigningKeys, run: func(dir datadir.Dir, _ time.Time, f *startFiles) (_ string, err error) {
			if f.keys, err = dir.LoadSigningKeys(); err != nil {
				return "", err
			}
			return fmt.Sprintf("%d key(s)", len(f.keys)), nil
		}},
		{name: CheckCurveKey, run: func(dir datadir.Dir, _ time.Time, f *startFiles) (_ string, err error) {
			if f.curve, err = dir.LoadCurveKey(); err != nil {
				return "", err
			}
			return "this node's curve key, which new signing keys are sealed to", nil
		}},
		// Not used to serve, but meshctl on this machine logs in with it, and so does
		// a start that asks the others whether this node was removed: a damaged copy
		// is said here, naming the file, not later as an unreachable control plane.
		{name: CheckOperatorKey, run: func(dir datadir.Dir, _ time.Time, _ *startFiles) (string, error) {
			if _, err := dir.LoadOperatorKey(); err != nil {
				return "", err
			}
			return "operator credentials meshctl logs in with on this machine", nil
		}},
	}
}

// loadStartFiles makes startChecks in turn and returns what they read, stopping at
// the first that fails.
func loadStartFiles(dir datadir.Dir, now time.Time) (startFiles, error) {
	var f startFiles
	for _, c := range startChecks() {
		if _, err := c.run(dir, now, &f); err != nil {
			return f, unfinishedBootstrap(err, f.cfg, dir)
		}
	}
	return f, nil
}

// unfinishedBootstrap says first, of a file that cannot be used, that the directory
// holds a `meshctl bootstrap` stopped before its last step, when it does: mesh.json
// says a bootstrap's node that never served, and no Raft store is there. The file's
// own remedy (restore it from a backup, or remove the node and join it again) is no
// way forward where no mesh exists yet (a docs walkthrough: bootstrap interrupted at
// its signing key, then serve). Any other error is returned as it is.
func unfinishedBootstrap(err error, cfg datadir.Config, dir datadir.Dir) error {
	// A missing file only: bootstrap makes what is missing and takes a step whose
	// file is there as done, so it mends nothing else. One broker only: a node
	// that served among others lists them. Served is recorded only by versions
	// since it was added, and not when its save failed: the advice says what it
	// hangs on (a review).
	if err == nil || !errors.Is(err, datadir.ErrMissing) || cfg.Mesh == "" || cfg.Served || cfg.Joining || cfg.JoinedNode() || len(cfg.Brokers) > 1 {
		return err
	}
	if _, serr := os.Stat(dir.Path(datadir.RaftDir)); !errors.Is(serr, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%s holds no Raft store and %s records no start: most likely a `meshctl bootstrap` stopped before its last step. "+
		"If this node never served, run `meshctl bootstrap --data %s` again with the same flags to finish it; if it served, do not (it would make a new, empty mesh): "+
		"restore the directory from a backup. What it lacks now: %w", dir, datadir.ConfigFile, dir, err)
}

// stateLost says what to do about a Raft store that lost its state
// (replication.ErrStateLost), by what mesh.json records of the node; any other
// error is returned as it is.
func stateLost(err error, cfg datadir.Config, dir datadir.Dir) error {
	if !errors.Is(err, replication.ErrStateLost) || cfg.JoinedNode() {
		return err
	}
	if cfg.Served {
		// It served: the loss is real, and bootstrap refuses to start it over.
		return fmt.Errorf("%w\nThis node served (mesh.json records it): do not run `meshctl bootstrap` here, which refuses to make a new, empty Raft cluster; recover it as above", err)
	}
	// The one way to an empty store that is no loss: a bootstrap stopped before its
	// last step. Running it again on a node that served would start the mesh over,
	// empty, so the choice is the operator's.
	return fmt.Errorf("%w\nIf `meshctl bootstrap --data %s` stopped before its last step (raft) and this node never served, run it again with the same flags to finish it; if it served, do not: it would make a new, empty Raft cluster", err, dir)
}

// Check is one check CheckDir made, as `meshctl check` reports it.
type Check struct {
	// Name says what was checked (CheckRemoval, CheckPrivate, ...).
	Name string
	// Detail says what was found, when the check passed.
	Detail string
	// Warnings are what serve would warn of at start, the check passed.
	Warnings []string
	// Err is why the check failed: what serve would stop with.
	Err error
	// Skipped names the failed check this one needed: it was not made.
	Skipped string
}

// StateSummary is what the replicated state CheckDir read holds.
type StateSummary struct {
	// Initialised is false until the node first served: serve then initialises it.
	Initialised bool
	// Hosts counts the nodes enrolled, Revoked those among them revoked, and
	// Forgotten the revoked ones whose record the state forgot (decision 0039).
	Hosts, Revoked, Forgotten int
	// ControlNodes are the control nodes it lists, removed ones left out.
	ControlNodes []string
	// KeyringEpoch is the signing keyring's epoch.
	KeyringEpoch uint64
}

// CheckReport is what CheckDir found.
type CheckReport struct {
	// Config is mesh.json, when it could be read.
	Config *datadir.Config
	// Checks are in the order serve makes them.
	Checks []Check
	// Raft is what the Raft store holds, when it could be read.
	Raft *replication.Inspection
	// State sums up the replicated state Raft holds, when it could be read.
	State *StateSummary
}

// Err is the error of the first check that failed, in the order serve makes them:
// the one serve would stop with at start (nil: none failed).
func (r CheckReport) Err() error {
	for _, c := range r.Checks {
		if c.Err != nil {
			return c.Err
		}
	}
	return nil
}

// Failed counts the checks that failed.
func (r CheckReport) Failed() int {
	n := 0
	for _, c := range r.Checks {
		if c.Err != nil {
			n++
		}
	}
	return n
}

// CheckDir makes the checks serve makes of dir at start, without starting anything
// and without writing anything: its files (startChecks, shared with Open), then its
// Raft store read as Open would start from it (replication.Inspect: raft.db opened
// read-only, waiting at most wait for a process that has it open for writing), the
// state that store holds, replayed in memory, and the signing keys against the
// state's keyring. A check whose input failed is skipped, the others made. The
// caller makes sure no serve runs on dir (datadir.Dir.CheckNotInUse): the files
// would be read as serve changes them.
func CheckDir(dir datadir.Dir, now time.Time, wait time.Duration) CheckReport {
	var (
		r      CheckReport
		files  startFiles
		failed = map[string]bool{}
	)
	check := func(name string, needs []string, run func(c *Check) error) {
		c := Check{Name: name}
		if i := slices.IndexFunc(needs, func(n string) bool { return failed[n] }); i >= 0 {
			c.Skipped = needs[i]
		} else {
			c.Err = run(&c)
		}
		if c.Err != nil || c.Skipped != "" {
			failed[name] = true
		}
		r.Checks = append(r.Checks, c)
	}
	for _, sc := range startChecks() {
		check(sc.name, sc.needs, func(c *Check) (err error) {
			c.Detail, err = sc.run(dir, now, &files)
			return unfinishedBootstrap(err, files.cfg, dir)
		})
		switch {
		case sc.name == CheckConfig && !failed[CheckConfig]:
			cfg := files.cfg
			r.Config = &cfg
		case sc.name == CheckCertDates && !failed[CheckCertDates]:
			c := &r.Checks[len(r.Checks)-1]
			for _, n := range expiryNotices(dir, files.certs, now) {
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s expires %s (%d days left): %s", n.file, n.notAfter.Format(time.RFC3339), n.daysLeft, n.msg))
			}
		case sc.name == CheckCurveKey && !failed[CheckCurveKey] && !failed[CheckConfig]:
			// Looked at, not removed: check writes nothing (serve removes it).
			c := &r.Checks[len(r.Checks)-1]
			left, err := dir.LeftJoinKeys(files.cfg, files.curve)
			switch {
			case err != nil:
				c.Warnings = append(c.Warnings, err.Error())
			case left:
				c.Warnings = append(c.Warnings, fmt.Sprintf("%s holds the keys of this node's finished join a second time (a join stopped at its last step): serve removes it at start",
					dir.Path(datadir.JoinPendingFile)))
			}
		}
	}

	var fsm *state.FSM
	check(CheckRaftStore, nil, func(c *Check) error {
		in, err := replication.Inspect(dir.Path(datadir.RaftDir), files.cfg.Node, files.cfg.RaftListen, func() raft.FSM { return state.NewFSM() }, wait)
		if err != nil {
			if r.Config != nil {
				err = stateLost(err, *r.Config, dir)
			}
			return err
		}
		r.Raft = in
		fsm, _ = in.State.(*state.FSM)
		c.Detail = fmt.Sprintf("last index %d (term %d), current term %d", in.LastIndex, in.LastTerm, in.CurrentTerm)
		if in.LastIndex == 0 {
			// A backup serve took of itself holds a snapshot and no log entry
			// (decision 0037): "last index 0" read as an empty store.
			c.Detail = fmt.Sprintf("no log entry (the state is the snapshot's, term %d), current term %d", in.LastTerm, in.CurrentTerm)
		}
		if in.Snapshot != nil {
			c.Detail += fmt.Sprintf(", snapshot at %d", in.Snapshot.Index)
		} else {
			c.Detail += ", no snapshot"
		}
		var members []string
		for _, s := range in.Servers {
			m := string(s.ID)
			if s.Suffrage != raft.Voter {
				m += " (" + strings.ToLower(s.Suffrage.String()) + ")"
			}
			members = append(members, m)
		}
		c.Detail += "; members " + strings.Join(members, ", ")
		if in.PassedOver != nil {
			c.Warnings = append(c.Warnings, fmt.Sprintf("a Raft snapshot is damaged; serve starts from the one before it and the log, which hold the same state: %s %s", in.PassedOver.File, in.PassedOver.Problem))
		}
		if in.PeersFile {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s is there: serve recovers the Raft configuration from it at start (docs/operations.md, \"Recovering from lost quorum\")", filepath.Join(dir.Path(datadir.RaftDir), replication.PeersFile)))
		}
		return nil
	})
	check(CheckState, []string{CheckRaftStore, CheckConfig, CheckCurveKey}, func(c *Check) error {
		if err := fsm.HaltErr(); err != nil {
			return err
		}
		var (
			sum StateSummary
			err error
		)
		fsm.Read(func(s *state.State) {
			err = removedIn(s, files.cfg.Node, files.curve)
			sum.Initialised, sum.KeyringEpoch = s.Initialised(), s.Keyring.Epoch
			for _, n := range s.Nodes {
				sum.Hosts++
				if n.Revoked {
					sum.Revoked++
				}
			}
			sum.Forgotten = len(s.Forgotten)
			for _, cn := range s.ActiveControlNodes() {
				sum.ControlNodes = append(sum.ControlNodes, cn.ID)
			}
		})
		if err != nil {
			return err
		}
		slices.Sort(sum.ControlNodes)
		r.State = &sum
		c.Detail = fmt.Sprintf("read up to entry %d (%d command(s) of the log", r.Raft.Applied, r.Raft.Commands)
		if r.Raft.Snapshot != nil {
			c.Detail += fmt.Sprintf(" after the snapshot at %d", r.Raft.Snapshot.Index)
		}
		c.Detail += ")"
		if !sum.Initialised {
			c.Detail += "; not initialised yet: serve initialises it when it first leads"
			return nil
		}
		c.Detail += fmt.Sprintf(": %d host(s) (%d revoked)", sum.Hosts, sum.Revoked)
		if sum.Forgotten > 0 {
			c.Detail += fmt.Sprintf(", %d revoked record(s) forgotten", sum.Forgotten)
		}
		c.Detail += fmt.Sprintf(", control nodes %s, keyring epoch %d", strings.Join(sum.ControlNodes, ", "), sum.KeyringEpoch)
		return nil
	})
	check(CheckKeyringMatch, []string{CheckState, CheckSigningKeys}, func(c *Check) error {
		var (
			want   []string
			sealed state.SealedKey
			have   bool
		)
		fsm.Read(func(s *state.State) {
			want = slices.Clone(s.Keyring.Keys)
			sealed, have = s.SealedKeys[files.cfg.Node]
		})
		if len(want) == 0 {
			c.Detail = fmt.Sprintf("no keyring yet: serve makes it of %s's newest key when it first leads", datadir.SigningKeyFile)
			return nil
		}
		keys, missing, err := keyringKeys(want, sealed, have, files.keys, files.curve)
		if err != nil {
			return err
		}
		c.Detail = fmt.Sprintf("this node holds %d of the keyring's %d key(s)", len(keys), len(want))
		if len(missing) > 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("this control node lacks signing keys of the keyring (%s); hosts that trust only those will not verify what it signs", strings.Join(missing, ", ")))
		}
		return nil
	})
	return r
}
