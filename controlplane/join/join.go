// Package join adds a control node to a mesh: minting its control token on the machine
// that holds the CA key, and `meshctl join` on the new machine.
//
// The join prints each step and reports success only when it is confirmed: the
// broker's pin checked before the secret leaves; the sealed TLS identity and the
// signing key received and checked against the pin and the keyring; the node a Raft
// nonvoter; proof that it replicates (it names the probe entry it could only have
// learnt from the log); promotion (keeping the number of voters odd); a NATS route
// over mutual TLS to the other brokers. A join that cannot be confirmed is rolled back
// and says why; running it again with the same token resumes it.
package join

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
	"mesh/declarations"
	"mesh/host/busyaddr"
	"mesh/host/jsonkeys"
	"mesh/host/link"
	"mesh/host/resend"
	hosttoken "mesh/host/token"
	"mesh/tokenfmt"
)

// Errors a join ends with.
var (
	ErrToken       = errors.New("the token cannot be used to join")
	ErrNotCAHolder = errors.New("this needs the mesh CA key, which only the control node holding it has")
	// ErrRefused: the mesh's answer refused the token or the request (its code
	// says which: token_used, token_expired …); a broker's refusal of the login,
	// which says nothing of why, is ErrLoginRefused.
	ErrRefused = errors.New("the mesh refused the join")
	// ErrUnavailable: the mesh answered that it cannot admit anyone now (an
	// election, a commit that failed); nothing was used up, and the same join
	// may be run again.
	ErrUnavailable = errors.New("the mesh could not admit this node now")
	ErrBadAnswer   = errors.New("the mesh's answer does not verify")
	// ErrNotConfirmed: the mesh did not confirm that the node replicates, and the
	// join was rolled back (the nonvoter taken out of Raft again), unless the
	// error also wraps ErrRollbackFailed.
	ErrNotConfirmed = errors.New("the join could not be confirmed")
	// ErrRollbackFailed: a join that could not go on was to be rolled back, and the
	// control plane did not say it took the node out of Raft (no answer in time, a
	// refusal): the node may be left a member of Raft, never confirmed. Running the
	// same join again resumes it; meshctl control remove gives up on it.
	ErrRollbackFailed = errors.New("rolling the join back failed")
	// ErrConfirmLater: the node replicates (it applied the probe entry) and is a
	// Raft nonvoter, but the mesh could not confirm it now (no leader, a leader
	// that changed, no answer); nothing was rolled back, and the same join run
	// again resumes.
	ErrConfirmLater = errors.New("the mesh could not confirm the join now")
	// ErrLoginRefused: every broker of the mesh reached refused the join's login
	// (nats' Authorization Violation, after the pin was checked), which a broker
	// does without saying why: for a while (the token's connections over their
	// budget, an address over its failed attempts, a broker with no room for
	// another host) or for good (a token it never minted, a revoked key). Nothing
	// was sent; the keys of the join are kept for a run with the same token.
	ErrLoginRefused = errors.New("the mesh's brokers refused the join's login without saying why")
	// ErrClock: a broker's certificate chains to the pinned CA but is not valid at
	// this machine's time (a pki.ClockError): the clock here, or the one that made
	// the mesh's certificates, is wrong. It is the mesh; nothing was sent, and the
	// same join run again once the clocks agree goes on.
	ErrClock = pki.ErrClock
	// ErrNoRoute: the node is a confirmed member of Raft (nothing was rolled
	// back), but its NATS route to the other brokers did not come up in time;
	// the same join run again finishes once the cluster port is open.
	ErrNoRoute = errors.New("the join is confirmed, but no NATS route to the other control nodes came up")
	// ErrRemoved: another operator removed the node (meshctl control remove) while it
	// joined; the token it joined with is used up.
	ErrRemoved = errors.New("this control node was removed while it joined")
	ErrDataDir = errors.New("the data directory is in the way")
	// ErrCannotListen: this machine cannot listen on an address the node was
	// admitted with (or --listen): found before anything is added to Raft, and
	// the same join run again, once it can, resumes.
	ErrCannotListen = errors.New("this machine cannot listen on the node's addresses")
)

// MintOptions describe a control token.
type MintOptions struct {
	Node string
	// Broker is the new node's client address; Raft and Cluster default to its port
	// plus 1 and 2.
	Broker, Raft, Cluster string
	TTL                   time.Duration
	Now                   func() time.Time
	// Operator tunes the call to the control plane (its LeaderWait, say).
	Operator operator.Options
	// Replace cancels the node's pending tokens as this one is minted.
	Replace bool
}

