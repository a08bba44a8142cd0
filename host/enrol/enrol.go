// Package enrol adopts a machine into a mesh from one token.
//
// The order is the security argument: the token is parsed offline; an existing
// identity stops everything; the node's key pair is generated here; the broker is
// dialled with TLS first and its chain checked against the pinned CA inside the
// handshake, before any credential crosses; only then are the secret and the new
// public key presented (the key signs the server's nonce, and the mesh's answer comes
// to an inbox only that key's connection can read). The mesh's answer is
// verified with the signing key from the token before anything is saved, and the
// identity is saved atomically. The answer is the proof that the mesh holds the node's
// key: its first declaration is signed by the mesh for exactly that key, and the key
// already logged in to the broker for this connection by signing its nonce, so the
// enrolment keeps the one pinned connection it logged in over, and makes no second
// one to log in again (decision 0011); the token's brokers may be tried alongside
// (dialEnrolment), the others' attempts ended or closed. Nothing irreversible happens until everything reversible has succeeded: a
// half-finished enrolment can be run again with the same token until it expires.
package enrol

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/identity"
	"mesh/host/link"
	"mesh/host/pintls"
	"mesh/host/resend"
	"mesh/host/state"
	"mesh/host/statedir"
	"mesh/host/token"
	"mesh/host/wire"
)

// AgentName is the program an agent names itself as in its enrolment and its status
// reports, before a '/' and its build's version ("meshhost/0.1.0+git…", Options.Agent):
// the mesh shows operators which build each host runs. Agents before it named
// "meshhost/0.1.0" whatever their build.
const AgentName = "meshhost"

// Agent is the agent a build of version names itself as: AgentName/version.
func Agent(version string) string { return AgentName + "/" + version }

// ClockTolerance is how far past its expiry (by this machine's clock) a token is still
// presented: the mesh's clock decides, and a host clock a few minutes fast should not
// refuse a token the mesh would accept.
const ClockTolerance = 5 * time.Minute

// CodeLoginRefused is never sent by the mesh, so it is not among the wire's codes:
// it is the host's name for a broker, proven the mesh's by its CA pin, that refused
// the enrolment's login before any request. The broker says no more than that (an
// unknown secret, a revoked key, a token or address over its budget for the moment,
// no room for another host), so a retry may or may not help.
const CodeLoginRefused = "login_refused"

// Options are the inputs of an enrolment.
type Options struct {
	StateDir string
	// Token is the token text as pasted (stdin, a file, MESH_TOKEN).
	Token string
	// Out receives the plan's progress lines; nil discards them.
	Out io.Writer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DialTimeout bounds each connection attempt; RequestTimeout the enrolment reply.
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	// DialStagger is how long an attempt at one of the token's brokers goes
	// unanswered before the next broker is tried alongside; zero means 2 s.
	DialStagger time.Duration
	// Resend is how long the request goes unanswered before it is sent again,
	// within RequestTimeout; zero means 5 s.
	Resend time.Duration
	// Agent is what the request names the agent (Agent(version)); "" names none.
	// The mesh keeps only NAME/VERSION of at most 64 bytes of letters, digits
	// and . _ + - (controlplane/api.ValidAgent).
	Agent string
}

// Result is what a successful enrolment produced.
type Result struct {
	Identity identity.Identity
	// DeclarationVersion is the version of the first declaration, verified.
	DeclarationVersion uint64
	Broker             string
	// Finished: an earlier run of this enrolment had saved the identity, and this
	// one only removed its draft key; nothing was asked of the mesh.
	Finished bool
}

// Errors an enrolment ends with; each is distinct and says what to do.
var (
	// ErrToken: the token cannot be used (malformed, expired, for another role).
	ErrToken = errors.New("the token cannot be used")
	// ErrSubstituted: the broker's chain does not reach the pinned CA.
	ErrSubstituted = pintls.ErrSubstituted
	// ErrClock: the broker's chain reaches the pinned CA but is not valid at this
	// machine's time; run enrol again once the clock is right.
	ErrClock = pintls.ErrClock
	// ErrUnreachable: no broker in the token could be reached; retrying may help.
	ErrUnreachable = errors.New("no broker of the mesh could be reached")
	// ErrNoAnswer: the request was sent on a pinned connection, and no answer came
	// (lost, or late past the wait): the mesh may have enrolled the key, and a run
	// again with the same token presents it again, answered from the mesh's records
	// if it did. Retrying may help, as for ErrUnreachable.
	ErrNoAnswer = errors.New("the mesh did not answer the enrolment request")
	// ErrRefused: the mesh refused the enrolment (see RefusedError for why).
	ErrRefused = errors.New("the mesh refused the enrolment")
	// ErrBadAnswer: the mesh answered something that does not verify.
	ErrBadAnswer = errors.New("the mesh's answer does not verify")
	// ErrAnswerTime: the mesh admitted the key and its answer verifies but for its
	// validity window, by this machine's clock (hours behind or ahead): the clock is
	// to be set, and enrol run again with the same token.
	ErrAnswerTime = errors.New("the mesh's answer is not valid at this machine's time")
	// ErrOtherAnswer: the mesh's answer is for another mesh, node or role than the
	// token's, or gives the node subjects that are not its own (see
	// *OtherAnswerError). It also matches ErrBadAnswer.
	ErrOtherAnswer = errors.New("the mesh answered for another node or role")
	// ErrNoFirstDeclaration: the mesh enrolled the node, but its answer to this repeat
	// leaves out the node's declaration, grown too large for an answer; the signed
	// declaration is this host's proof that the mesh recorded its key, so nothing was
	// saved. It also matches ErrBadAnswer.
	ErrNoFirstDeclaration = errors.New("the mesh's answer leaves out the node's declaration")
	// ErrSave: the enrolment could not be saved on this machine (its identity, or
	// the applied state saved with it).
	ErrSave = errors.New("the enrolment could not be saved on this machine")
	// ErrInterrupted: the context ended (SIGINT, SIGTERM) while the enrolment dialled
	// or waited for the mesh's answer; nothing was saved, and running enrol again
	// with the same token resumes with the same key.
	ErrInterrupted = errors.New("interrupted before the enrolment finished")
)

// interrupted says, once ctx ended, where the enrolment was and what to do.
func interrupted(ctx context.Context, while string) error {
	return fmt.Errorf("%w (%v while %s): no identity was saved; run enrol again with the same token: it presents the same key, and the mesh answers a repeat from its records if it had admitted it", ErrInterrupted, context.Cause(ctx), while)
}