// Mint mints a control token through the control plane of dir, which must hold the CA
// key and the operator account key: the new node's TLS identity and operator
// credentials are issued here and sealed under the token secret.
//
// It returns the token and the pending tokens it replaced (Replace).
func Mint(dir datadir.Dir, o MintOptions) (tokenfmt.Token, []api.TokenView, error) {
	var tok tokenfmt.Token
	if o.Now == nil {
		o.Now = time.Now
	}
	cfg, err := dir.LoadConfig()
	if err != nil {
		return tok, nil, err
	}
	if !dir.Exists(datadir.CAKeyFile) || !dir.Exists(datadir.AccountKeyFile) {
		// mesh.json names the bootstrap machine; `nodes` shows where the keys are
		// now, should they have been restored elsewhere from their backup.
		where := "`meshctl nodes` marks the control node that holds it (CA)"
		if h, asked := operator.CAHolderNow(dir, o.Operator); asked && h != "" {
			where = fmt.Sprintf("%s holds it now, as its heartbeats say", h)
		} else if asked {
			// mesh.json's holder is the one at this node's join: removed since,
			// perhaps (the bootstrap machine lost), and named as if it held it.
			where = "no running control node says it holds them: restore them from their backup into one"
		} else if h := cfg.CAHolder; h != "" && h != cfg.Node {
			where = fmt.Sprintf("the CA key is on %s (its %s), unless it was restored elsewhere: %s", h, datadir.CAKeyFile, where)
		}
		holds := fmt.Sprintf("holds no %s and %s", datadir.CAKeyFile, datadir.AccountKeyFile)
		switch {
		case dir.Exists(datadir.CAKeyFile):
			// Half restored: saying neither was there sent the operator
			// looking for the wrong file (a docs walkthrough).
			holds = fmt.Sprintf("holds %s but not %s: both are needed", datadir.CAKeyFile, datadir.AccountKeyFile)
		case dir.Exists(datadir.AccountKeyFile):
			holds = fmt.Sprintf("holds %s but not %s: both are needed", datadir.AccountKeyFile, datadir.CAKeyFile)
		}
		return tok, nil, fmt.Errorf("%w: this is %s, and its data directory %s; mint the control token where they are (%s), or restore them here from their backup (docs/operations.md, losing the bootstrap machine)",
			ErrNotCAHolder, cfg.Node, holds, where)
	}
	if err := dir.CheckKeysPrivate(datadir.CAKeyFile, datadir.AccountKeyFile); err != nil {
		return tok, nil, err
	}
	addrs, err := ControlAddresses(o.Broker, o.Raft, o.Cluster)
	if err != nil {
		return tok, nil, err
	}
	ca, err := dir.LoadCA()
	if err != nil {
		return tok, nil, err
	}
	// The certificate carries every address the others dial: the control nodes
	// check the IP they dialled against it, for Raft and routes as for hosts. With
	// the broker's alone, a node whose Raft or cluster address is on another
	// network (hosts on one, control traffic on another) could never join.
	var ips []net.IP
	for _, a := range []string{addrs.Broker, addrs.Raft, addrs.Cluster} {
		ap, _ := netip.ParseAddrPort(a)
		if ip := net.IP(ap.Addr().AsSlice()); !ap.Addr().IsUnspecified() && !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	leaf, err := ca.IssueLeaf("control "+o.Node, ips, o.Now())
	if err != nil {
		return tok, nil, err
	}
	seed, err := dir.ReadFile(datadir.AccountKeyFile)
	if err != nil {
		return tok, nil, err
	}
	account, err := nkeys.FromSeed(seed)
	if err != nil {
		return tok, nil, fmt.Errorf("%s: %w", datadir.AccountKeyFile, err)
	}
	creds, err := bootstrap.OperatorCreds(account, o.Node)
	if err != nil {
		return tok, nil, err
	}
	if _, err := rand.Read(tok.Secret[:]); err != nil {
		return tok, nil, err
	}
	sealed, err := seal.Identity(tok.Secret, cfg.Mesh, o.Node, seal.ControlIdentity{CertPEM: leaf.CertPEM, KeyPEM: leaf.KeyPEM, Creds: creds})
	if err != nil {
		return tok, nil, err
	}
	c, err := operator.Dial(dir, o.Operator)
	if err != nil {
		return tok, nil, err
	}
	defer c.Close()
	id := tok.SecretHash()
	// The CA vouches for the token and for the identity issued with it: the control
	// plane admits no control node on operator credentials alone, and records the
	// leaf's pin and the credentials' key to revoke them when the node is removed.
	if addrs.Pin, err = pki.LeafPinPEM(leaf.CertPEM); err != nil {
		return tok, nil, err
	}
	if addrs.Operator, err = datadir.CredsUserKey(creds); err != nil {
		return tok, nil, err
	}
	// The claim lives as long as the token: past that, its id may be purged and
	// registered anew.
	addrs.ClaimExpiry = o.Now().Add(o.TTL).Truncate(time.Second)
	req := api.TokenCreateRequest{
		ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(tok.ProofKey()), Node: o.Node, Role: string(tokenfmt.RoleControl), TTL: api.Duration(o.TTL),
		Control: &addrs, Sealed: sealed, Replace: o.Replace,
	}
	if addrs.Proof, err = ca.SignControlClaim(req.ControlClaim(cfg.Mesh)); err != nil {
		return tok, nil, err
	}
	var res api.TokenCreateResult
	if err := c.Call(api.OpTokenCreate, req, &res); err != nil {
		return tok, nil, err
	}
	tok, err = operator.TokenFrom(tok.Secret, o.Node, tokenfmt.RoleControl, res)
	return tok, res.Replaced, err
}

// ControlAddresses checks a control node's addresses, given with a control token's
// flags, and completes them from its broker address: by bootstrap's rules for the
// first node (bootstrap.CheckAddresses), except that the broker address is the one
// hosts dial, never a wildcard.
func ControlAddresses(brokerAddr, raftAddr, clusterAddr string) (api.ControlMember, error) {
	a, err := bootstrap.CheckAddresses(brokerAddr, raftAddr, clusterAddr, bootstrap.AddressFlags{Broker: "--addr", Raft: "--raft-addr", Cluster: "--cluster-addr"}, false)
	if err != nil {
		return api.ControlMember{}, err
	}
	return api.ControlMember{Broker: a.Broker.String(), Raft: a.Raft.String(), Cluster: a.Cluster.String()}, nil
}

// Options are a join's inputs.
type Options struct {
	Dir   datadir.Dir
	Token string
	// Command is the join's command line as it is run again, the token's source
	// included (`meshctl join --data DIR --token-file F`): the resume advice
	// printed without --token-file waited on stdin, or said the token is empty (a
	// docs walkthrough). Empty: `meshctl join --data DIR`.
	Command string
	Out     io.Writer
	// Listen, when set, is the address the node's broker listens on, apart from the
	// one its token was minted for, which hosts dial (a machine behind NAT, or a
	// wildcard); otherwise, and for Raft and the cluster always, the node binds the
	// addresses of its token (its certificate carries them). A join resumed without
	// it keeps the one an earlier run was given.
	Listen string
	// Brokers are tried after the token's, for a token minted before the other
	// control nodes served, whose only broker (the bootstrap machine's) is gone:
	// the mesh's CA pin is checked there as at the token's.
	Brokers  []netip.AddrPort
	Logger   *slog.Logger
	Now      func() time.Time
	Timeouts replication.Timeouts
	// ConfirmTimeout bounds the wait for the proof of replication; RouteTimeout the
	// wait for a route to another broker.
	ConfirmTimeout time.Duration
	RouteTimeout   time.Duration
}

// pending is what a join keeps between runs until it completes.
type pending struct {
	Node      string `json:"node"`
	TokenHash string `json:"token_hash"`
	NkeySeed  string `json:"nkey_seed"`
	CurveSeed string `json:"curve_seed"`
}

const pendingFile = datadir.JoinPendingFile

// abortWait bounds the rollback of a join interrupted while the mesh had it as a
// nonvoter: the process must stop promptly, and a join left in Raft is resumed (or
// rolled back) by the next run.
const abortWait = 1500 * time.Millisecond

type run struct {
	o   Options
	tok tokenfmt.Token
	n   int
	// brokers are the token's, then Options.Brokers.
	brokers []netip.AddrPort
}

func (r *run) step(kind, format string, args ...any) {
	r.n++
	fmt.Fprintf(r.o.Out, "  %d. %-9s %s\n", r.n, kind, fmt.Sprintf(format, args...))
}

// ErrAlreadyJoined is returned (with nothing done) when the directory already holds a
// completed join of this node.
var ErrAlreadyJoined = errors.New("already joined")

// Join carries out the join. It holds the data directory's lock throughout, and
// refuses at once a directory another process holds. When ctx ends (SIGINT or
// SIGTERM) it stops waiting and returns an error wrapping context.Cause(ctx); a join
// the mesh had as a nonvoter is rolled back first, and running join again with the
// same token resumes.
func Join(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ConfirmTimeout == 0 {
		o.ConfirmTimeout = 45 * time.Second
	}
	if o.RouteTimeout == 0 {
		o.RouteTimeout = 30 * time.Second
	}
	r := &run{o: o}
	now := o.Now()
	tok, err := tokenfmt.Parse(o.Token, now)
	if err != nil && hosttoken.IsRedacted(o.Token) {
		// Copied from a log or a listing, which print a token so: "truncated,
		// copy the whole line again" sent the person back to the same line (a
		// walkthrough).
		return fmt.Errorf("%w: this is a token as a log prints it, its secret replaced by <redacted>: it admits nothing. Use the token meshctl token printed (it is shown once: mint a new one if it is lost)", ErrToken)
	}
	var expired *tokenfmt.ExpiredError
	if errors.As(err, &expired) && expired.Ago() <= 5*time.Minute {
		err = nil // the mesh's clock decides
	} else if expired != nil {
		// As meshhost enrol says it: the expiry was judged by this clock, which
		// may be the wrong one.
		err = fmt.Errorf("%w (by this machine's clock, which reads %s; the mesh's clock decides, so if this clock is wrong, fix it and run join again)",
			err, now.UTC().Format(time.RFC3339))
	}
	if err != nil {
		if expired != nil && tok.Role == tokenfmt.RoleControl {
			if cfg, cerr := o.Dir.ReadConfigRaw(); cerr == nil && !cfg.Joining && cfg.Mesh == tok.Mesh && cfg.Node == tok.Node {
				// Run again on a node its token joined, the join is a no-op
				// whatever the token's age, as a provisioning script runs it: it
				// said "mint a new one", which the mesh then refused (node_exists;
				// a docs walkthrough). Read, not locked: nothing is written.
				r.tok = tok
				if _, derr := r.checkDir(); derr != nil {
					return derr
				}
			}
			if cfg, cerr := o.Dir.ReadConfigRaw(); cerr == nil && cfg.Joining && cfg.Mesh == tok.Mesh && cfg.Node == tok.Node {
				// mesh.json is written after the admission: the mesh admitted this
				// node with the token, and a new one is refused until it is removed.
				return fmt.Errorf("%w: %w. The mesh admitted %s with it (%s records the unfinished join), and a join resumes with its token only while the token is valid: "+
					"%s stays an admitted control node until removed. If meshctl nodes shows %s at this machine's addresses, remove it (meshctl control remove %s), mint a new control token for it where the CA key is, and run meshctl join with that (into the same --data directory); "+
					"if it shows it at another machine's, that machine was admitted as %s since: leave it, and join this one under another id",
					ErrToken, err, tok.Node, o.Dir.Path(datadir.ConfigFile), tok.Node, tok.Node, tok.Node, tok.Node)
			}
		}
		return fmt.Errorf("%w: %w", ErrToken, err)
	}
	if tok.Role != tokenfmt.RoleControl {
		return fmt.Errorf("%w: this is a %s token; workers enrol with meshhost enrol", ErrToken, tok.Role)
	}
	if o.Listen != "" {
		ap, err := bootstrap.CheckListen("--listen", o.Listen)
		if err != nil {
			return err
		}
		o.Listen = ap.String()
	}
	r.tok = tok
	r.brokers = slices.Clone(tok.Brokers)
	for _, b := range o.Brokers {
		if !slices.Contains(r.brokers, b) {
			r.brokers = append(r.brokers, b)
		}
	}
	fmt.Fprintf(o.Out, "join control node %s into mesh %s\n", tok.Node, tok.Mesh)
	left := fmt.Sprintf("expires in %s", tok.Expiry.Sub(now).Round(time.Second))
	if tok.Expiry.Sub(now) > 24*time.Hour {
		// No token lives a day (an hour at most): said as a date, not as a
		// duration that overflows ("2562047h47m16s", a walkthrough).
		left = fmt.Sprintf("expires at %s, far past the hour a token lives (the mesh decides)", tok.Expiry.UTC().Format(time.RFC3339))
	}
	if expired != nil {
		left = fmt.Sprintf("expired %s ago by this machine's clock; the mesh's clock decides", expired.Ago().Round(time.Second))
	}
	r.step("token", "parsed offline: role control, %d broker(s), %s", len(tok.Brokers), left)

	lock, note, made, err := r.lock()
	if err != nil {
		return err
	}
	defer lock.Release()
	r.step("data dir", "%s", note)
	err = r.join(ctx)
	if err != nil && made {
		r.unmakeIfEmpty()
	}
	return err
}

// unmakeIfEmpty removes the data directory this run made, and its lock file, when
// the join failed leaving nothing else there (refused before any key was kept, or
// its keys dropped with a spent token): a failed join left a directory holding only
// its lock, which meshhost enrol does not (a docs walkthrough). Keys kept for a run
// with the same token keep the directory. The lock is still held; removing its
// file does not release it.
func (r *run) unmakeIfEmpty() {
	d := r.o.Dir
	entries, err := os.ReadDir(string(d))
	if err != nil || len(entries) != 1 || entries[0].Name() != datadir.LockFile {
		return
	}
	_ = os.Remove(d.Path(datadir.LockFile))
	_ = os.Remove(string(d)) // only if empty
}

// rerun is the command that runs this join again (Options.Command).
func (r *run) rerun() string {
	if r.o.Command != "" {
		return r.o.Command
	}
	return "meshctl join --data " + string(r.o.Dir)
}

// lock takes the data directory's lock and checks the directory. A lock file is
// created only in a directory the join may use, never in one it refuses.
// made says the directory did not exist before.
func (r *run) lock() (lock *datadir.Lock, note string, made bool, err error) {
	d := r.o.Dir
	// Before anything is written: the keys the mesh hands over go where no other
	// user could swap the directory, or a link on the way to it.
	if err := d.CheckPlace(); err != nil {
		return nil, "", false, err
	}
	lock, err = d.LockExisting("meshctl join")
	if err != nil {
		return nil, "", false, err
	}
	note, err = r.checkDir()
	if err != nil {
		lock.Release()
		return nil, "", false, err
	}
	if lock != nil {
		return lock, note, false, nil
	}
	// A read-only file system, no write access or a full disk is said as such
	// (exit 7), not as mkdir's raw error.
	_, statErr := os.Stat(string(d))
	made = errors.Is(statErr, fs.ErrNotExist)
	if err := d.Make(); err != nil {
		return nil, "", false, err
	}
	if lock, err = d.Lock("meshctl join"); err != nil {
		if made && !errors.Is(err, datadir.ErrInUse) {
			// No room for the lock's record (a full disk): the directory this
			// join made, and the empty lock file in it, are not left behind.
			_ = os.Remove(d.Path(datadir.LockFile))
			_ = os.Remove(string(d)) // only if empty
		}
		return nil, "", false, err
	}
	// Check again under the lock: another process may have used the directory since.
	if note, err = r.checkDir(); err != nil {
		lock.Release()
		return nil, "", false, err
	}
	return lock, note, made, nil
}

// checkDir says what the directory holds, or why the join cannot use it.
func (r *run) checkDir() (string, error) {
	d := r.o.Dir
	if err := d.CheckNotRemoved(); err != nil {
		return "", err
	}
	cfg, err := d.ReadConfigRaw()
	switch {
	case err == nil && !cfg.Joining && cfg.Mesh == r.tok.Mesh && cfg.Node == r.tok.Node:
		// As this machine's files say: the mesh may have removed the node since (serve
		// then says so, exit 6), which meshctl nodes shows.
		return "", fmt.Errorf("%w: %s already holds control node %s of mesh %s, as its files say; nothing to do (start it with meshctl serve --data %s; meshctl nodes shows whether the mesh still lists it)", ErrAlreadyJoined, d, cfg.Node, cfg.Mesh, d)
	case err == nil && (cfg.Mesh != r.tok.Mesh || cfg.Node != r.tok.Node):
		return "", fmt.Errorf("%w: %s holds %s of mesh %s; use another --data directory", ErrDataDir, d, cfg.Node, cfg.Mesh)
	case err == nil:
		return fmt.Sprintf("%s holds an unfinished join of %s: resuming", d, cfg.Node), nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	entries, err := os.ReadDir(string(d))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	pendingHere := slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == pendingFile })
	partial := false
	for _, e := range entries {
		switch {
		case e.Name() == pendingFile || e.Name() == datadir.LockFile:
		case pendingHere && savedBeforeConfig(e.Name()):
			// A run that failed while saving the keys it was handed (a disk
			// error), before mesh.json: the token is spent on this join, and only
			// this directory's keys can finish it. It was refused as "not empty".
			partial = true
		default:
			return "", fmt.Errorf("%w: %s is not empty and holds no join; use an empty or new directory", ErrDataDir, d)
		}
	}
	if partial {
		return fmt.Sprintf("%s holds the keys of an unfinished join, saved in part: resuming", d), nil
	}
	if pendingHere {
		// A run that stopped before the mesh's answer, or whose login was refused
		// (exit 3): it said "is new" as the next run resumed it.
		return fmt.Sprintf("%s holds the keys an earlier run of a join presented (%s)", d, pendingFile), nil
	}
	return fmt.Sprintf("%s is new", d), nil
}