// OtherAnswerError is an answer that came over the pinned connection but is for
// another enrolment than this one: its Field (mesh and node, role, subjects) is Got
// where this enrolment's is Want. Those fields are not signed, so only the comparison
// stands between a node and the subjects or role of another; nothing is saved. It
// matches ErrOtherAnswer and ErrBadAnswer.
type OtherAnswerError struct {
	Field, Got, Want string
}

func (e *OtherAnswerError) Error() string {
	return fmt.Sprintf("%v: the answer's %s: %s; this enrolment's: %s; nothing was saved. The answer came through the connection pinned to the mesh's CA, "+
		"so a control node (or a broker of its cluster) answered for another enrolment: running enrol again will most likely get the same answer. "+
		"Tell the mesh's operators (meshctl nodes shows whether the mesh recorded this node)", ErrOtherAnswer, e.Field, e.Got, e.Want)
}

// Is reports whether target is ErrOtherAnswer or ErrBadAnswer.
func (e *OtherAnswerError) Is(target error) bool {
	return target == ErrOtherAnswer || target == ErrBadAnswer
}

// quoted shows a value the mesh sent, quoted and cut short: it may be anything.
func quoted(s string) string {
	const max = 80
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}

func subjectsText(s wire.Subjects) string {
	return fmt.Sprintf("declarations %s, status %s, sync %s, inbox %s", quoted(s.Declarations), quoted(s.Status), quoted(s.Sync), quoted(s.InboxPrefix))
}

// RefusedError is a refusal by the mesh, with its protocol code.
type RefusedError struct {
	Code    string
	Message string
	// EarlierUnanswered: the request was sent more than once, and a sending the
	// refusal does not answer went unanswered or was answered with what does not
	// settle it (a commit that could not be confirmed); the mesh may have enrolled
	// this machine's key by it, so the refusal is not final (Retryable).
	EarlierUnanswered bool
}

func (e *RefusedError) Error() string {
	advice := map[string]string{
		wire.CodeTokenUnknown:   "this mesh never minted this token (or it expired more than a day ago): ask the operator for a new one",
		wire.CodeTokenUsed:      "ask the operator for a new one",
		wire.CodeTokenExpired:   "ask the operator for a new token",
		wire.CodeTokenOtherNode: "a token admits exactly one node id: ask for a token for this node",
		wire.CodeTokenWrongRole: "ask for a token of the right role",
		wire.CodeNodeExists:     "the operator must revoke the existing node first",
		wire.CodeKeyRevoked:     "this key was revoked",
		wire.CodeUnavailable:    "run enrol again with the same token: in a few seconds, or once what the mesh names is mended",
		wire.CodeTokenOtherMesh: "the token was not minted by the mesh at its address: check where it came from",
		wire.CodeTokenStaleKey:  "ask the operator for a new one",
		wire.CodeTokenCancelled: "ask the operator for a new one",
		wire.CodeInternal:       "run enrol again with the same token (the mesh answers an enrolment it committed from its state); if it fails again, the control plane's log says why",
	}[e.Code]
	message := e.Message
	if advice != "" {
		// The mesh's words are an operator's ("mint a new token"); the advice is for
		// the person at this machine, and says it once.
		for _, tail := range []string{"; mint a new token", ": mint a new token", "; ask for a new one"} {
			// Also before what the mesh adds in parentheses ("mint a new token
			// (it expired 1s ago)"), which is kept.
			if i := strings.LastIndex(message, tail); i >= 0 {
				if rest := message[i+len(tail):]; rest == "" || strings.HasPrefix(rest, " (") && strings.HasSuffix(rest, ")") {
					message = message[:i] + rest
				}
			}
		}
	}
	msg := fmt.Sprintf("%s (%s): %s", ErrRefused, e.Code, message)
	if e.EarlierUnanswered && !e.retryableCode() {
		// The usual advice (a new token) would leave an enrolment the earlier
		// sending may have made: the same token and key are answered from the
		// mesh's records if it did.
		return msg + "; but the request was sent again after going unanswered, and the mesh may have enrolled this machine's key by an earlier sending: run enrol again with the same token, which presents the same key and is answered from the mesh's records if it did (for a day after the token expires); if it is refused again, ask the operator for a new token"
	}
	if advice != "" {
		msg += "; " + advice
	}
	return msg
}

func (e *RefusedError) Unwrap() error { return ErrRefused }

// Retryable reports whether running enrol again with the same token may succeed:
// the mesh could not take the enrolment now (unavailable), or failed to answer one
// it may have committed (internal), which a repeat with the same token and key is
// answered from the state, or its broker refused the login (login_refused), which
// it does for a moment as well as for good; or the refusal came while an earlier
// sending of the request, which may have enrolled the key, went unanswered.
func (e *RefusedError) Retryable() bool {
	return e.retryableCode() || e.EarlierUnanswered
}

func (e *RefusedError) retryableCode() bool {
	return e.Code == wire.CodeUnavailable || e.Code == wire.CodeInternal || e.Code == CodeLoginRefused
}

type run struct {
	o   Options
	tok token.Token
	out io.Writer
	n   int
	// proof is the token's proof for proofKey (tokenProof): the login and the
	// request present the same one, and each proof derives a key and signs.
	proof    []byte
	proofKey string
}

func (r *run) step(kind, format string, args ...any) {
	r.n++
	fmt.Fprintf(r.out, "  %d. %-9s %s\n", r.n, kind, fmt.Sprintf(format, args...))
}