// savedBeforeConfig reports whether name is a file the join writes before
// mesh.json (join step 3), or a temporary file of one.
func savedBeforeConfig(name string) bool {
	for _, f := range []string{datadir.CACertFile, datadir.TLSKeyFile, datadir.TLSCertFile, datadir.SigningKeyFile, datadir.AdminCredsFile, datadir.CurveKeyFile} {
		if name == f || strings.HasPrefix(name, "."+f+".tmp-") {
			return true
		}
	}
	return false
}

// keys returns the join's nkey and curve key pair, kept in the data directory until the
// join completes so that a re-run presents the same ones.
func (r *run) keys() (nkeys.KeyPair, nkeys.KeyPair, error) {
	th := r.tok.SecretHash()
	path := r.o.Dir.Path(pendingFile)
	// The keys of an earlier run are the ones the mesh may have recorded for this
	// token: a file that holds them but cannot be read is refused, never replaced
	// (new keys would be refused as token_used, and the recorded ones lost).
	unusable := func(why string) error {
		return fmt.Errorf("%w: %s is unusable (%s): it holds the keys an earlier run of this join presented. If no run was admitted, remove it and run again; if one was, the keys are lost: remove it and join with a new token",
			ErrDataDir, path, why)
	}
	data, err := r.o.Dir.ReadFile(pendingFile)
	switch {
	case errors.Is(err, datadir.ErrTooLarge):
		return nil, nil, unusable("larger than any pending join")
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return nil, nil, err
	case err == nil:
		p, why := parsePending(data)
		if why != "" {
			return nil, nil, unusable(why)
		}
		if p.Node == r.tok.Node && p.TokenHash == hex.EncodeToString(th[:]) {
			nk, err1 := nkeys.FromSeed([]byte(p.NkeySeed))
			ck, err2 := nkeys.FromCurveSeed([]byte(p.CurveSeed))
			if err1 != nil || err2 != nil {
				return nil, nil, unusable("its keys are not valid seeds")
			}
			r.step("keys", "presenting again the keys an earlier run of this join presented, should the mesh have admitted them")
			return nk, ck, nil
		}
		admittedBy := r.savedMesh()
		if r.savedInPart() && (p.Node != r.tok.Node || admittedBy != "" && admittedBy != r.tok.Mesh) {
			// The mesh admitted another node's join with these keys, and only
			// they can finish it: replaced, they were lost for good, and that node
			// stayed admitted (a review). Another token of this node's is another
			// matter: the mesh mints one only once the node is removed (or no
			// token of it was used), when these keys finish nothing; unless it is
			// another mesh's, whose admission of the node id stands.
			of, remove := p.Node, "meshctl control remove "+p.Node
			if admittedBy != "" && admittedBy != r.tok.Mesh {
				of, remove = p.Node+" into mesh "+admittedBy, "meshctl control remove "+p.Node+", in mesh "+admittedBy
			}
			return nil, nil, fmt.Errorf("%w: %s holds the keys of a join of %s that the mesh admitted (its identity was saved in part), and only they can finish it: "+
				"run meshctl join with that join's token while it is valid, and join %s of mesh %s into a new --data directory. "+
				"If that join is to be given up, remove its node (%s) and this directory",
				ErrDataDir, r.o.Dir, of, r.tok.Node, r.tok.Mesh, remove)
		}
		// The pending join of another token of this node (whose node was
		// removed, or never admitted with it), or of another node the mesh may
		// not have admitted: this join starts afresh.
		if p.Node != r.tok.Node {
			// Its answer may have been lost after the mesh admitted it: said
			// how to tell, and what then stays to do (a security review).
			r.step("keys", "%s held the keys of a join of %s, which saved nothing here: new keys replace them. If the mesh admitted %s with them (its answer lost; meshctl nodes lists it, never alive), remove it: meshctl control remove %s",
				pendingFile, p.Node, p.Node, p.Node)
		} else {
			r.step("keys", "%s held the keys of a join of this node with another token: new keys replace them", pendingFile)
		}
	}
	nk, err := nkeys.CreateUser()
	if err != nil {
		return nil, nil, err
	}
	ck, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, nil, err
	}
	ns, _ := nk.Seed()
	cs, _ := ck.Seed()
	data, _ = json.Marshal(pending{Node: r.tok.Node, TokenHash: hex.EncodeToString(th[:]), NkeySeed: string(ns), CurveSeed: string(cs)})
	if err := datadir.WriteFile(path, data, 0o600); err != nil {
		return nil, nil, err
	}
	return nk, ck, nil
}