// ParseToken checks a worker's token offline, as Enrol's first step does: a
// caller can refuse a token before it creates or locks anything. An expiry within
// ClockTolerance of now passes, for the mesh's clock to decide, one within
// ResumeWindow when stateDir holds the pending key of an earlier run of this
// token's enrolment (begunIn), and any when it holds the identity of the token's
// node (EnrolledAs). Errors wrap ErrToken.
func ParseToken(text string, now time.Time, stateDir string) (token.Token, error) {
	tok, err := token.Parse(text, now)
	if err != nil && token.IsRedacted(text) {
		// Copied from a log or a listing, which print a token so: "truncated,
		// copy the whole line again" sent the person back to the same line (a
		// walkthrough).
		return token.Token{}, fmt.Errorf("%w: this is a token as a log prints it, its secret replaced by %s: it enrols nothing. Use the token meshctl token printed (it is shown once: ask the operator for a new one if it is lost)", ErrToken, redactedSecret)
	}
	var expired *token.ExpiredError
	if errors.As(err, &expired) && (expired.Ago() <= ClockTolerance || expired.Ago() <= ResumeWindow && begunIn(stateDir, tok)) {
		err = nil // let the mesh's clock decide
	} else if expired != nil {
		if _, ok := EnrolledAs(stateDir, tok); ok {
			err = nil // the identity in the way is the news (Enrol), not the token's age
		}
	}
	if err != nil {
		if expired != nil {
			return token.Token{}, fmt.Errorf("%w: %w (by this machine's clock, which reads %s; the mesh's clock decides, so if this clock is wrong, fix it and run enrol again)",
				ErrToken, err, now.UTC().Format(time.RFC3339))
		}
		return token.Token{}, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if tok.Role != token.RoleWorker {
		return token.Token{}, fmt.Errorf("%w: this is a %s token; meshhost enrols workers (control nodes join with `meshctl join`)", ErrToken, tok.Role)
	}
	return tok, nil
}

// redactedSecret is what a token prints in place of its secret (token.Token's
// String): in a pasted text, the token was copied from a log.
const redactedSecret = "<redacted>"

// ResumeWindow is how long after its expiry a token still finishes an enrolment an
// earlier run of it began in the state directory: the mesh answers the repeat of an
// enrolment it committed (the same token and key) for as long as it keeps the
// token's record, a day. A run whose answer was lost (a network cut, a disk that
// filled as it saved) and that was run again after the token's hour was refused
// here as expired, and told to ask for a new token, which the mesh refused: the node
// id was enrolled, with this machine's key.
const ResumeWindow = 24 * time.Hour

// begunIn reports whether stateDir holds the pending key of an earlier run of tok's
// enrolment (what nodeKey reuses).
func begunIn(stateDir string, tok token.Token) bool {
	if stateDir == "" {
		return false
	}
	p, err := identity.LoadPending(stateDir)
	th := tok.SecretHash()
	return err == nil && p.Mesh == tok.Mesh && p.Node == tok.Node && p.TokenHash == hex.EncodeToString(th[:])
}

// EnrolledAs returns the identity stateDir holds when it is one of the node tok
// names (its mesh, node and CA pin): an enrolment run again there is about that
// identity, whatever the token's age, and is told so (EnrolledAsTokenError), not
// that the token expired and a new one is needed.
func EnrolledAs(stateDir string, tok token.Token) (identity.Identity, bool) {
	if stateDir == "" {
		return identity.Identity{}, false
	}
	id, err := identity.Load(stateDir)
	if err != nil {
		return identity.Identity{}, false
	}
	return id, id.Mesh == tok.Mesh && id.Node == tok.Node && id.CAPin == hex.EncodeToString(tok.CAPin[:])
}

// dialable reports whether a broker of a token can be dialled from another
// machine: an IPv6 link-local address cannot without its interface's zone.
func dialable(b netip.AddrPort) bool {
	return !(b.Addr().Is6() && b.Addr().IsLinkLocalUnicast())
}

// Enrol carries out the enrolment and returns the saved identity.
func Enrol(ctx context.Context, o Options) (Result, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 20 * time.Second
	}
	if o.DialStagger == 0 {
		o.DialStagger = 2 * time.Second
	}
	if o.Resend == 0 {
		o.Resend = 5 * time.Second
	}
	r := &run{o: o, out: o.Out}

	// 1. The token, offline.
	now := o.Now()
	tok, err := ParseToken(o.Token, now, o.StateDir)
	if err != nil {
		return Result{}, err
	}
	if !slices.ContainsFunc(tok.Brokers, dialable) {
		// Read, as its other brokers work (token.ParseBroker); with none, every
		// dial failed "connect: invalid argument" and the host was told
		// retrying may help (a walkthrough).
		return Result{}, fmt.Errorf("%w: every broker it names is an IPv6 link-local address (fe80::/10), which no machine dials without the zone of its interface, and a token carries none (meshctl refuses them since 2026-12-07): "+
			"ask the mesh's operators for a new token, and for the control node to be given a global or unique local (fd00::/8) address", ErrToken)
	}
	r.tok = tok
	fmt.Fprintf(r.out, "enrol node %s into mesh %s\n", tok.Node, tok.Mesh)
	r.step("token", "parsed offline: role %s, %d broker(s), %s", tok.Role, len(tok.Brokers), expiryText(tok.Expiry, now))
	if _, enrolled := EnrolledAs(o.StateDir, tok); now.Sub(tok.Expiry) > ClockTolerance && !enrolled {
		r.step("token", "expired, but an earlier run of this enrolment began here (its key is in %s): the mesh answers it again, should it have enrolled that key, for a day after the token expired", identity.PendingPath(o.StateDir))
	}

	// 2. A state directory only this user can write (absent is fine: it is made
	// 0700), and no identity in it.
	if err := statedir.Check(o.StateDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Result{}, err
	}
	if err := identity.CheckAbsent(o.StateDir); err != nil {
		if id, ok := r.savedByEarlierRun(err); ok {
			// An earlier run of this enrolment saved the identity and stopped
			// before it removed its draft key (a disk error as the directory was
			// flushed): the machine is enrolled. Run again as that run advised,
			// it was told to have an operator revoke the node.
			if err := identity.RemovePending(o.StateDir); err != nil {
				return Result{}, fmt.Errorf("%w: the identity is saved, but the draft key %s could not be removed: %v; remove it, then start the agent", ErrSave, identity.PendingPath(o.StateDir), err)
			}
			r.step("identity", "saved in %s by an earlier run of this enrolment, which stopped before it removed its draft key (removed now): enrolled", identity.Path(o.StateDir))
			return Result{Identity: id, Finished: true}, nil
		}
		id, err := r.confirmedByTheMesh(ctx, err)
		if err != nil {
			return Result{}, err
		}
		return Result{Identity: id, Finished: true}, nil
	}
	r.step("identity", "none in %s yet (a new machine)", o.StateDir)

	// 3. The node's key pair, generated here; kept pending until the end so that a
	// re-run presents the same key and the mesh sees the same enrolment.
	kp, reused, err := r.nodeKey()
	if err != nil {
		return Result{}, err
	}
	pub, _ := kp.PublicKey()
	if reused {
		r.step("key", "reusing the key of the unfinished enrolment %s", pub)
	} else {
		r.step("key", "generated the node key %s (the private half stays in %s)", pub, o.StateDir)
	}

	// 4. Dial with the pin checked inside the handshake, before any credential.
	nc, broker, err := r.dialEnrolment(ctx, kp, pub)
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()

	// 5. Present the secret and the public key.
	resp, err := r.request(ctx, nc, kp, pub)
	if err != nil {
		return Result{}, r.dropSpentKey(err, pub)
	}

	// 6. Verify what the mesh answered, with the key from the token.
	ans, err := r.verify(resp, kp, pub)
	if err != nil {
		return Result{}, err
	}
	r.step("enrol", "the mesh admitted %s as a %s", ans.id.Node, ans.id.Role)
	id, decl := ans.id, ans.decl
	r.step("verify", "first declaration v%d verified: signed by the mesh's key, addressed to %s", decl.Version, tok.Node)

	// 7. Save: the applied state (keyring) first, then the identity that makes the
	// machine enrolled.
	applied := state.Applied{Format: 1, KeyringEpoch: ans.keyring.Epoch, Keyring: ans.keyringEnv,
		Brokers: ans.membership.Brokers, MembershipVersion: ans.membership.Version}
	if len(decl.Body.Files) == 0 {
		// Nothing is declared for the node yet. Applying an empty declaration to a
		// machine that manages nothing writes nothing, so it is recorded as applied,
		// verified as the agent would: the agent's first sync then need not bring it
		// again (at a fleet's start, a signature, a verification and a durable write
		// saved per host). A first declaration that declares files is left to the
		// agent, which applies it under its managed root.
		applied.HaveApplied = true
		applied.Version = decl.Version
		applied.BodyDigest = hex.EncodeToString(decl.BodyDigest[:])
		applied.IssuedAt, applied.ExpiresAt = decl.IssuedAt, decl.ExpiresAt
	}
	if err := state.Save(o.StateDir, applied); err != nil {
		return Result{}, saveError(err, tok)
	}
	if err := identity.Save(o.StateDir, id); err != nil {
		if saved, lerr := identity.Load(o.StateDir); lerr == nil && saved.PublicKey == pub {
			// Written and linked in place, then flushing the directory failed: it
			// was "nothing is half-written", and the run again that advised was
			// told the machine was enrolled already, to be revoked.
			return Result{}, fmt.Errorf("%w: the identity is in %s, but flushing it to disk failed (%v): run enrol again with the same token to finish (it finds the identity and removes the draft key), then start the agent",
				ErrSave, identity.Path(o.StateDir), err)
		}
		return Result{}, saveError(err, tok)
	}
	// The identity is what makes the machine enrolled; the pending key was its draft.
	// Failing to remove the draft leaves a stray file that the next enrolment with
	// another token replaces, not a wrong identity.
	_ = identity.RemovePending(o.StateDir)
	r.step("save", "identity saved to %s (mode 0600); the mesh holds this node's key: start the agent (meshhost run)", identity.Path(o.StateDir))
	return Result{Identity: id, DeclarationVersion: decl.Version, Broker: broker}, nil
}

// savedByEarlierRun reports whether err, the state directory's identity refusing
// the enrolment, is this enrolment's own: the draft key of this token beside it is
// the identity's key. It returns that identity.
func (r *run) savedByEarlierRun(err error) (identity.Identity, bool) {
	if !errors.Is(err, identity.ErrAlreadyEnrolled) {
		return identity.Identity{}, false
	}
	id, err := identity.Load(r.o.StateDir)
	if err != nil {
		return identity.Identity{}, false
	}
	p, err := identity.LoadPending(r.o.StateDir)
	th := r.tok.SecretHash()
	if err != nil || p.Mesh != r.tok.Mesh || p.Node != r.tok.Node || p.TokenHash != hex.EncodeToString(th[:]) || id.Mesh != p.Mesh || id.Node != p.Node {
		return identity.Identity{}, false
	}
	kp, err := p.KeyPair()
	if err != nil {
		return identity.Identity{}, false
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	return id, err == nil && pub == id.PublicKey
}

// confirmedByTheMesh finishes, as an earlier run's, an enrolment whose identity is
// saved for the token's mesh, node and CA, and whose draft key was removed: the run
// that saved it was stopped before it said "enrolled" (a kill, a power loss), or it
// finished and this is the same command run again (a provisioning script). Only the
// mesh knows whether that identity's key is the one this token admitted: the
// enrolment is asked again with it, and a repeat of the same admission is answered
// from the mesh's records. When it is not confirmed (another key, an unused token, a
// token the mesh no longer keeps, no answer), the identity of the token's node is
// said to be that (*EnrolledAsTokenError, with the mesh's reason), not a machine to
// revoke; an identity of another mesh, node or CA is left "already enrolled".
// Before, every such rerun was told to have the node revoked, a healthy node.
func (r *run) confirmedByTheMesh(ctx context.Context, enrolled error) (identity.Identity, error) {
	if !errors.Is(enrolled, identity.ErrAlreadyEnrolled) {
		return identity.Identity{}, enrolled
	}
	id, err := identity.Load(r.o.StateDir)
	if err != nil || !r.tokensNode(id) {
		return identity.Identity{}, enrolled
	}
	kp, err := id.KeyPair()
	if err != nil {
		return identity.Identity{}, enrolled
	}
	defer kp.Wipe()
	notConfirmed := func(why error) (identity.Identity, error) {
		return identity.Identity{}, &EnrolledAsTokenError{Path: identity.Path(r.o.StateDir), Mesh: id.Mesh, Node: id.Node, Why: why}
	}
	r.step("identity", "%s holds node %s of mesh %s, the node this token names: asking the mesh whether this token admitted its key", identity.Path(r.o.StateDir), id.Node, id.Mesh)
	nc, _, err := r.dialEnrolment(ctx, kp, id.PublicKey)
	if err != nil {
		return notConfirmed(err)
	}
	defer nc.Close()
	resp, err := r.request(ctx, nc, kp, id.PublicKey)
	if err != nil {
		return notConfirmed(err)
	}
	if _, err := r.verify(resp, kp, id.PublicKey); err != nil {
		return notConfirmed(err)
	}
	r.step("identity", "the mesh admitted this key with this token: enrolled (by an earlier run)")
	return id, nil
}

// tokensNode reports whether id is an identity of the node the token names: its
// mesh, node and CA pin.
func (r *run) tokensNode(id identity.Identity) bool {
	return id.Mesh == r.tok.Mesh && id.Node == r.tok.Node && id.CAPin == hex.EncodeToString(r.tok.CAPin[:])
}

// EnrolledAsTokenError: the state directory holds the identity of the node the token
// names (its mesh, node and CA pin), which the mesh did not confirm this token
// admitted (Why), or was not asked (the agent running it holds the directory). It is
// most likely this very enrolment, done by an earlier run; "revoke it first", said of
// any identity, sent a provisioning script's every rerun after the token expired to
// have a healthy node revoked. It matches identity.ErrAlreadyEnrolled.
type EnrolledAsTokenError struct {
	Path, Mesh, Node string
	Why              error  // nil: the mesh was not asked (not unwrapped: the identity in the way is what the error is)
	Agent            string // "meshhost run, pid N" when an agent holds the directory
}

func (e *EnrolledAsTokenError) Error() string {
	s := fmt.Sprintf("this machine is already enrolled as node %q of mesh %q, the node this token names (%s)", e.Node, e.Mesh, e.Path)
	if e.Agent != "" {
		s += "; its agent (" + e.Agent + ") runs it"
	}
	if e.Why != nil {
		s += fmt.Sprintf("; the mesh did not confirm that this token admitted its key (%v)", e.Why)
	}
	return s + ". If this enrolment ran here before, it is done: meshhost status says how the node stands (start the agent, meshhost run, if it is not running). " +
		"To enrol this machine afresh, have an operator revoke the node first, then " + identity.StartOver(filepath.Dir(e.Path))
}

// Is reports whether target is identity.ErrAlreadyEnrolled.
func (e *EnrolledAsTokenError) Is(target error) bool { return target == identity.ErrAlreadyEnrolled }

// dropSpentKey removes the pending key when the mesh, answering the request, refused
// the token for good (a refusal that is not Retryable: used, expired, unknown,
// cancelled, revoked …): no enrolment can finish with that key, and a seed nobody
// can use should not be left on disk, nor a pending file that has meshhost status
// advise running enrol again with the same token. Every other failure keeps it:
// when no broker answered, the answer was lost or late, the login was refused
// (perhaps for the moment: a full control node, a rate limit), or the mesh answered
// unavailable or internal, the mesh may have committed the enrolment with this key,
// and only a repeat presenting it is answered from the state.
func (r *run) dropSpentKey(err error, pub string) error {
	var re *RefusedError
	if !errors.As(err, &re) || re.Retryable() {
		return err
	}
	if rerr := identity.RemovePending(r.o.StateDir); rerr != nil {
		return fmt.Errorf("%w; the key of this enrolment can no longer be used, but %v: remove %s", err, rerr, identity.PendingPath(r.o.StateDir))
	}
	why := "the mesh refused this token for good, so no enrolment can finish with it"
	if re.Code == wire.CodeNodeExists {
		// Not the key's fault: another machine holds the id. Revoking it cancels
		// the tokens minted for the id before, this one among them (control
		// planes before that deleted them): a new token is needed either way.
		why = "the mesh holds another machine as this node; if this machine is to replace it, the operator revokes that node and mints a new token for this one"
	}
	r.step("key", "removed the pending key %s: %s", pub, why)
	return err
}

func expiryText(exp, now time.Time) string {
	if d := exp.Sub(now); d > 24*time.Hour {
		// No token lives a day (an hour at most): a far expiry is said as a date,
		// not as a duration that overflows ("2562047h47m16s", a walkthrough).
		return "expires at " + exp.UTC().Format(time.RFC3339) + ", far past the hour a token lives (the mesh decides)"
	} else if d > 0 {
		return "expires in " + d.Round(time.Second).String()
	}
	return "expired " + now.Sub(exp).Round(time.Second).String() + " ago by this machine's clock (the mesh decides)"
}

// dialEnrolment connects to the first broker that completes a pinned handshake,
// presenting the token's secret and the node key kp. The token's brokers are tried
// in its order, the next one starting when the one before has failed or has not
// answered within DialStagger: one after another, 16 addresses that drop packets
// (the bootstrap machine gone, a firewall) kept the enrolment 16 dial timeouts long,
// minutes, before it said so or reached the broker that answers. The first login
// the mesh takes is kept and the others end: those still dialling or in their
// handshake when it returns stop there, and one that reaches its login after that
// signs nothing (link.Lent), so sends no login, and is closed.
func (r *run) dialEnrolment(ctx context.Context, kp *identity.KeyPair, pub string) (*nats.Conn, string, error) {
	type attempt struct {
		i    int // the broker's place in the token
		addr string
		nc   *nats.Conn
		err  error
	}
	dialCtx, stopDials := context.WithCancel(ctx)
	defer stopDials()
	key := link.Lend(kp.Sign)
	defer key.End()
	password := r.password(pub)
	results := make(chan attempt, len(r.tok.Brokers))
	started, pending := 0, 0
	startNext := func() {
		i, addr := started, r.tok.Brokers[started].String()
		started++
		pending++
		go func() {
			nc, err := r.dialOne(dialCtx, key.Sign, pub, password, addr)
			results <- attempt{i, addr, nc, err}
		}()
	}
	// closeLate closes the connections of attempts still under way once they end,
	// for no goroutine to outlive the enrolment holding a login.
	closeLate := func() {
		stopDials()
		go func(n int) {
			for ; n > 0; n-- {
				if a := <-results; a.nc != nil {
					a.nc.Close()
				}
			}
		}(pending)
	}
	stagger := time.NewTimer(r.o.DialStagger)
	defer stagger.Stop()
	startNext()

	// The faults by the brokers' places in the token: attempts under way at once end
	// in any order (a silent first broker's last), and they are said in the token's,
	// as when the brokers were tried one after another.
	faults := make([]brokerFault, len(r.tok.Brokers))
	substituted, refused := 0, 0
	var clockErr *pintls.ClockError
	for pending > 0 {
		var a attempt
		select {
		case <-ctx.Done():
			closeLate()
			return nil, "", interrupted(ctx, "connecting")
		case <-stagger.C:
			if started < len(r.tok.Brokers) {
				startNext()
				stagger.Reset(r.o.DialStagger)
			}
			continue
		case a = <-results:
			pending--
		}
		if a.err == nil {
			// The key is taken back before anything else (Out may block: a
			// pipe), so that no other attempt logs in meanwhile (a review).
			key.End()
			closeLate()
			// Only addr was dialled: the login ignores the brokers an INFO names.
			r.step("connect", "%s: TLS handshake checked against the pinned CA: it is the mesh", a.addr)
			return a.nc, a.addr, nil
		}
		if ctx.Err() != nil {
			closeLate()
			return nil, "", interrupted(ctx, "connecting to "+a.addr)
		}
		if started < len(r.tok.Brokers) {
			startNext()
			stagger.Reset(r.o.DialStagger)
		}
		addr, err := a.addr, a.err
		switch {
		case link.IsClock(err):
			// The mesh's own chain, out of its validity by this machine's clock:
			// nothing was sent, and the next attempt succeeds once the clock is set.
			var ce *pintls.ClockError
			if errors.As(err, &ce) {
				clockErr = ce
			}
			r.step("connect", "%s: REFUSED: the certificate chains to the pinned CA but is not valid at this machine's time (%s); nothing was sent", addr, r.o.Now().UTC().Format(time.RFC3339))
			faults[a.i] = brokerFault{addr, "not valid at this machine's time"}
		case link.IsSubstituted(err):
			substituted++
			r.step("connect", "%s: REFUSED: the certificate does not chain to the pinned CA; nothing was sent", addr)
			faults[a.i] = brokerFault{addr, "certificate does not chain to the pinned CA"}
		case link.IsAuthRefused(err):
			// The pin was checked, so this is the mesh itself refusing the login
			// before admitting the connection (a used or expired token is admitted
			// far enough to be told so, and answers with its own code). Another
			// control node may have room where this one had none.
			refused++
			r.step("connect", "%s: the mesh refused the login", addr)
			faults[a.i] = brokerFault{addr, "login refused"}
		default:
			r.step("connect", "%s: unreachable (%v)", addr, err)
			faults[a.i] = brokerFault{addr, err.Error()}
		}
	}
	// Every broker was tried and failed: none of faults is left empty.
	errs := faults
	if refused > 0 {
		// The broker refuses a login without saying why, so no cause is asserted:
		// some pass within a minute, others never do. Calling it token_unknown
		// ("ask for a new token", exit 3) sent people after a new token when
		// waiting a minute would have done.
		// The next step comes first: the causes are many, most pass within a
		// minute, and at the end of a long line the step was read last if at all;
		// each part on a line of its own (a walkthrough: 1,200 characters on one
		// line).
		return nil, "", &RefusedError{Code: CodeLoginRefused, Message: "the mesh's broker refused the enrolment's login without saying why.\n" +
			"Next: wait a minute and run enrol again with the same token (it was not spent, and nothing was saved but the pending key, kept for that run); " +
			"if it is refused again, ask the operator whether the token is pending (meshctl token list) and for a new one, and which version the control plane runs (meshctl control status, VERSION).\n" +
			"Why it refuses for a minute: too many connections used this token in the last 30 seconds, this address made too many failed attempts in the last minute, " +
			"or no control node reached has room for another host (their logs say so).\n" +
			"Why it refuses for good: a token this mesh never minted (or one that expired more than a day ago, or minted by a meshctl older than the control plane's), a node key that was revoked, " +
			"a login relayed by something on the path that holds a certificate of the mesh (a removed control node; the secret was not sent), " +
			"or every login of this meshhost where the control plane runs a meshctl older than the proof this meshhost sends (upgrade the control plane before the agents, docs/operations.md, \"Upgrading\": a new token from it is refused the same way)"}
	}
	if clockErr != nil && substituted == 0 {
		// A broker that is the mesh by its chain but was refused for this
		// machine's clock: the clock is what to fix, whatever the others did.
		return nil, "", fmt.Errorf("%w; run enrol again with the same token once the clock is right (%s)", clockErr, byReason(errs))
	}
	if substituted > 0 && substituted == len(r.tok.Brokers) {
		return nil, "", fmt.Errorf("%w; retrying will not help (%s)", ErrSubstituted, byReason(errs))
	}
	if substituted > 0 {
		return nil, "", fmt.Errorf("%w; and at least one address answered with another CA: %s", ErrUnreachable, byReason(errs))
	}
	// The token names the control nodes as they were when it was minted: one lost for
	// good since (the bootstrap machine, say) is never reached, and only a token
	// minted on a control node that runs names the others.
	return nil, "", fmt.Errorf("%w (%s); retrying may help once the network or the control plane is back. "+
		"If the control nodes the token names are gone for good, mint a new token on a control node that runs (meshctl token there)", ErrUnreachable, byReason(errs))
}

// dialOne logs in to the broker at addr alone, with the pin checked inside the
// handshake before the secret (password) is sent, the nonce signed by sign. The
// dial ends when ctx does. Attempts run at once: it changes nothing of r.
func (r *run) dialOne(ctx context.Context, sign func([]byte) ([]byte, error), pub, password, addr string) (*nats.Conn, error) {
	return nats.Connect(link.URLs([]string{addr}), append(link.Login{Pin: r.tok.CAPin, PublicKey: pub, Sign: sign, Timeout: r.o.DialTimeout, Now: r.o.Now, Context: ctx}.Options(),
		nats.UserInfo(wire.EnrolUser(r.tok.Node), password),
		nats.CustomInboxPrefix(wire.EnrolInbox(r.tok.Node, pub)),
		nats.Name("meshhost enrol "+r.tok.Node),
		nats.Timeout(r.o.DialTimeout),
		nats.NoReconnect(),
	)...)
}

// brokerFault is why the broker at addr did not take the enrolment.
type brokerFault struct{ addr, reason string }

// byReason says faults with the brokers that share a reason together, "3 brokers
// (a, b, c): reason", in the order each reason first came, and one broker's as
// "a: reason". A token names up to 16 brokers, which mostly fail alike (the
// network down, a handshake timing out): said one by one, the final error repeated
// the same reason of some 250 characters 16 times, and a different one among them
// was lost in it.
func byReason(faults []brokerFault) string {
	var order []string
	addrs := map[string][]string{}
	for _, f := range faults {
		if _, seen := addrs[f.reason]; !seen {
			order = append(order, f.reason)
		}
		addrs[f.reason] = append(addrs[f.reason], f.addr)
	}
	parts := make([]string, 0, len(order))
	for _, reason := range order {
		if a := addrs[reason]; len(a) == 1 {
			parts = append(parts, a[0]+": "+reason)
		} else {
			parts = append(parts, fmt.Sprintf("%d brokers (%s): %s", len(a), strings.Join(a, ", "), reason))
		}
	}
	return strings.Join(parts, "; ")
}

// nodeKey returns the pending key of an unfinished enrolment with this token, or a
// new one saved as pending before it is ever presented.
func (r *run) nodeKey() (*identity.KeyPair, bool, error) {
	th := r.tok.SecretHash()
	tokenID := hex.EncodeToString(th[:])
	p, err := identity.LoadPending(r.o.StateDir)
	switch {
	case err == nil && p.Mesh == r.tok.Mesh && p.Node == r.tok.Node && p.TokenHash == tokenID:
		kp, err := p.KeyPair()
		if err == nil {
			return kp, true, nil
		}
	case err != nil && !errors.Is(err, identity.ErrNoPending):
		// A damaged pending file belongs to an enrolment that never finished; a new
		// key with this token is the same enrolment restarted.
		_ = identity.RemovePending(r.o.StateDir)
	}
	kp, err := identity.NewKeyPair()
	if err != nil {
		return nil, false, fmt.Errorf("generate the node key: %w", err)
	}
	seed, _ := kp.Seed()
	if err := identity.SavePending(r.o.StateDir, identity.Pending{
		Format: 1, Mesh: r.tok.Mesh, Node: r.tok.Node, TokenHash: tokenID, Seed: identity.Secret(seed), CreatedAt: r.o.Now().UTC(),
	}); err != nil {
		return nil, false, saveError(err, r.tok)
	}
	return kp, false, nil
}

// tokenID is the token's id as the mesh stores it.
func (r *run) tokenID() string {
	h := r.tok.SecretHash()
	return hex.EncodeToString(h[:])
}

// password is what the enrolling connection presents for the token: its id and the
// proof, by the secret's key, that this machine registers pub. The secret itself
// never leaves the machine: whatever reads the password on the way (a relay holding
// a leaf of the mesh CA) cannot use it without pub's private half.
func (r *run) password(pub string) string {
	return wire.EnrolPassword(r.tokenID(), r.tokenProof(pub))
}

// tokenProof is the token's proof that this machine registers pub, made once.
func (r *run) tokenProof(pub string) []byte {
	if r.proof == nil || r.proofKey != pub {
		r.proof, r.proofKey = r.tok.Prove(r.tok.Mesh, r.tok.Node, pub), pub
	}
	return r.proof
}

func (r *run) request(ctx context.Context, nc *nats.Conn, kp *identity.KeyPair, pub string) (wire.EnrolResponse, error) {
	proof, err := kp.Sign(wire.KeyProofMessage(r.tok.Mesh, r.tok.Node, pub))
	if err != nil {
		return wire.EnrolResponse{}, err
	}
	req, _ := json.Marshal(wire.EnrolRequest{
		V: wire.ProtocolVersion, Mesh: r.tok.Mesh, Node: r.tok.Node, Role: string(r.tok.Role),
		TokenID: r.tokenID(), TokenProof: base64.StdEncoding.EncodeToString(r.tokenProof(pub)),
		PublicKey:  pub,
		KeyProof:   base64.StdEncoding.EncodeToString(proof),
		CAPin:      hex.EncodeToString(r.tok.CAPin[:]),
		SigningKey: hex.EncodeToString(r.tok.SigningKey),
		Agent:      r.o.Agent,
	})
	a, err := resend.Send(ctx, nc, resend.Request{Subject: wire.EnrolKeySubject(r.tok.Node, pub), Data: req,
		Timeout: r.o.RequestTimeout, Resend: r.o.Resend, Settles: enrolSettles, Pending: enrolPending})
	if ctx.Err() != nil {
		return wire.EnrolResponse{}, interrupted(ctx, "waiting for the mesh's answer")
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return wire.EnrolResponse{}, &RefusedError{Code: wire.CodeUnavailable, Message: "no control node is serving enrolments right now"}
		}
		if errors.Is(err, resend.ErrNotSent) {
			return wire.EnrolResponse{}, fmt.Errorf("%w: the connection was lost before the request could be sent (%w); nothing reached the mesh: run enrol again with the same token", ErrUnreachable, err)
		}
		// Not "no broker could be reached": one was, and took the request.
		return wire.EnrolResponse{}, fmt.Errorf("%w (%w): it was sent, and the mesh may have enrolled this machine's key; run enrol again with the same token, which presents the same key (the pending one in %s), and is answered from the mesh's records if it did", ErrNoAnswer, err, identity.PendingPath(r.o.StateDir))
	}
	resp, err := wire.DecodeReply[wire.EnrolResponse](a.Msg.Data)
	if err != nil {
		return resp, fmt.Errorf("%w: %v", ErrBadAnswer, err)
	}
	if !resp.OK {
		if resp.Error == nil {
			return resp, fmt.Errorf("%w: a refusal without a reason", ErrBadAnswer)
		}
		return resp, &RefusedError{Code: resp.Error.Code, Message: resp.Error.Message, EarlierUnanswered: a.Unsettled > 0 && !enrolSettles(a.Msg.Data)}
	}
	return resp, nil
}