// savedInPart reports whether the data directory holds files a join writes only
// after the mesh's answer, before mesh.json: the mesh admitted the join whose keys
// join-pending.json holds. (A mesh.json of another node is refused before the keys
// are read: checkDir.)
func (r *run) savedInPart() bool {
	entries, _ := os.ReadDir(string(r.o.Dir))
	return slices.ContainsFunc(entries, func(e os.DirEntry) bool { return savedBeforeConfig(e.Name()) })
}

// savedMesh returns the mesh whose CA certificate the data directory holds, the
// first file a join saves after the mesh's answer; empty when there is none, or
// it names no mesh. join-pending.json does not say which mesh admitted the join
// (and a meshctl older than that field would find the file unusable).
func (r *run) savedMesh() string {
	data, err := r.o.Dir.ReadFile(datadir.CACertFile)
	if err != nil {
		return ""
	}
	cert, err := pki.ParseCertificatePEM(data)
	if err != nil {
		return ""
	}
	mesh, _ := pki.MeshOf(cert)
	return mesh
}

// parsePending reads the keys an earlier run of a join kept (pendingFile), one way
// only: one JSON object of pending's members, each once, nothing after it. why says
// what is wrong, without quoting the file (it holds seeds); empty when p is read.
func parsePending(data []byte) (p pending, why string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return pending{}, "not a pending join: " + jsonReason(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return pending{}, "data after the pending join"
	}
	// encoding/json keeps the last of two members of one name: the keys an
	// earlier run presented are read one way only, or not at all.
	if err := jsonkeys.Check(data, &p); err != nil {
		return pending{}, "not a pending join: " + err.Error()
	}
	return p, ""
}

// jsonReason names what is wrong with a pending file without quoting it: it holds
// seeds.
func jsonReason(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "empty or cut short"
	case errors.As(err, &syn):
		return fmt.Sprintf("not JSON at byte %d", syn.Offset)
	case errors.As(err, &typ) && typ.Field == "":
		return "not a JSON object"
	case errors.As(err, &typ):
		return fmt.Sprintf("field %q of the wrong type", typ.Field)
	}
	return "an unknown field"
}