// enrolPending reports whether a refusal says its sending may still be carried out:
// unavailable and internal (a commit that could not be confirmed) may; token_expired
// was refused before anything was done.
func enrolPending(data []byte) bool {
	resp, err := wire.DecodeReply[wire.EnrolResponse](data)
	return err == nil && resp.Error != nil && (resp.Error.Code == wire.CodeUnavailable || resp.Error.Code == wire.CodeInternal)
}

// enrolSettles reports whether an enrolment answer is taken while an earlier sending
// of the request is unanswered: an acceptance is, and a refusal no sending still
// under way can overtake. Not these, each of which the earlier sending, taken by a
// control node and still being committed, can turn into an enrolment: unavailable
// and internal (this sending found no leader, or a commit it could not confirm), and
// token_expired (this sending came after the token's hour, to a leader that had not
// yet applied the earlier sending's enrolment, made within it).
func enrolSettles(data []byte) bool {
	resp, err := wire.DecodeReply[wire.EnrolResponse](data)
	if err != nil || resp.OK || resp.Error == nil {
		return true
	}
	switch resp.Error.Code {
	case wire.CodeUnavailable, wire.CodeInternal, wire.CodeTokenExpired:
		return false
	}
	return true
}

// answer is what the mesh's enrolment reply gave, verified.
type answer struct {
	id         identity.Identity
	keyringEnv []byte
	keyring    declarations.Keyring
	decl       declarations.Verified
	membership declarations.Membership
}

// verify checks the mesh's answer: it is for this enrolment (the token's mesh, node
// and role, and the node's own subjects: unsigned, so compared), the CA it hands over
// is the pinned one, the keyring is signed by the token's key, and the first
// declaration and the brokers' membership verify under that keyring.
func (r *run) verify(resp wire.EnrolResponse, kp *identity.KeyPair, pub string) (answer, error) {
	fail := func(format string, args ...any) (answer, error) {
		return answer{}, fmt.Errorf("%w: %s", ErrBadAnswer, fmt.Sprintf(format, args...))
	}
	if resp.Mesh != r.tok.Mesh || resp.Node != r.tok.Node {
		return answer{}, &OtherAnswerError{Field: "mesh and node", Got: quoted(resp.Mesh) + "/" + quoted(resp.Node),
			Want: quoted(r.tok.Mesh) + "/" + quoted(r.tok.Node)}
	}
	if resp.Role != string(r.tok.Role) {
		return answer{}, &OtherAnswerError{Field: "role", Got: quoted(resp.Role), Want: quoted(string(r.tok.Role)) + " (the token's)"}
	}
	block, _ := pem.Decode([]byte(resp.CAPEM))
	if block == nil {
		return fail("no CA certificate in the answer")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fail("CA certificate: %v", err)
	}
	if pintls.Pin(ca) != r.tok.CAPin {
		return fail("the CA in the answer is not the one pinned in the token")
	}
	if resp.Subjects == nil {
		return fail("the answer lacks subjects")
	}
	if want := wire.NodeSubjects(r.tok.Node); *resp.Subjects != want {
		return answer{}, &OtherAnswerError{Field: "subjects", Got: subjectsText(*resp.Subjects), Want: subjectsText(want)}
	}
	anchor := declarations.Keyring{Mesh: r.tok.Mesh, Epoch: 0, Keys: []string{hex.EncodeToString(r.tok.SigningKey)}}
	kr, err := declarations.VerifyKeyring(resp.Keyring, anchor, r.tok.Mesh)
	if err != nil {
		return fail("keyring: %v", err)
	}
	keys, err := kr.PublicKeys()
	if err != nil {
		return fail("keyring: %v", err)
	}
	if len(resp.Declaration) == 0 {
		// A repeat whose first answer was lost, after a declaration larger than an
		// answer may carry was issued to the node: the control plane sends the rest.
		return answer{}, fmt.Errorf("%w: %w (it has grown larger than an answer may carry) and nothing was saved: "+
			"the declaration signed for this key is what proves the mesh recorded it. Ask an operator to revoke %s (meshctl revoke) and mint a new token, then enrol with it",
			ErrBadAnswer, ErrNoFirstDeclaration, r.tok.Node)
	}
	decl, err := declarations.VerifyDeclaration(resp.Declaration, keys, declarations.Expect{
		Mesh: r.tok.Mesh, Node: r.tok.Node, NodeKey: pub, KeyringEpoch: kr.Epoch, Now: r.o.Now(),
	})
	if errors.Is(err, declarations.ErrNotYetValid) || errors.Is(err, declarations.ErrExpired) {
		// Signed for this key: the mesh enrolled it. The clock is the fault, and it
		// was "does not verify", as if the answer were forged, with nothing to do.
		// Which clock is wrong, this machine's or the leader's that stamped it, the
		// verifier's words say as far as they can: both are named.
		return answer{}, fmt.Errorf("%w: this machine's clock reads %s (%v); the mesh enrolled this machine's key: once the clocks agree (this one: timedatectl, NTP), run enrol again with the same token, which presents the same key and is answered again until a day after the token expires (%s)",
			ErrAnswerTime, r.o.Now().UTC().Format(time.RFC3339), err, r.tok.Expiry.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return fail("first declaration: %v", err)
	}
	m, err := declarations.VerifyMembership(resp.Membership, keys, r.tok.Mesh, 0, nil)
	if err != nil {
		return fail("brokers: %v", err)
	}
	brokers := make([]string, 0, len(r.tok.Brokers))
	for _, b := range r.tok.Brokers {
		brokers = append(brokers, b.String())
	}
	seed, _ := kp.Seed()
	id := identity.Identity{
		Format:    identity.FormatVersion,
		Mesh:      r.tok.Mesh,
		Node:      r.tok.Node,
		Role:      resp.Role,
		Seed:      identity.Secret(seed),
		PublicKey: pub,
		CAPEM:     resp.CAPEM,
		CAPin:     hex.EncodeToString(r.tok.CAPin[:]),
		// The token's brokers, which came out of band; the signed membership that
		// supersedes them is kept in the applied state.
		Brokers:     brokers,
		Subjects:    identity.Subjects(*resp.Subjects),
		SigningKeys: []string{hex.EncodeToString(r.tok.SigningKey)},
		EnrolledAt:  r.o.Now().UTC().Truncate(time.Second),
	}
	if err := id.ValidateWith(kp); err != nil {
		return fail("%v", err)
	}
	return answer{id: id, keyringEnv: resp.Keyring, keyring: kr, decl: decl, membership: m}, nil
}

func saveError(err error, tok token.Token) error {
	if errors.Is(err, identity.ErrAlreadyEnrolled) {
		return err
	}
	hint := "fix the cause and run enrol again with the same token (valid until " + tok.Expiry.Format(time.RFC3339) + ")"
	if errors.Is(err, syscall.ENOSPC) {
		hint = "the disk is full: free space and run enrol again with the same token (valid until " + tok.Expiry.Format(time.RFC3339) + ")"
	}
	return fmt.Errorf("%w: %v; nothing is half-written: %s", ErrSave, err, hint)
}

// Connect dials the mesh as the enrolled node: pinned TLS, handshake first, the node's
// nkey signing the server's nonce. It is a one-shot connection (no reconnects).
func Connect(id identity.Identity, kp *identity.KeyPair, timeout time.Duration) (*nats.Conn, error) {
	opts, err := link.AsNode(context.Background(), id, kp, nil, nil)
	if err != nil {
		return nil, err
	}
	return nats.Connect(link.URLs(id.Brokers), append(opts, nats.Timeout(timeout), nats.DontRandomize(), nats.NoReconnect())...)
}