func (r *run) join(ctx context.Context) error {
	d := r.o.Dir
	// 1. Admission, over a connection whose pin is checked before the secret leaves.
	nk, ck, err := r.keys()
	if err != nil {
		return err
	}
	resp, broker, err := r.admission(ctx, nk, ck)
	if err != nil {
		return r.dropSpentKeys(err)
	}
	adm := resp.Control
	r.step("admit", "the mesh (via %s) admitted %s as a control node", broker, r.tok.Node)

	// 2. Open and check what was handed over.
	ident, err := seal.OpenIdentity(r.tok.Secret, r.tok.Mesh, r.tok.Node, adm.Sealed)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	caCert, err := pki.ParseCertificatePEM([]byte(resp.CAPEM))
	if err != nil || pki.PinOf(caCert) != r.tok.CAPin {
		return fmt.Errorf("%w: the CA handed over is not the pinned one", ErrBadAnswer)
	}
	leafCert, err := pki.ParseCertificatePEM(ident.CertPEM)
	if err != nil {
		return fmt.Errorf("%w: TLS identity: %v", ErrBadAnswer, err)
	}
	if err := pki.VerifyPinnedChain([]*x509.Certificate{leafCert, caCert}, r.tok.CAPin); err != nil {
		return fmt.Errorf("%w: the TLS identity does not chain to the pinned CA: %v", ErrBadAnswer, err)
	}
	if _, err := pki.Certificate(pki.Leaf{CertPEM: ident.CertPEM, KeyPEM: ident.KeyPEM}, []byte(resp.CAPEM)); err != nil {
		return fmt.Errorf("%w: TLS identity: %v", ErrBadAnswer, err)
	}
	keyPEM, err := seal.FromCurveKey(ck, adm.SigningKey, adm.Sealer)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	signingKeys, err := datadir.ParseSigningKeys(keyPEM)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	anchor := declarations.Keyring{Mesh: r.tok.Mesh, Epoch: 0, Keys: []string{hex.EncodeToString(r.tok.SigningKey)}}
	kr, err := declarations.VerifyKeyring(resp.Keyring, anchor, r.tok.Mesh)
	if err != nil {
		return fmt.Errorf("%w: keyring: %v", ErrBadAnswer, err)
	}
	for _, k := range signingKeys {
		if !slices.Contains(kr.Keys, hex.EncodeToString(k.Public().(ed25519.PublicKey))) {
			return fmt.Errorf("%w: a signing key handed over is not in the mesh's keyring", ErrBadAnswer)
		}
	}
	r.step("keys", "TLS identity (chains to the pinned CA), signing key (in keyring epoch %d) and operator credentials received", kr.Epoch)

	listen, err := r.listenable(adm.Self)
	if err != nil {
		return err
	}

	// 3. Write the data directory, marked as joining until the end.
	cfg := datadir.Config{
		Format: datadir.ConfigFormat, Mesh: r.tok.Mesh, Node: r.tok.Node,
		Listen: listen, RaftListen: adm.Self.Raft, ClusterListen: adm.Self.Cluster,
		Brokers: resp.Brokers, CAPin: hex.EncodeToString(r.tok.CAPin[:]), AdminAccount: adm.AdminAccount,
		CAHolder: adm.CAHolder, Joining: true, Joined: true,
	}
	if listen != adm.Self.Broker {
		cfg.Advertise = adm.Self.Broker
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{datadir.CACertFile, []byte(resp.CAPEM), 0o644},
		{datadir.TLSKeyFile, ident.KeyPEM, 0o600},
		{datadir.TLSCertFile, ident.CertPEM, 0o644},
		{datadir.SigningKeyFile, keyPEM, 0o600},
		{datadir.AdminCredsFile, ident.Creds, 0o600},
	} {
		if err := datadir.WriteFile(d.Path(f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	if err := d.SaveCurveKey(ck); err != nil {
		return err
	}
	if err := d.SaveConfig(cfg); err != nil {
		return err
	}
	r.step("save", "identity and keys saved in %s (secrets 0600)", d)

	// 4. Raft: nonvoter, proof of replication, promotion.
	err = r.member(ctx, cfg, adm)
	if errors.Is(err, ErrRemoved) {
		// The token is used up and its node removed: its keys finish no join, and
		// kept they would stand in the way of the new token's join into this
		// directory, which the error advises.
		if rerr := os.Remove(d.Path(pendingFile)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("%w; and %v: remove %s before joining with a new token", err, rerr, d.Path(pendingFile))
		}
		r.step("keys", "removed the keys of this join (%s): the node was removed, so no join can finish with them", pendingFile)
	}
	return err
}

// listenable returns the address the node's broker listens on (Options.Listen, or
// an earlier run's, or the one it was admitted with, self.Broker) once this machine
// can listen on it and on the node's Raft and cluster addresses. Found at the route,
// the last step, a node admitted with an address this machine lacks (a public one,
// NAT'd) had been added to Raft and handed the keys, and was left a nonvoter nothing
// answered at (a review).
func (r *run) listenable(self api.ControlMember) (string, error) {
	listen, flag := self.Broker, "the broker address the node was admitted with"
	if cfg, err := r.o.Dir.ReadConfigRaw(); err == nil && cfg.Joining && cfg.Listen != "" && Dialled(cfg) == self.Broker {
		// Only for the address hosts dial that earlier run was admitted with: a
		// join with a new token (its node removed, minted with another --addr)
		// listened where the old one said, and hosts dialled the new address in
		// vain.
		listen, flag = cfg.Listen, "the broker address an earlier run of this join listened on"
	}
	if r.o.Listen != "" {
		listen, flag = r.o.Listen, "--listen"
	}
	if listen != self.Broker {
		if _, err := bootstrap.CheckAddresses(listen, self.Raft, self.Cluster, bootstrap.AddressFlags{Broker: "--listen", Raft: "the node's Raft address", Cluster: "the node's cluster address"}, true); err != nil {
			return "", err
		}
	}
	if err := busyaddr.Check(listen, self.Raft, self.Cluster); err != nil {
		var le *busyaddr.ListenError
		if errors.As(err, &le) && le.Addr == listen && r.o.Listen == "" && (sameHost(listen, self.Raft) || sameHost(listen, self.Cluster)) {
			// --listen moves the broker alone: the Raft and cluster addresses
			// on the same missing address failed the run that followed this
			// advice (a docs walkthrough).
			return "", fmt.Errorf("%w: %w (%s). The mesh admitted %s, and nothing was added to Raft: its Raft and cluster addresses (%s, %s) must be this machine's own, and the token gave them on the same address, "+
				"so --listen (which moves the broker alone) cannot help. Remove the node (meshctl control remove %s) and mint a control token with the address hosts dial and this machine's own for Raft and the cluster: "+
				"meshctl token --role control --node %s --addr PUBLIC:PORT --raft-addr OWN:PORT --cluster-addr OWN:PORT, then meshctl join --listen OWN:PORT with it",
				ErrCannotListen, err, flag, r.tok.Node, self.Raft, self.Cluster, r.tok.Node, r.tok.Node)
		}
		if errors.As(err, &le) && le.Addr == listen && r.o.Listen == "" {
			return "", fmt.Errorf("%w: %w (%s). The mesh admitted %s, and nothing was added to Raft: if hosts reach this machine at %s through NAT, give the address it listens on, meshctl join --listen IP:PORT (0.0.0.0:PORT for every address), and run the join again with the same token; "+
				"if the address is wrong, remove the node (meshctl control remove %s) and mint a control token with this machine's address",
				ErrCannotListen, err, flag, r.tok.Node, self.Broker, r.tok.Node)
		}
		return "", fmt.Errorf("%w: %w. The mesh admitted %s, and nothing was added to Raft: run the join again with the same token once this machine can listen there, or remove the node (meshctl control remove %s) and mint a control token with this machine's addresses",
			ErrCannotListen, err, r.tok.Node, r.tok.Node)
	}
	return listen, nil
}

// Dialled is the broker address hosts dial at the node of cfg: Advertise, when it
// joined with --listen, else the one it listens on.
func Dialled(cfg datadir.Config) string {
	if cfg.Advertise != "" {
		return cfg.Advertise
	}
	return cfg.Listen
}

// dropSpentKeys removes the keys of this join (join-pending.json) once the mesh's
// answer refused its token for good (tokenSpent: used, expired, cancelled, unknown,
// another role or node): no join can finish with them, and a seed nobody will use
// should not lie about. After any other failure they stay, for a run with the same
// token (a refusal by an older control node among them, which uses nothing up): a login a broker refused (ErrLoginRefused) among them, since a broker
// refuses some for a minute only, without saying which.
func (r *run) dropSpentKeys(err error) error {
	if !tokenSpent(err) {
		return err
	}
	path := r.o.Dir.Path(pendingFile)
	if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		return fmt.Errorf("%w; the keys of this join can no longer be used, but %v: remove %s", err, rerr, path)
	}
	r.step("keys", "removed the keys of this join (%s): the mesh refused this token for good, so no join can finish with it", pendingFile)
	return err
}

// tokenID is the token's id as the mesh stores it.
func (r *run) tokenID() string {
	h := r.tok.SecretHash()
	return hex.EncodeToString(h[:])
}

func (r *run) admission(ctx context.Context, nk, ck nkeys.KeyPair) (api.EnrolResponse, string, error) {
	var resp api.EnrolResponse
	pub, _ := nk.PublicKey()
	nc, addr, err := r.dialAdmission(ctx, nk, pub)
	if err != nil {
		return resp, "", err
	}
	defer nc.Close()
	curve, _ := ck.PublicKey()
	proof, _ := nk.Sign(api.KeyProofMessage(r.tok.Mesh, r.tok.Node, pub))
	req, _ := json.Marshal(api.EnrolRequest{V: api.ProtocolVersion, Mesh: r.tok.Mesh, Node: r.tok.Node, Role: string(tokenfmt.RoleControl),
		TokenID: r.tokenID(), TokenProof: base64.StdEncoding.EncodeToString(r.tok.Prove(r.tok.Mesh, r.tok.Node, pub)),
		PublicKey: pub, KeyProof: base64.StdEncoding.EncodeToString(proof),
		CAPin: hex.EncodeToString(r.tok.CAPin[:]), SigningKey: hex.EncodeToString(r.tok.SigningKey),
		Agent: "meshctl join", CurveKey: curve, Rules: state.ApplyRules})
	// Sent again when unanswered (a leader that stopped leading as it came, or
	// a control node cut off, took it): the earlier sendings' answers are heard
	// too, and a refusal one of them may still overtake is held (admitSettles).
	a, err := resend.Send(ctx, nc, resend.Request{Subject: api.EnrolKeySubject(r.tok.Node, pub), Data: req,
		Timeout: admissionTimeout, Resend: admissionResend, Settles: admitSettles, Pending: admitPending})
	if ctx.Err() != nil {
		return resp, "", r.interrupted(ctx, "waiting for the mesh to admit "+r.tok.Node, "")
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return resp, "", fmt.Errorf("%w; run join again with the same token", operator.ErrNoLeader)
	}
	if errors.Is(err, resend.ErrNotSent) {
		return resp, "", fmt.Errorf("%w: the connection to %s was lost before the join request could be sent (%w); nothing reached the mesh: run join again with the same token", operator.ErrUnreachable, addr, err)
	}
	if err != nil {
		return resp, "", fmt.Errorf("%w to the join request (%v); run join again with the same token", operator.ErrNoAnswer, err)
	}
	msg := a.Msg
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return resp, "", fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	if !resp.OK || resp.Error != nil {
		if resp.Error == nil {
			return resp, "", fmt.Errorf("%w: a refusal without a reason", ErrBadAnswer)
		}
		return resp, "", refusalError(resp.Error, a.Unsettled > 0 && !admitSettles(msg.Data))
	}
	if resp.Control == nil || resp.Mesh != r.tok.Mesh || resp.Node != r.tok.Node {
		return resp, "", fmt.Errorf("%w: the answer is not a control admission for %s", ErrBadAnswer, r.tok.Node)
	}
	return resp, addr, nil
}

// dialStagger is how long an attempt at one of the join's brokers goes unanswered
// before the next one starts, as meshhost enrol's: one after another, each given
// the dial's 10 s, a token naming control nodes that drop packets (a node lost, the
// reason one is added) kept the join that long per node before it reached one that
// answers.
const dialStagger = 2 * time.Second

// dialAdmission connects to the first of the join's brokers that completes a pinned
// handshake and takes the join's login (the token's proof, and the key nk, pub,
// signing the server's nonce bound to the TLS session, so that a relay holding a
// leaf of the mesh CA can log in with neither: decision 0018). The brokers are
// tried in their order, the next starting when the one before has failed or has not
// answered within dialStagger. The first login taken is kept and the other attempts
// end: those still dialling or in their handshake stop there, and one that reaches
// its login after that signs nothing, so sends no login (a login spends the
// token's connection budget). When none takes it, the faults are said in the
// brokers' order.
func (r *run) dialAdmission(ctx context.Context, nk nkeys.KeyPair, pub string) (*nats.Conn, string, error) {
	type attempt struct {
		i    int // the broker's place among the join's
		addr string
		nc   *nats.Conn
		err  error
	}
	// Each attempt has its own context: the dialer closes its connection when the
	// context ends, so the one kept ends with the caller's context, or once closed
	// (the ClosedHandler), and the others when they lose.
	stops := make([]context.CancelFunc, len(r.brokers))
	stopOthers := func(keep int) {
		for i, stop := range stops {
			if i != keep && stop != nil {
				stop()
			}
		}
	}
	kept := -1
	defer func() { stopOthers(kept) }()
	key := link.Lend(nk.Sign)
	defer key.End()
	password := api.EnrolPassword(r.tokenID(), r.tok.Prove(r.tok.Mesh, r.tok.Node, pub))
	results := make(chan attempt, len(r.brokers))
	started, pending := 0, 0
	startNext := func() {
		i, addr := started, r.brokers[started].String()
		started++
		pending++
		actx, stop := context.WithCancel(ctx)
		stops[i] = stop
		go func() {
			d := &broker.BoundDialer{TLS: pki.PinnedClientConfig(r.tok.CAPin), Timeout: 10 * time.Second, Context: actx}
			nc, err := nats.Connect("tls://"+addr,
				nats.SetCustomDialer(d),
				nats.TLSHandshakeFirst(),
				nats.UserInfo(authn.EnrolUserPrefix+r.tok.Node, password),
				nats.Nkey(pub, d.Sign(key.Sign)),
				nats.CustomInboxPrefix(api.EnrolInbox(r.tok.Node, pub)),
				nats.Timeout(10*time.Second), nats.NoReconnect(),
				nats.ClosedHandler(func(*nats.Conn) { stop() }),
			)
			results <- attempt{i, addr, nc, err}
		}()
	}
	// closeLate ends the attempts but keep's, and closes their connections once
	// they end, for no goroutine to outlive the join holding a login.
	closeLate := func(keep int) {
		stopOthers(keep)
		go func(n int) {
			for ; n > 0; n-- {
				if a := <-results; a.nc != nil {
					a.nc.Close()
				}
			}
		}(pending)
	}
	stagger := time.NewTimer(dialStagger)
	defer stagger.Stop()
	startNext()

	errs := make([]string, len(r.brokers))
	substituted, refused := 0, 0
	var clockErr *pki.ClockError
	for pending > 0 {
		var a attempt
		select {
		case <-ctx.Done():
			closeLate(-1)
			return nil, "", r.interrupted(ctx, "connecting to the mesh", "nothing was sent to the mesh")
		case <-stagger.C:
			if started < len(r.brokers) {
				startNext()
				stagger.Reset(dialStagger)
			}
			continue
		case a = <-results:
			pending--
		}
		if a.err == nil && ctx.Err() == nil {
			// The key is taken back before anything else (the step's writer may
			// block: a pipe), so that no other attempt logs in meanwhile.
			key.End()
			kept = a.i
			closeLate(kept)
			r.step("connect", "%s: TLS handshake checked against the pinned CA", a.addr)
			return a.nc, a.addr, nil
		}
		stops[a.i]()
		if ctx.Err() != nil {
			if a.nc != nil {
				a.nc.Close()
			}
			closeLate(-1)
			return nil, "", r.interrupted(ctx, "connecting to the mesh at "+a.addr, "nothing was sent to the mesh")
		}
		if started < len(r.brokers) {
			startNext()
			stagger.Reset(dialStagger)
		}
		addr, err := a.addr, a.err
		var ce *pki.ClockError
		switch {
		case errors.Is(err, pki.ErrPinMismatch):
			r.step("connect", "%s: REFUSED: not the mesh's CA; nothing was sent", addr)
			errs[a.i] = addr + ": " + pki.ErrPinMismatch.Error()
			substituted++
		case errors.As(err, &ce):
			// The mesh's own chain, out of its validity by this machine's clock:
			// nothing was sent, and a run once the clock is set goes on.
			clockErr = ce
			r.step("connect", "%s: REFUSED: the certificate chains to the pinned CA but is not valid at this machine's time (%s); nothing was sent", addr, r.o.Now().UTC().Format(time.RFC3339))
			errs[a.i] = addr + ": not valid at this machine's time"
		case errors.Is(err, nats.ErrAuthorization):
			// The pin was checked: the mesh itself refused the login, before any
			// request (a token it knows but will not admit is let in far enough
			// to be told why, in its answer). The broker does not say why, and
			// some refusals pass within a minute: another broker may take it,
			// and the keys stay for a run with the same token.
			refused++
			r.step("connect", "%s: the mesh refused the login (a broker does not say why); nothing was sent", addr)
			errs[a.i] = addr + ": login refused"
		default:
			r.step("connect", "%s: unreachable (%v)", addr, err)
			errs[a.i] = addr + ": " + err.Error()
		}
	}
	if refused > 0 {
		// Said as a refusal the mesh sends in its answer (token_unknown, exit 4),
		// it deleted the keys a resumed join needs: a join the mesh had admitted
		// was then refused token_used, and a new token node_exists.
		return nil, "", fmt.Errorf("%w (%s). The token was not spent by this run, and the keys of this join are kept in %s for a run with the same token. "+
			"A broker refuses while too many connections used the token in the last 30 seconds (each run of join uses one), while this address made too many failed attempts in the last minute, "+
			"and while the control node holds as many hosts as it has room for (its log says so): for these, wait a minute and run %s again with the same token. "+
			"It refuses for good a token the mesh never minted (or one cancelled or expired more than a day ago, or minted by a meshctl older than the control plane's), a key that was revoked, and a login relayed by something on the path that holds a certificate of the mesh (the secret was not sent): "+
			"if a run a minute later is refused again, look on the machine that holds the CA key whether the token is pending (meshctl token list) and mint a new one",
			ErrLoginRefused, strings.Join(errs, "; "), r.o.Dir.Path(pendingFile), r.rerun())
	}
	if clockErr != nil && substituted == 0 {
		// A broker that is the mesh by its chain, refused for this machine's
		// clock: the clock is what to fix, whatever the others did.
		return nil, "", fmt.Errorf("%w; nothing was sent: run %s again with the same token once the clock is right (%s)", clockErr, r.rerun(), strings.Join(errs, "; "))
	}
	if substituted > 0 && substituted == len(r.brokers) {
		return nil, "", pki.ErrPinMismatch
	}
	return nil, "", fmt.Errorf("%w: no broker of the mesh could be reached (%s); run it again once one runs, or, if the token names only control nodes that are gone (minted before the others served), "+
		"give a broker of a control node that runs: meshctl join --broker IP:PORT (the mesh's CA pin is checked there as at the token's)", operator.ErrUnreachable, strings.Join(errs, "; "))
}

// admissionTimeout bounds the wait for the mesh's answer to a join (a leader
// election within it); admissionResend is how long one sending goes unanswered
// before the request is sent again.
const (
	admissionTimeout = 20 * time.Second
	admissionResend  = 5 * time.Second
)

// admitSettles reports whether an answer to an admission is taken while an earlier
// sending is unanswered: an admission is, and a refusal no sending still under way
// can overtake. Not unavailable, internal or disk_full (this sending found no
// leader, or could not be committed or confirmed) nor token_expired (it came after
// the token's hour to a leader that had not yet applied the earlier sending's
// admission, made within it).
func admitSettles(data []byte) bool {
	var resp api.EnrolResponse
	if err := json.Unmarshal(data, &resp); err != nil || resp.OK || resp.Error == nil {
		return true
	}
	switch resp.Error.Code {
	case api.CodeUnavailable, api.CodeInternal, api.CodeDiskFull, api.CodeTokenExpired:
		return false
	}
	return true
}

// refusalError is the error of the mesh's refusal e of an admission (answerError);
// overtakable says an earlier sending of the request went unanswered and may still
// have admitted this node, so that the refusal is not final: ErrUnavailable, the
// keys kept for the run again.
func refusalError(e *api.Error, overtakable bool) error {
	if overtakable {
		return fmt.Errorf("%w (%s): %w; but the request was sent again after going unanswered, and the mesh may have admitted this node by an earlier sending: run the join again with the same token, which presents the same keys and is answered from the mesh's records if it did",
			ErrUnavailable, e.Code, e)
	}
	return answerError(e)
}

// admitPending reports whether a refusal says its sending may still be carried
// out: unavailable and internal (a commit that could not be confirmed); not
// token_expired or disk_full, refused before anything was recorded.
func admitPending(data []byte) bool {
	var resp api.EnrolResponse
	return json.Unmarshal(data, &resp) == nil && resp.Error != nil && (resp.Error.Code == api.CodeUnavailable || resp.Error.Code == api.CodeInternal)
}

// answerError is the error of the mesh's refusal e of an admission, e kept for
// errors.As: ErrUnavailable when the mesh cannot admit anyone now (an election, a
// commit that failed, a full disk) or failed to answer (internal: its log says
// why), where a join run again with the token is answered from the state should
// the mesh have recorded it; ErrRefused for a refusal of the token or the request.
func answerError(e *api.Error) error {
	switch e.Code {
	case api.CodeUnavailable, api.CodeInternal, api.CodeDiskFull:
		return fmt.Errorf("%w (%s): %w; run the join again with the same token", ErrUnavailable, e.Code, e)
	}
	return fmt.Errorf("%w (%s): %w", ErrRefused, e.Code, e)
}

// tokenSpent reports whether err is a refusal after which no join with the token
// can finish: the token used, expired, cancelled or not the mesh's, or its node or
// key taken. Other refusals (an older control node, a malformed request) leave the
// token as it was, which the mesh says too.
func tokenSpent(err error) bool {
	var ae *api.Error
	if !errors.Is(err, ErrRefused) || !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case api.CodeTokenUnknown, api.CodeTokenUsed, api.CodeTokenExpired, api.CodeTokenOtherNode, api.CodeTokenWrongRole,
		api.CodeTokenOtherMesh, api.CodeTokenStaleKey, api.CodeTokenCancelled, api.CodeNodeExists, api.CodeKeyRevoked, api.CodeKeyInUse:
		return true
	}
	return false
}

// member makes the node a confirmed Raft member with a route to the other brokers.
func (r *run) member(ctx context.Context, cfg datadir.Config, adm *api.ControlAdmission) error {
	d := r.o.Dir
	leaf, err := d.LoadLeaf()
	if err != nil {
		return err
	}
	caPEM, err := d.ReadFile(datadir.CACertFile)
	if err != nil {
		return err
	}
	mutual, err := pki.MutualConfig(leaf, caPEM)
	if err != nil {
		return err
	}
	fsm := state.NewFSM()
	var (
		mu     sync.Mutex
		probes []string
	)
	fsm.OnApply(func(c *state.Command, _ state.Result) {
		if c.Op == state.OpProbe && c.Probe != nil {
			mu.Lock()
			probes = append(probes, c.Probe.ID)
			mu.Unlock()
		}
	})
	node, err := replication.Open(replication.Config{
		Dir: d.Path(datadir.RaftDir), ID: cfg.Node, Bind: cfg.RaftListen, TLS: mutual, FSM: fsm,
		Timeouts: r.o.Timeouts, Logger: r.o.Logger,
	})
	if errors.Is(err, replication.ErrDamaged) {
		// The store this join began: a write that failed as it ran (a disk error)
		// leaves it refused, and the next run often reads it. The advice for a
		// member's damaged store (remove the node, a new token) comes second.
		return fmt.Errorf("%w\nthis join has not completed: run the same meshctl join again first; only if the store is refused again, follow the advice above", err)
	}
	if err != nil {
		return err
	}
	defer node.Close()
	op, err := dial(ctx, d, operator.Options{Servers: cfg.Brokers, Joining: true})
	if ctx.Err() != nil {
		return r.interrupted(ctx, "connecting to the control plane", "")
	}
	if err != nil {
		return err
	}
	defer op.Close()
	// again is how the join is resumed.
	again := fmt.Sprintf("run the same %s again with the same token", r.rerun())
	// rollback takes the node out of Raft again, for a join that will not be
	// confirmed. It returns nil once the control plane said it did, and otherwise
	// ErrRollbackFailed, saying how to resume (resume) or give up on the node: the
	// message said "rolled back" whether or not the call went through, and a node
	// left a nonvoter was then believed gone.
	rollback := func(ctx context.Context, resume string) error {
		err := call(ctx, op, api.OpControlAbort, api.ControlRequest{Node: cfg.Node}, nil)
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", abortWait) // the only bound given
		}
		return r.rollbackError(cfg.Node, err, resume)
	}
	// interrupted rolls back (for at most abortWait) and says how it went.
	interrupted := func(what string) error {
		abortCtx, cancel := context.WithTimeout(context.Background(), abortWait)
		defer cancel()
		if err := rollback(abortCtx, again); err != nil {
			return fmt.Errorf("%w while %s; %w", context.Cause(ctx), what, err)
		}
		return r.interrupted(ctx, what, "the join was rolled back")
	}

	// removed says so when the node was removed meanwhile (meshctl control remove
	// by another operator): its calls then fail as read-only or as no such node,
	// and its log stops, which would otherwise read as a network fault after the
	// whole confirmation wait.
	removed := func() error {
		var res api.NodesResult
		if call(ctx, op, api.OpNodes, api.NodesRequest{Nodes: []string{cfg.Node}, Limit: 1}, &res) != nil {
			return nil
		}
		for _, c := range res.Control {
			if c.ID == cfg.Node && c.Raft == api.RaftRemoved {
				return fmt.Errorf("%w: control node %s was removed (meshctl control remove) while this join ran, and the token it joined with is used up: "+
					"mint a new control token for it where the CA key is (meshctl token --role control --node %s --addr %s) and run meshctl join --data %s with it",
					ErrRemoved, cfg.Node, cfg.Node, Dialled(cfg), d)
			}
		}
		return nil
	}

	var add api.ControlAddResult
	if err := call(ctx, op, api.OpControlAdd, api.ControlRequest{Node: cfg.Node}, &add); err != nil {
		if ctx.Err() != nil {
			return interrupted("adding " + cfg.Node + " as a Raft nonvoter")
		}
		if rerr := removed(); rerr != nil {
			return rerr
		}
		// Nothing to roll back (it was "rolled back", exit 1, where nothing was
		// tried): the mesh admitted the node, and the same join run again
		// resumes. The error keeps its kind: no answer or a lost connection
		// exits 3, a refusal 4. A request the mesh refuses as such (bad_request:
		// another member at its Raft address) says itself what to do, which a
		// rerun is not.
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeBadRequest {
			return fmt.Errorf("adding %s as a Raft nonvoter: %w", cfg.Node, err)
		}
		return fmt.Errorf("adding %s as a Raft nonvoter: %w\nthe mesh has admitted %s: run the same meshctl join again to resume", cfg.Node, err, cfg.Node)
	}
	r.step("raft", "added as a nonvoter; Raft replicates the log to %s", cfg.RaftListen)

	confirmWait := time.NewTimer(r.o.ConfirmTimeout)
	defer confirmWait.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	look := time.NewTicker(2 * time.Second)
	defer look.Stop()
	// An entry of rules newer than this meshctl's stops its state machine, while
	// Raft's applied index goes on past the probe: the join is this meshctl's to
	// refuse, not "not replicating" (exit 7, as serve says of the same log).
	halted := func() error {
		const resume = "run the same join with the meshctl the other control nodes run"
		if err := rollback(context.Background(), resume); err != nil {
			return fmt.Errorf("%w\n%w", fsm.HaltErr(), err)
		}
		return fmt.Errorf("%w\n%s was taken out of the mesh again: %s", fsm.HaltErr(), cfg.Node, resume)
	}
	for node.AppliedIndex() < add.ProbeIndex {
		select {
		case <-ctx.Done():
			return interrupted("waiting for this node to replicate the probe entry")
		case <-fsm.Halted():
			return halted()
		case <-confirmWait.C:
			if rerr := removed(); rerr != nil {
				return rerr
			}
			why := fmt.Sprintf("after %s this node had applied log index %d, not the probe at %d: the leader cannot reach %s (firewall? wrong address?)",
				r.o.ConfirmTimeout, node.AppliedIndex(), add.ProbeIndex, cfg.RaftListen)
			return r.notConfirmed(cfg.Node, why, rollback(context.Background(), again))
		case <-look.C:
			if rerr := removed(); rerr != nil {
				return rerr
			}
		case <-poll.C:
		}
	}
	if fsm.HaltErr() != nil {
		return halted()
	}
	mu.Lock()
	seen := slices.Clone(probes)
	mu.Unlock()
	// Caught up from a snapshot taken after the probe (a busy log is compacted
	// quickly), the node never applied the entry; the state it restored names it.
	fsm.Read(func(s *state.State) {
		if cn := s.ControlNodes[cfg.Node]; cn != nil && cn.Probe != "" {
			seen = append(seen, cn.Probe)
		}
	})
	var conf api.ControlConfirmResult
	if err := call(ctx, op, api.OpControlConfirm, api.ControlConfirmRequest{Node: cfg.Node, Probes: seen}, &conf); err != nil {
		if ctx.Err() != nil {
			// The confirmation may be carried out after all (a promotion): no
			// rollback, the next run finds the node a member and goes on.
			return r.interrupted(ctx, "waiting for the mesh to confirm "+cfg.Node, "")
		}
		if rerr := removed(); rerr != nil {
			return rerr
		}
		return r.confirmFailed(cfg.Node, add.ProbeIndex, err, func() error { return rollback(context.Background(), again) })
	}
	r.step("confirm", "replicating: applied the probe entry at index %d, which only the log carried", add.ProbeIndex)
	if conf.Voter {
		r.step("promote", "now a voter (voters: %s)", strings.Join(conf.Voters, ", "))
	} else {
		r.step("promote", "stays a nonvoter for now: %s", conf.Note)
	}
	if len(conf.Promoted) > 0 && !(len(conf.Promoted) == 1 && conf.Voter) {
		r.step("promote", "promoted together: %s", strings.Join(conf.Promoted, ", "))
	}

	// Removed by another operator after the confirmation: "joined" sent the
	// operator to a serve that exits 6 at once, and a route the removal refuses
	// was blamed on the network. Asked of the node's own replica of the log
	// (which the removal reaches before the node is cut off) and of the mesh.
	gone := func() bool {
		var out bool
		fsm.Read(func(s *state.State) { out = s.ControlNodes[cfg.Node] != nil && s.ControlNodes[cfg.Node].Removed })
		return out
	}
	removedLate := func() error {
		if rerr := removed(); rerr != nil {
			return rerr
		}
		if gone() {
			return fmt.Errorf("%w: control node %s was removed (meshctl control remove) as this join finished, and the token it joined with is used up: "+
				"mint a new control token for it where the CA key is (meshctl token --role control --node %s --addr %s) and run meshctl join --data %s with it",
				ErrRemoved, cfg.Node, cfg.Node, Dialled(cfg), d)
		}
		return nil
	}

	// 5. A route to another broker over mutual TLS.
	if err := r.route(ctx, cfg, adm, gone); err != nil {
		if rerr := removedLate(); rerr != nil {
			return rerr
		}
		return err
	}
	if rerr := removedLate(); rerr != nil {
		return rerr
	}
	cfg.Joining = false
	if err := d.SaveConfig(cfg); err != nil {
		return err
	}
	_ = os.Remove(d.Path(pendingFile))
	fmt.Fprintf(r.o.Out, "joined: %s is a control node of mesh %s. start it with: meshctl serve --data %s\n", cfg.Node, cfg.Mesh, d)
	return nil
}

// confirmFailed is the error of a join whose control.confirm failed with err, the
// node having applied the probe entry at index probe. A failure that says the mesh
// cannot answer now (unavailable: no leader, or one that changed during the
// request; internal; no answer; a lost connection) rolls nothing back: the node
// replicates, and the same join run again confirms it (disk_full too: the leader
// could not record the confirmation, and will once there is room). Before, it was
// rolled back as not confirmed. A refusal (the node did not name its probe: not replicating)
// rolls the join back with rollback.
func (r *run) confirmFailed(node string, probe uint64, err error, rollback func() error) error {
	var ae *api.Error
	if errors.As(err, &ae) && (ae.Code == api.CodeUnavailable || ae.Code == api.CodeInternal || ae.Code == api.CodeDiskFull) ||
		errors.Is(err, operator.ErrNoLeader) || errors.Is(err, operator.ErrNoAnswer) || errors.Is(err, operator.ErrConnectionLost) {
		return fmt.Errorf("%w (%w): %s applied the probe entry at index %d and is a Raft nonvoter, not confirmed yet; nothing was rolled back: run the same %s again with the same token to resume",
			ErrConfirmLater, err, node, probe, r.rerun())
	}
	return r.notConfirmed(node, err.Error(), rollback())
}

// notConfirmed is the error of a join the mesh did not confirm, for why, whose
// rollback ended with undo (nil: the node is out of Raft again).
func (r *run) notConfirmed(node, why string, undo error) error {
	if undo != nil {
		return fmt.Errorf("%w: %s; %w", ErrNotConfirmed, why, undo)
	}
	return fmt.Errorf("%w: %s; the join was rolled back (%s is out of Raft again): fix that and run the same %s again with the same token to resume",
		ErrNotConfirmed, why, node, r.rerun())
}

// rollbackError is the error of a rollback of node's join whose control.abort call
// ended with err, nil when it went through; resume says how to run the join again.
func (r *run) rollbackError(node string, err error, resume string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w (%v): %s may still be a member of Raft, never confirmed; %s to resume the join, or give up on the node (meshctl control remove %s)",
		ErrRollbackFailed, err, node, resume, node)
}

// route brings up this node's broker until a route to another control node is up.
// removed reports, from the node's own replica of the log, that the node was
// removed meanwhile, whose routes the others refuse: the wait ends then, and the
// caller says so, rather than blame the network after the whole wait.
func (r *run) route(ctx context.Context, cfg datadir.Config, adm *api.ControlAdmission, removed func() bool) error {
	var routes []string
	for _, m := range adm.Members {
		routes = append(routes, m.Cluster)
	}
	if len(routes) == 0 {
		return nil
	}
	leaf, _ := r.o.Dir.LoadLeaf()
	caPEM, _ := r.o.Dir.ReadFile(datadir.CACertFile)
	serverTLS, err := pki.ServerConfig(leaf, caPEM)
	if err != nil {
		return err
	}
	mt, err := pki.MutualConfig(leaf, caPEM)
	if err != nil {
		return err
	}
	srv, err := broker.Start(ctx, broker.Config{
		Name: cfg.Node, Mesh: cfg.Mesh, Listen: cfg.Listen, TLS: serverTLS, Auth: refuseAll{}, Logger: r.o.Logger,
		Cluster: &broker.ClusterConfig{Listen: cfg.ClusterListen, Routes: routes, TLS: mt},
	})
	if err != nil {
		return fmt.Errorf("start this node's broker: %w", err)
	}
	defer srv.Shutdown()
	routeWait := time.NewTimer(r.o.RouteTimeout)
	defer routeWait.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	// Waited for by name, as the step says them: a route counted up by
	// NumRoutes and dropped before RoutedNames read it printed "to  (routes
	// configured: …)".
	var routed []string
	for routed = srv.RoutedNames(); len(routed) == 0; routed = srv.RoutedNames() {
		select {
		case <-ctx.Done():
			return r.interrupted(ctx, "waiting for a NATS route to "+strings.Join(routes, ", "), "")
		case <-routeWait.C:
			// Nothing is rolled back: the node is a confirmed nonvoter, and the
			// same join resumes (the mesh skips what is done).
			return fmt.Errorf("%w: %s is a confirmed member of the mesh (a Raft nonvoter: nothing was rolled back), but no NATS route from %s to %s came up within %s: "+
				"open the cluster port both ways (mutual TLS between the control nodes' certificates) and run the same %s again, with the same token while it is valid, to finish; "+
				"or, to give up on this node, remove it (meshctl control remove %s)",
				ErrNoRoute, cfg.Node, cfg.ClusterListen, strings.Join(routes, ", "), r.o.RouteTimeout, r.rerun(), cfg.Node)
		case <-poll.C:
			if removed() {
				return fmt.Errorf("%w: %s was removed while its route came up", ErrRemoved, cfg.Node)
			}
		}
	}
	// Without srv.NumRoutes(): nats-server counts each pooled connection, and
	// said "11 route(s)" of three peers.
	// Named by what is up: the routes configured listed as if all were up, a
	// dead node's among them (a docs walkthrough); the others come up as their
	// nodes serve.
	r.step("route", "NATS route up over mutual TLS to %s (routes configured: %s)", strings.Join(routed, ", "), strings.Join(routes, ", "))
	return nil
}

// interrupted is the error of a join stopped by ctx while it was doing what: it wraps
// context.Cause(ctx) (the signal, for meshctl), says what became of the join (done,
// when there is something to say) and that running it again resumes.
func (r *run) interrupted(ctx context.Context, what, done string) error {
	if done != "" {
		done = "; " + done
	}
	return fmt.Errorf("%w while %s%s; run `%s` again with the same token to resume", context.Cause(ctx), what, done, r.rerun())
}

// dial is operator.Dial, given up when ctx ends; a connection made after that is
// closed.
func dial(ctx context.Context, dir datadir.Dir, o operator.Options) (*operator.Client, error) {
	type dialed struct {
		c   *operator.Client
		err error
	}
	done := make(chan dialed, 1)
	go func() {
		c, err := operator.Dial(dir, o)
		done <- dialed{c, err}
	}()
	select {
	case d := <-done:
		return d.c, d.err
	case <-ctx.Done():
		go func() {
			if d := <-done; d.c != nil {
				d.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// call is op.Call, given up when ctx ends: the request then goes on until its answer,
// its timeout or op.Close, and its result is dropped.
func call(ctx context.Context, op *operator.Client, name string, req, res any) error {
	done := make(chan error, 1)
	var out json.RawMessage
	go func() {
		if res == nil {
			done <- op.Call(name, req, nil)
			return
		}
		done <- op.Call(name, req, &out)
	}()
	select {
	case err := <-done:
		if err != nil || res == nil {
			return err
		}
		return json.Unmarshal(out, res)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// refuseAll keeps the join's temporary broker closed to clients: it exists only to
// prove the route.
type refuseAll struct{}

// errJoining is what the temporary broker refuses every client with.
var errJoining = broker.NewRefusal("joining", "this control node is still joining")

func (refuseAll) Authenticate(broker.Client) (broker.Grant, error) {
	return broker.Grant{}, errJoining
}

// sameHost reports whether the addresses a and b (host:port) are on one host.
func sameHost(a, b string) bool {
	ha, _, err := net.SplitHostPort(a)
	hb, _, err2 := net.SplitHostPort(b)
	return err == nil && err2 == nil && ha == hb
}
