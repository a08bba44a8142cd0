package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Command is one entry of the replicated log. Exactly one of the operation fields is
// set, named by Op. At is the proposing leader's clock, and the only time the state
// machine ever uses.
type Command struct {
	Op string    `json:"op"`
	At time.Time `json:"at"`
	// Rules is the least ApplyRules that applies this command as its proposer
	// meant; 0 for a command every version since the rules were announced applies
	// alike. A state machine on older rules stops at it (ErrNewerRules) rather
	// than apply it otherwise.
	Rules int `json:"rules,omitempty"`
	// Request is the id of the operator's request that proposed this change
	// (RulesRequests; stamped with them): a command whose id is on record changes
	// nothing. Empty for the changes no operator asked for, and under older rules.
	Request string `json:"request,omitempty"`

	Init        *InitCmd        `json:"init,omitempty"`
	CreateToken *CreateTokenCmd `json:"create_token,omitempty"`
	Enrol       *EnrolCmd       `json:"enrol,omitempty"`
	Declare     *DeclareCmd     `json:"declare,omitempty"`
	Revoke      *RevokeCmd      `json:"revoke,omitempty"`
	Status      *StatusCmd      `json:"status,omitempty"`
	Label       *LabelCmd       `json:"label,omitempty"`
	Probe       *ProbeCmd       `json:"probe,omitempty"`

	RemoveControl *RemoveControlCmd `json:"remove_control,omitempty"`
	Refresh       *RefreshCmd       `json:"refresh,omitempty"`
	Rotate        *RotateCmd        `json:"rotate,omitempty"`
	Retire        *RetireCmd        `json:"retire,omitempty"`
	CancelTokens  *CancelTokensCmd  `json:"cancel_tokens,omitempty"`
	// Forget is stamped with RulesForgetRevoked, always.
	Forget *ForgetCmd `json:"forget_revoked,omitempty"`
	// AddOperator and RevokeOperators are stamped with RulesOperators, always;
	// with RulesOperatorRenewal when they renew or name keys.
	AddOperator     *AddOperatorCmd     `json:"add_operator,omitempty"`
	RevokeOperators *RevokeOperatorsCmd `json:"revoke_operators,omitempty"`

	// ControlServing is stamped with RulesBrokersWhenServing, always.
	ControlServing *ControlServingCmd `json:"control_serving,omitempty"`
}

// RequestRecord is what the state keeps of a change an operator asked for
// (State.Requests): enough to answer the same request sent again.
type RequestRecord struct {
	// At is the time of the command that carried the change out.
	At time.Time `json:"at"`
	// Op is the command's op.
	Op string `json:"op"`
	// Body is a declaration's body digest: the nodes it went to are those
	// declared with it since.
	Body string `json:"body,omitempty"`
	// Selector is a declaration's selector digest (Selector.Digest): a sending
	// under the id that names other nodes is another change. No rule of the state
	// reads it (the leader compares it before proposing anything): a control node
	// older than it applies the entries without it, as it does the agent (decision
	// 0027), and a record without it is compared by its body alone.
	Selector string `json:"selector,omitempty"`
}

// RequestRetention is how long a request id stays on record after the change it
// carried out, measured by the times of later commands. meshctl sends a change
// again within a call's time (--timeout, 15 s by default) and never later than
// 10 minutes after its first sending (api.MaxResend); the rest is room for
// leaders' clocks that disagree (decision 0006).
const RequestRetention = time.Hour

// CancelTokensCmd cancels pending tokens of a node: from this command on, none of
// them admits anything. Used, expired and already cancelled tokens are left as they
// are. Without IDs, every token of the node pending at the command's time is
// cancelled, one minted since the operator looked included. With IDs (short ids,
// Token.ShortID) under RulesCancelByID, only those: a token minted since is left.
type CancelTokensCmd struct {
	Node string `json:"node"`
	// IDs are the tokens to cancel, as `meshctl token list` shows them; applied
	// only by RulesCancelByID, and the command is stamped with them when set.
	IDs []string `json:"ids,omitempty"`
}

// OpCancelTokens names CancelTokensCmd.
const OpCancelTokens = "cancel_tokens"

// RefreshCmd re-issues the listed nodes' declarations: same version, same body, a new
// validity window from the command's time. A host that stops receiving them sees its
// declaration expire and reports itself stale, so a broker that withholds them is seen.
type RefreshCmd struct {
	Nodes []string `json:"nodes"`
}

// OpRefresh names RefreshCmd.
const OpRefresh = "refresh"

// OpPurge carries no operation of its own: like every command, it drops the token
// records and sealed identities that fell due by its time (purgeTokens). The leader
// proposes it when one has fallen due and nothing else was committed since
// (State.PurgeDue), so that a quiet mesh does not keep a sealed identity past its
// token's expiry.
const OpPurge = "purge"

// Operation names.
const (
	OpInit        = "init"
	OpCreateToken = "create_token"
	OpEnrol       = "enrol"
	OpDeclare     = "declare"
	OpRevoke      = "revoke"
	OpStatus      = "status"
	OpLabel       = "label"
	OpProbe       = "probe"
)

// InitCmd creates the mesh: its id, its first keyring, the declaration validity.
type InitCmd struct {
	Mesh string `json:"mesh"`
	// AdminAccount is the public account nkey that issues operator credentials.
	AdminAccount string `json:"admin_account"`
	// Control is the bootstrap control node, the first member; it holds the CA key.
	Control  ControlNode   `json:"control"`
	Keyring  Keyring       `json:"keyring"`
	Validity time.Duration `json:"validity"`
}

// CreateTokenCmd records a minted token by the hash of its secret.
type CreateTokenCmd struct {
	ID string `json:"id"`
	// ProofKey is the public half of the key the secret derives (hex); see Token.
	ProofKey string            `json:"proof_key,omitempty"`
	Node     string            `json:"node"`
	Role     string            `json:"role"`
	Labels   map[string]string `json:"labels,omitempty"`
	TTL      time.Duration     `json:"ttl"`
	// Control, and SealedTo with SealedSum (or, as recorded before them, Sealed), are
	// set for control tokens only (see Token).
	Control   *ControlAddrs             `json:"control,omitempty"`
	Sealed    []byte                    `json:"sealed,omitempty"`
	SealedTo  map[string]SealedIdentity `json:"sealed_to,omitempty"`
	SealedSum string                    `json:"sealed_sum,omitempty"`
	// Replace cancels the node's pending tokens in the same entry; without it, a
	// pending token refuses the command (RulesTokensFollowNodes).
	Replace bool `json:"replace,omitempty"`
}

// sealsIdentity reports whether c carries a sealed identity, in either form.
func (c *CreateTokenCmd) sealsIdentity() bool {
	return len(c.Sealed) > 0 || len(c.SealedTo) > 0 && c.SealedSum != ""
}

// EnrolCmd consumes a token and records the node with its public key.
type EnrolCmd struct {
	TokenID   string `json:"token_id"`
	Node      string `json:"node"`
	Role      string `json:"role"`
	PublicKey string `json:"public_key"`
	// CurveKey is a joining control node's public curve key.
	CurveKey string `json:"curve_key,omitempty"`
	// Reseal is, for a joining control node, the identities of the other control
	// tokens that hold one, sealed again to its curve key by the node that admits
	// it, from its own copies (token id -> copy): a token minted before the node
	// joined can then be used while it leads.
	Reseal map[string]SealedIdentity `json:"reseal,omitempty"`
}

// Selector chooses the nodes a declaration is for. The state machine resolves it at the
// log index it is applied at, so every control node resolves it alike.
type Selector struct {
	Nodes  []string          `json:"nodes,omitempty"`
	Role   string            `json:"role,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	All    bool              `json:"all,omitempty"`
}

// Digest is the hex SHA-256 of the selector as JSON: the same selector sent again
// has the same digest (labels are written in key order).
func (s Selector) Digest() string {
	data, _ := json.Marshal(s) // strings, a map of strings and a bool: cannot fail
	return BodyDigest(data)
}

// Empty reports whether the selector selects nothing at all.
func (s Selector) Empty() bool {
	return len(s.Nodes) == 0 && s.Role == "" && len(s.Labels) == 0 && !s.All
}

// DeclareCmd assigns a body to every node the selector matches, each at its own next
// version: one log entry however many nodes it reaches.
type DeclareCmd struct {
	Selector Selector        `json:"selector"`
	Body     json.RawMessage `json:"body"` // canonical body JSON, validated by the proposer
}

// RevokeCmd revokes a node and its key for good.
type RevokeCmd struct {
	// Node is one node; Nodes several, revoked together. Log entries written
	// before Nodes existed carry Node alone.
	Node  string   `json:"node,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
	// Seen is when the leader last heard from each node it revokes
	// (Node.LastSeen): a node revoked while connected was heard from until then,
	// and its connection's close, which the revocation causes, is not recorded for
	// a revoked node. No rule of the state reads it: a control node older than it
	// applies the revocation alike without it, as it does StatusCmd.Seen
	// (decision 0027).
	Seen []SeenReport `json:"seen,omitempty"`
	// Keys names, by node, the key the node must hold for the command to revoke
	// anything (RulesRevokeByKey); a node it does not name may hold any.
	Keys map[string]string `json:"keys,omitempty"`
}

// Targets is every node the command names, once each, in order.
func (c *RevokeCmd) Targets() []string {
	out := make([]string, 0, 1+len(c.Nodes))
	seen := map[string]bool{}
	for _, id := range append([]string{c.Node}, c.Nodes...) {
		if id != "" && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// StatusCmd records what nodes reported, when it changed. Reports are batched: a
// fleet answering one declaration is a few log entries, not one per node.
type StatusCmd struct {
	Reports []StatusReport `json:"reports"`
	// Seen records, for nodes whose last connection closed, when the leader last
	// heard from them (Node.LastSeen). No rule of the state reads it: a control
	// node older than it applies these entries without it, as it does the agent
	// (decision 0027).
	Seen []SeenReport `json:"seen,omitempty"`
}

// SeenReport is when the leader last heard from a node that went offline.
type SeenReport struct {
	Node string    `json:"node"`
	At   time.Time `json:"at"`
}

// StatusReport is one node's report.
type StatusReport struct {
	Node    string  `json:"node"`
	Applied Applied `json:"applied"`
}

// LabelCmd sets (or, with an empty value, removes) labels on a node.
type LabelCmd struct {
	Node   string            `json:"node"`
	Labels map[string]string `json:"labels"`
	// Max, when set, is the most labels the node may carry after the change; a
	// change that would leave it with more, and more than it has, is refused
	// (RulesLabelCap). A node already past Max may still lose labels.
	Max int `json:"max,omitempty"`
}

// ProbeCmd occupies an index: a joining control node proves it replicates by
// naming ID, which only the log carries (in the entry, or, once a snapshot has
// replaced it, in the node's ControlNode.Probe).
type ProbeCmd struct {
	ID   string `json:"id"`
	Node string `json:"node,omitempty"` // the joining node
}

// Assignment is one node's new declaration from a DeclareCmd.
type Assignment struct {
	Node    string `json:"node"`
	Version uint64 `json:"version"`
}

// Result is what applying a command returns to the proposer.
type Result struct {
	Err         error
	Token       *Token
	Node        *Node
	Control     *ControlNode
	Assignments []Assignment
	Skipped     []string // selected nodes that could not take the declaration (revoked)
	// Tokens are the tokens a CancelTokensCmd cancelled, or, under
	// RulesTokensFollowNodes, a RevokeCmd or a replacing CreateTokenCmd.
	Tokens []Token
	// NotPending are the tokens a CancelTokensCmd named (RulesCancelByID) that
	// were not pending: used, expired or cancelled already, left as they are.
	// StillPending are the node's pending tokens it did not name: minted after
	// the operator looked, left pending.
	NotPending   []Token
	StillPending []Token
	Revoked      []Node // the nodes a RevokeCmd revoked, in its order
	// Forgotten are the nodes a ForgetCmd forgot, in its order.
	Forgotten []string
	// Operators are the operator credentials an AddOperatorCmd recorded or a
	// RevokeOperatorsCmd revoked.
	Operators []Operator
	// Repeated is set when a CreateTokenCmd, an enrolment or a control node's
	// admission repeated one already applied: nothing changed (Token is the token
	// made then, Node the node enrolled then); when a
	// ControlServingCmd names a node listed already; or when
	// the command carried a request id already on record (Request is its record).
	Repeated bool
	Request  *RequestRecord
}

// BodyDigest is the key a body is stored under.
func BodyDigest(body []byte) string {
	d := sha256.Sum256(body)
	return hex.EncodeToString(d[:])
}

// emptyBody is the canonical body of the declaration every node starts with.
const emptyBody = `{"files":[]}`

// EmptyBody returns the canonical empty body.
func EmptyBody() json.RawMessage { return json.RawMessage(emptyBody) }

// expiredTokenRetention is how long a used or expired token record is kept, so that a
// late repeat is told "used"/"expired" rather than "unknown".
const expiredTokenRetention = 24 * time.Hour

// apply changes s by c. It never reads the clock.
func (s *State) apply(c *Command) Result {
	if c.Op != OpInit && !s.Initialised() {
		return Result{Err: ErrNotInitialised}
	}
	s.purgeTokens(c.At)
	if c.Request != "" && c.Rules >= RulesRequests {
		return s.applyRequest(c)
	}
	return s.applyCommand(c)
}

// applyRequest applies a command an operator's request proposed under its id: once
// (the first time the id comes), and not again (every time after, within
// RequestRetention). Every node applies the same ids alike: a command carries its
// id only when stamped with the rules that keep them.
func (s *State) applyRequest(c *Command) Result {
	for id, r := range s.Requests {
		if c.At.Sub(r.At) > RequestRetention {
			delete(s.Requests, id)
		}
	}
	if r, ok := s.Requests[c.Request]; ok {
		return Result{Repeated: true, Request: &r}
	}
	res := s.applyCommand(c)
	if res.Err != nil {
		// Nothing was done: the same request sent again may yet be.
		return res
	}
	r := RequestRecord{At: c.At, Op: c.Op}
	if c.Op == OpDeclare && c.Declare != nil {
		r.Body, r.Selector = BodyDigest(c.Declare.Body), c.Declare.Selector.Digest()
	}
	if s.Requests == nil {
		s.Requests = map[string]RequestRecord{}
	}
	s.Requests[c.Request] = r
	return res
}

// applyCommand changes s by c, whatever its request id.
func (s *State) applyCommand(c *Command) Result {
	switch {
	case c.Op == OpInit && c.Init != nil:
		return s.applyInit(c.At, c.Init)
	case c.Op == OpCreateToken && c.CreateToken != nil:
		return s.applyCreateToken(c.At, c.CreateToken, c.Rules)
	case c.Op == OpEnrol && c.Enrol != nil:
		return s.applyEnrol(c.At, c.Enrol, c.Rules)
	case c.Op == OpDeclare && c.Declare != nil:
		return s.applyDeclare(c.At, c.Declare)
	case c.Op == OpRevoke && c.Revoke != nil:
		return s.applyRevoke(c.At, c.Revoke, c.Rules)
	case c.Op == OpStatus && c.Status != nil:
		return s.applyStatus(c.At, c.Status)
	case c.Op == OpLabel && c.Label != nil:
		return s.applyLabel(c.Label, c.Rules)
	case c.Op == OpProbe:
		if c.Probe != nil {
			if cn := s.ControlNodes[c.Probe.Node]; cn != nil {
				cn.Probe = c.Probe.ID
			}
		}
		return Result{}
	case c.Op == OpRemoveControl && c.RemoveControl != nil:
		return s.applyRemoveControl(c.At, c.RemoveControl)
	case c.Op == OpControlServing && c.ControlServing != nil && c.Rules >= RulesBrokersWhenServing:
		return s.applyControlServing(c.ControlServing)
	case c.Op == OpRefresh && c.Refresh != nil:
		return s.applyRefresh(c.At, c.Refresh)
	case c.Op == OpRotate && c.Rotate != nil:
		return s.applyRotate(c.Rotate, c.Rules)
	case c.Op == OpRetire && c.Retire != nil:
		return s.applyRetire(c.Retire)
	case c.Op == OpCancelTokens && c.CancelTokens != nil:
		return s.applyCancelTokens(c.At, c.CancelTokens, c.Rules)
	case c.Op == OpForget && c.Forget != nil && c.Rules >= RulesForgetRevoked:
		return s.applyForget(c.Forget)
	case c.Op == OpAddOperator && c.AddOperator != nil && c.Rules >= RulesOperators:
		return s.applyAddOperator(c.At, c.AddOperator, c.Rules)
	case c.Op == OpRevokeOperators && c.RevokeOperators != nil && c.Rules >= RulesOperators:
		return s.applyRevokeOperators(c.At, c.RevokeOperators, c.Rules)
	case c.Op == OpPurge:
		return Result{} // purgeTokens ran above
	}
	return Result{Err: fmt.Errorf("%w: op %q", ErrBadCommand, c.Op)}
}

func (s *State) applyInit(at time.Time, c *InitCmd) Result {
	if s.Initialised() {
		if s.Mesh == c.Mesh {
			return Result{} // a repeated init after a restart is harmless
		}
		return Result{Err: fmt.Errorf("%w: the state belongs to mesh %q", ErrBadCommand, s.Mesh)}
	}
	s.Mesh = c.Mesh
	s.CreatedAt = at
	s.Keyring = c.Keyring
	s.Validity = c.Validity
	s.AdminAccount = c.AdminAccount
	if c.Control.ID != "" {
		cn := c.Control
		cn.JoinedAt = at
		s.ControlNodes[cn.ID] = &cn
		s.CAHolder = cn.ID
	}
	s.MembershipVersion = 1
	s.Bodies[BodyDigest([]byte(emptyBody))] = EmptyBody()
	return Result{}
}

// newestKey is the keyring's newest signing key (hex): the one a token minted now
// carries. "" before the keyring exists.
func (s *State) newestKey() string {
	if len(s.Keyring.Keys) == 0 {
		return ""
	}
	return s.Keyring.Keys[len(s.Keyring.Keys)-1]
}

func (s *State) applyCreateToken(at time.Time, c *CreateTokenCmd, rules int) Result {
	if t, dup := s.Tokens[c.ID]; dup {
		// The same request again (the operator's client sends a token.create again
		// when a leader died with it): the token it made, unchanged. The id is the
		// hash of a secret only that client holds, so nobody else asks for it; a
		// token already used, cancelled or expired, or asked for with other terms, is
		// refused as before.
		if !t.sameRequest(c) || t.StateAt(at) != TokenPending {
			return Result{Err: fmt.Errorf("%w: token id already exists", ErrBadCommand)}
		}
		if err := s.idTaken(c.Node); err != nil {
			return Result{Err: err}
		}
		tc := *t
		tc.Labels = maps.Clone(t.Labels)
		return Result{Token: &tc, Repeated: true, Tokens: s.replacedBy(t)}
	}
	if err := s.idTaken(c.Node); err != nil {
		return Result{Err: err}
	}
	if (c.Role == RoleControl) != (c.Control != nil && c.sealsIdentity()) || len(c.Sealed) > 0 && len(c.SealedTo) > 0 {
		return Result{Err: fmt.Errorf("%w: a control token carries addresses and a sealed identity, a worker token neither", ErrBadCommand)}
	}
	var replaced []Token
	if rules >= RulesTokensFollowNodes {
		pending := s.pendingTokens(c.Node, at, rules)
		if len(pending) > 0 && !c.Replace {
			// Which are stale is this node's view (Token.SigningKey), for the
			// message only: the refusal is every node's.
			stale := true
			for _, t := range pending {
				stale = stale && s.ShownState(t, at) == TokenStale
			}
			return Result{Err: &PendingTokenError{Node: c.Node, Pending: pending, Stale: stale}}
		}
		replaced = s.cancelTokens(pending, at)
	}
	t := &Token{ID: c.ID, ProofKey: c.ProofKey, Node: c.Node, Role: c.Role, Labels: maps.Clone(c.Labels), CreatedAt: at, Expiry: at.Add(c.TTL),
		SigningKey: s.newestKey(),
		Control:    c.Control, Sealed: slices.Clone(c.Sealed), SealedTo: maps.Clone(c.SealedTo), SealedSum: c.SealedSum}
	s.addToken(t)
	if due := t.purgeDue(); due.Before(s.purgeAt) {
		s.purgeAt = due
	}
	tc := *t
	tc.Labels = maps.Clone(t.Labels) // the result must not alias the live state
	return Result{Token: &tc, Tokens: replaced}
}

// PendingTokens returns the tokens of node that would enrol it at at, oldest first
// (ties by id, so that every control node lists them alike). A stale one, whose
// signing key was retired, is not among them: the mesh refuses it already. It is
// what this control node shows; the rules read pendingTokens.
func (s *State) PendingTokens(node string, at time.Time) []*Token {
	return s.pendingTokens(node, at, RulesTokensFollowNodes)
}

// pendingTokens returns the tokens of node that the rules count as pending at at,
// in PendingTokens' order: by their record alone from RulesPendingByRecord on, stale
// ones included, as the record is the same on every control node; by what
// ShownState showed before (staleOrState; see RulesPendingByRecord).
func (s *State) pendingTokens(node string, at time.Time, rules int) []*Token {
	var out []*Token
	for _, id := range s.tokensOf[node] {
		t := s.Tokens[id]
		st := t.StateAt(at)
		if rules < RulesPendingByRecord {
			st = s.staleOrState(t, at)
		}
		if st == TokenPending {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Token) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// replacedBy returns copies of the tokens t's mint cancelled (CreateTokenCmd.Replace),
// cancelled in its entry: a repeated request's answer names them as the first did.
// Without them, a --replace whose answer was lost, sent again, said nothing of the
// token it had cancelled, someone else's perhaps (a review).
func (s *State) replacedBy(t *Token) []Token {
	var out []Token
	for _, id := range s.tokensOf[t.Node] {
		if o := s.Tokens[id]; id != t.ID && o.CancelledAt.Equal(t.CreatedAt) {
			oc := *o
			oc.Labels = maps.Clone(o.Labels)
			out = append(out, oc)
		}
	}
	slices.SortFunc(out, func(a, b Token) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// cancelTokens cancels ts at at and returns copies of them as cancelled.
func (s *State) cancelTokens(ts []*Token, at time.Time) []Token {
	var out []Token
	for _, t := range ts {
		t.CancelledAt = at
		// A control token's sealed identity is useless once the token is: drop it.
		t.dropIdentity()
		tc := *t
		tc.Labels = maps.Clone(t.Labels)
		out = append(out, tc)
	}
	return out
}

// PendingTokenError refuses a token for a node that has pending ones
// (ErrTokenPending), naming them.
type PendingTokenError struct {
	Node    string
	Pending []*Token
	// Stale says each of them carries a signing key retired since it was minted:
	// none can enrol the node, and each still counts (RulesPendingByRecord).
	Stale bool
}

func (e *PendingTokenError) Error() string {
	t := e.Pending[len(e.Pending)-1]
	others := ""
	if n := len(e.Pending) - 1; n > 0 {
		others = fmt.Sprintf(" and %d older one(s)", n)
	}
	if e.Stale {
		if len(e.Pending) > 1 {
			return fmt.Sprintf("%v: %s has token %s%s, all stale: minted before their signing key was retired, none can enrol the node, and they still count as its tokens: "+
				"mint again with --replace, which cancels them, or cancel them first (meshctl token cancel %s)",
				ErrTokenPending, e.Node, t.ShortID(), others, e.Node)
		}
		return fmt.Sprintf("%v: %s has token %s, stale: minted before its signing key was retired, it cannot enrol the node, and still counts as its token: "+
			"mint again with --replace, which cancels it, or cancel it first (meshctl token cancel %s)",
			ErrTokenPending, e.Node, t.ShortID(), e.Node)
	}
	kind, first := "token", "enrols the node, with its labels"
	if t.Role == RoleControl {
		// A control token takes no labels: the first used admits the control node
		// at the addresses it was minted for.
		kind, first = "control token", "admits the control node, at the addresses it was minted for"
	}
	return fmt.Sprintf("%v: %s has %s %s, minted %s and pending until %s%s, and whichever token is used first %s: "+
		"use that token, cancel it (meshctl token cancel %s), or mint again with --replace, which cancels it",
		ErrTokenPending, e.Node, kind, t.ShortID(), t.CreatedAt.UTC().Format(time.RFC3339), t.Expiry.UTC().Format(time.RFC3339), others, first, e.Node)
}

// Is makes errors.Is(err, ErrTokenPending) hold.
func (e *PendingTokenError) Is(target error) bool { return target == ErrTokenPending }

// sameRequest reports whether c asks for exactly the token t records.
func (t *Token) sameRequest(c *CreateTokenCmd) bool {
	return t.Node == c.Node && t.ProofKey == c.ProofKey && t.Role == c.Role && maps.Equal(t.Labels, c.Labels) &&
		t.Expiry.Sub(t.CreatedAt) == c.TTL && bytes.Equal(t.Sealed, c.Sealed) && t.SealedSum == c.SealedSum &&
		(t.Control == nil) == (c.Control == nil) && (t.Control == nil || *t.Control == *c.Control)
}

func (s *State) applyCancelTokens(at time.Time, c *CancelTokensCmd, rules int) Result {
	ids := s.tokensOf[c.Node]
	if len(ids) == 0 {
		return Result{Err: fmt.Errorf("node %s: %w", c.Node, ErrNoToken)}
	}
	if len(c.IDs) > 0 && rules >= RulesCancelByID {
		return s.cancelNamedTokens(at, c, ids)
	}
	var out []Token
	for _, id := range ids {
		if t := s.Tokens[id]; t.StateAt(at) == TokenPending {
			out = append(out, s.cancelTokens([]*Token{t}, at)...)
		}
	}
	sortTokens(out)
	return Result{Tokens: out}
}

// cancelNamedTokens cancels, of node c.Node's tokens (ids), those c.IDs names that
// are pending, and reports the named ones that were not and the pending ones it
// did not name (RulesCancelByID). A name that is none of the node's tokens refuses
// the whole command, which then changes nothing.
func (s *State) cancelNamedTokens(at time.Time, c *CancelTokensCmd, ids []string) Result {
	named := make(map[string]*Token, len(c.IDs))
	for _, short := range c.IDs {
		named[short] = nil
	}
	for _, id := range ids {
		if t := s.Tokens[id]; t != nil {
			if _, ok := named[t.ShortID()]; ok {
				named[t.ShortID()] = t
			}
		}
	}
	var unknown []string
	for short, t := range named {
		if t == nil {
			unknown = append(unknown, short)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Result{Err: fmt.Errorf("node %s: token %s: %w", c.Node, strings.Join(unknown, ", "), ErrNoSuchToken)}
	}
	var res Result
	for _, id := range ids {
		t := s.Tokens[id]
		if t == nil {
			continue
		}
		pending := t.StateAt(at) == TokenPending
		_, isNamed := named[t.ShortID()]
		switch {
		case isNamed && pending:
			res.Tokens = append(res.Tokens, s.cancelTokens([]*Token{t}, at)...)
		case isNamed:
			res.NotPending = append(res.NotPending, t.copy())
		case pending:
			res.StillPending = append(res.StillPending, t.copy())
		}
	}
	sortTokens(res.Tokens)
	sortTokens(res.NotPending)
	sortTokens(res.StillPending)
	return res
}

// copy returns a copy of t that shares no map with the state.
func (t *Token) copy() Token {
	tc := *t
	tc.Labels = maps.Clone(t.Labels)
	tc.Sealed, tc.SealedTo = nil, nil // never read from a result
	return tc
}

// sortTokens orders tokens as PendingTokens does: oldest first, ties by id.
func sortTokens(ts []Token) {
	slices.SortFunc(ts, func(a, b Token) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

func (s *State) applyEnrol(at time.Time, c *EnrolCmd, rules int) Result {
	t, err := s.TokenState(c.TokenID, c.Node, c.Role, c.PublicKey, at)
	if err != nil {
		return Result{Err: err}
	}
	if t.Role == RoleControl {
		return s.admitControl(at, t, c, rules)
	}
	if !t.UsedAt.IsZero() {
		// The same enrolment again: its answer is the node that key enrolled. A
		// state restored from a snapshot that holds the used token but not that
		// node (a damaged one; a ForgetCmd removes only a node revoked long after its
		// token was purged) has nothing to repeat, and must not stop
		// the state machine on every control node replaying this entry.
		n, ok := s.Nodes[c.Node]
		if !ok || n.PublicKey != c.PublicKey {
			return Result{Err: ErrTokenUsed}
		}
		return Result{Node: n.copy(), Repeated: true}
	}
	t.UsedAt = at
	t.UsedKey = c.PublicKey
	// Versions never restart for a node id: a revoked node's id enrolled again
	// continues after the last version its earlier enrolment was given, so no
	// version is ever signed twice for the same id. Only an id whose count was
	// spent (OutOfVersions) starts over at v0, under its new key: declarations
	// are bound to the node key, so none of the old key's is taken by the new.
	first := uint64(0)
	old, again := s.Nodes[c.Node]
	forgotten, wasForgotten := s.Forgotten[c.Node]
	switch {
	case again:
		first = old.Declared.Version + 1
	case wasForgotten:
		first = forgotten.Version + 1
	}
	n := &Node{
		ID:         c.Node,
		Role:       t.Role,
		PublicKey:  c.PublicKey,
		Labels:     maps.Clone(t.Labels),
		EnrolledAt: at,
		Declared: Declared{
			Version:    first,
			BodyDigest: BodyDigest([]byte(emptyBody)),
			IssuedAt:   at,
			ExpiresAt:  at.Add(s.Validity),
		},
	}
	switch {
	case again && old.Revoked:
		n.EarlierRevokedAt, n.EarlierEnrolledAt = old.RevokedAt, old.EnrolledAt
	case wasForgotten:
		n.EarlierRevokedAt = forgotten.RevokedAt
		delete(s.Forgotten, c.Node) // the record holds the count again
	}
	s.Nodes[c.Node] = n
	if again && s.byKey[old.PublicKey] == c.Node {
		// Its old key stays in RevokedKeys; the index lets go of it, as a restore
		// would.
		s.reindexKey(old.PublicKey)
	}
	s.indexHolder(n)
	return Result{Node: n.copy()}
}

func (s *State) applyDeclare(at time.Time, c *DeclareCmd) Result {
	targets := s.Select(c.Selector)
	var res Result
	digest := BodyDigest(c.Body)
	for _, id := range targets {
		n, ok := s.Nodes[id]
		if !ok || n.Revoked {
			res.Skipped = append(res.Skipped, id)
			continue
		}
		n.Declared = Declared{
			Version:    n.nextVersion(),
			BodyDigest: digest,
			IssuedAt:   at,
			ExpiresAt:  at.Add(s.Validity),
		}
		res.Assignments = append(res.Assignments, Assignment{Node: id, Version: n.Declared.Version})
	}
	if len(res.Assignments) == 0 {
		res.Err = ErrNoTargets
		return res
	}
	s.Bodies[digest] = slices.Clone(c.Body)
	s.collectBodies()
	return res
}

// MaxVersionLead is how far past its declared version a node's report of what it
// applied may go for the control plane to record it (the daemon drops a report
// beyond it as malformed). nextVersion follows a node that applied more than the
// state knows (a control plane restored from a backup older than its last
// declarations), so an unbounded report would let a stolen host identity push its
// id's count to the last version: the next declaration would then wrap around to
// v0, which the host, and a clean machine enrolled under the id later (its count
// continues), refuses as older than what it holds, for good. At most this lead
// each declaration, 2^32 declarations to the one node would be needed to get
// there; a restored backup is far fewer declarations behind.
const MaxVersionLead = 1 << 32

// OutOfVersions returns, sorted, the nodes sel reaches whose declared version is
// the last there is: a declaration to them would wrap around to v0 (see
// MaxVersionLead for how a count got there before reports were bounded).
// It walks the nodes without building the selection, as Reaches does: it runs
// before every declaration.
func (s *State) OutOfVersions(sel Selector) []string {
	var out []string
	last := func(n *Node) bool { return !n.Revoked && n.Declared.Version == math.MaxUint64 }
	for _, id := range sel.Nodes {
		if n, ok := s.Nodes[id]; ok && last(n) {
			out = append(out, id)
		}
	}
	if sel.All || sel.Role != "" || len(sel.Labels) > 0 {
		for id, n := range s.Nodes {
			if last(n) && (sel.All || matches(n, sel.Role, sel.Labels)) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// nextVersion is the version n's next declaration takes: past the last one declared
// and past the last one the node reports applied. A control plane restored from a
// backup older than its last declarations knows fewer versions than its hosts
// applied, and a host refuses a version it holds signed over another body
// (replayed): counting on from the restored state, it would refuse every
// declaration until the count passed its own. A report of the largest version,
// which only a broken or hostile agent sends, is not followed: the count would
// wrap around to 0.
func (n *Node) nextVersion() uint64 {
	v := n.Declared.Version
	if a := n.Applied; a.HaveApplied && a.Version > v && a.Version < math.MaxUint64 {
		v = a.Version
	}
	return v + 1
}

func (s *State) applyRevoke(at time.Time, c *RevokeCmd, rules int) Result {
	targets := c.Targets()
	if len(targets) == 0 {
		return Result{Err: fmt.Errorf("%w: a revocation names no node", ErrBadCommand)}
	}
	// All or nothing: one unknown node refuses the whole command.
	var unknown []string
	for _, id := range targets {
		_, ok := s.Nodes[id]
		_, forgotten := s.Forgotten[id]
		if !ok && !forgotten {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownNode, strings.Join(unknown, ", "))}
	}
	if rules >= RulesRevokeByKey {
		for _, id := range slices.Sorted(maps.Keys(c.Keys)) {
			n, ok := s.Nodes[id]
			if f, forgotten := s.Forgotten[id]; forgotten && !ok {
				// Revoked already: the key must be its last machine's, as
				// while its record was kept.
				n, ok = s.forgottenView(id, f), true
			}
			switch {
			case !ok || !slices.Contains(targets, id):
				return Result{Err: fmt.Errorf("%w: a revocation names the key of %s, which it does not revoke", ErrBadCommand, id)}
			case n.PublicKey != c.Keys[id]:
				return Result{Err: fmt.Errorf("%s holds %s, not %s: %w", id, n.PublicKey, c.Keys[id], ErrKeyMismatch)}
			}
		}
	}
	res := Result{Revoked: make([]Node, 0, len(targets))}
	for _, id := range targets {
		n, ok := s.Nodes[id]
		if !ok {
			// Forgotten: revoked already, at its time.
			res.Revoked = append(res.Revoked, *s.forgottenView(id, s.Forgotten[id]))
			continue
		}
		if !n.Revoked {
			n.Revoked = true
			n.RevokedAt = at
			for _, r := range c.Seen {
				// As in applyStatus: the latest time, never later than the entry.
				if r.Node == id && r.At.After(n.LastSeen) && !r.At.After(at) {
					n.LastSeen = r.At
				}
			}
			s.revokeKey(n.PublicKey, n.ID)
			if rules >= RulesTokensFollowNodes {
				// The tokens minted for it die with it, and say so to whoever
				// presents one. A node revoked before keeps the tokens minted for
				// its replacement since.
				res.Tokens = append(res.Tokens, s.cancelTokens(s.pendingTokens(id, at, rules), at)...)
			}
		}
		res.Revoked = append(res.Revoked, *n.copy())
	}
	if rules < RulesTokensFollowNodes {
		// The earlier rules: every unused token of every node named is deleted.
		named := make(map[string]bool, len(targets))
		for _, id := range targets {
			named[id] = true
		}
		for id, t := range s.Tokens {
			if named[t.Node] && t.UsedAt.IsZero() {
				s.dropToken(id)
			}
		}
	}
	res.Node = &res.Revoked[0]
	return res
}

func (s *State) applyStatus(at time.Time, c *StatusCmd) Result {
	for _, r := range c.Reports {
		n, ok := s.Nodes[r.Node]
		if !ok || n.Revoked {
			continue // a report that raced a revocation
		}
		a := r.Applied
		a.ReportedAt = at
		n.Applied = a
	}
	for _, r := range c.Seen {
		// Never later than the entry: At is the leader's reading of its own clock.
		if n, ok := s.Nodes[r.Node]; ok && !n.Revoked && r.At.After(n.LastSeen) && !r.At.After(at) {
			n.LastSeen = r.At
		}
	}
	return Result{}
}

func (s *State) applyLabel(c *LabelCmd, rules int) Result {
	n, ok := s.Nodes[c.Node]
	if _, forgotten := s.Forgotten[c.Node]; !ok && forgotten {
		return Result{Err: fmt.Errorf("%s: %w", c.Node, ErrNodeRevoked)}
	}
	if !ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownNode, c.Node)}
	}
	if n.Revoked && rules >= RulesTokensFollowNodes {
		return Result{Err: fmt.Errorf("%s: %w", c.Node, ErrNodeRevoked)}
	}
	if after := LabelsAfter(n.Labels, c.Labels); c.Max > 0 && rules >= RulesLabelCap && after > c.Max && after > len(n.Labels) {
		return Result{Err: fmt.Errorf("%w: %s would carry %d, more than %d; remove some (meshctl label %s key=) before adding others; nothing was changed", ErrTooManyLabels, c.Node, after, c.Max, c.Node)}
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	for k, v := range c.Labels {
		if v == "" {
			delete(n.Labels, k)
		} else {
			n.Labels[k] = v
		}
	}
	return Result{Node: n.copy()}
}

// LabelsAfter counts the labels a node holding have carries once change is merged
// in: a key given an empty value is removed, any other set.
func LabelsAfter(have, change map[string]string) int {
	after := len(have)
	for k, v := range change {
		_, has := have[k]
		switch {
		case v == "" && has:
			after--
		case v != "" && !has:
			after++
		}
	}
	return after
}

// copy returns a copy of n that shares no map with the state: results travel to the
// proposer's goroutine while the state machine goes on changing the live node.
func (n *Node) copy() *Node {
	c := *n
	c.Labels = maps.Clone(n.Labels)
	return &c
}

// Select resolves a selector to node ids, sorted. Unknown ids named explicitly are
// returned too, so the caller can report them.
func (s *State) Select(sel Selector) []string { return s.selectNodes(sel, false) }

// SelectWithRevoked is Select with the revoked nodes the selector matches too: those
// a declaration made before their revocation may have reached.
func (s *State) SelectWithRevoked(sel Selector) []string { return s.selectNodes(sel, true) }

func (s *State) selectNodes(sel Selector, revoked bool) []string {
	set := map[string]bool{}
	for _, id := range sel.Nodes {
		set[id] = true
	}
	if sel.All || sel.Role != "" || len(sel.Labels) > 0 {
		for id, n := range s.Nodes {
			if n.Revoked && !revoked {
				continue
			}
			if sel.All || matches(n, sel.Role, sel.Labels) {
				set[id] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// Reaches reports whether a declaration for sel would reach at least one node: a
// node it names or selects that is not revoked. It stops at the first, so asking
// before a fleet's declaration costs little.
func (s *State) Reaches(sel Selector) bool {
	for _, id := range sel.Nodes {
		if n, ok := s.Nodes[id]; ok && !n.Revoked {
			return true
		}
	}
	if sel.All || sel.Role != "" || len(sel.Labels) > 0 {
		for _, n := range s.Nodes {
			if !n.Revoked && (sel.All || matches(n, sel.Role, sel.Labels)) {
				return true
			}
		}
	}
	return false
}

// matches reports whether n has role (if given) and every label given. A label
// given with an empty value matches a node without that key, as a map reads: how
// every version applied a declaration entry, so it stays (a change would be new
// rules, decision 0021). No entry selects so any more: the leader refuses such a
// selector before it proposes anything (daemon's validateValuedLabels), whoever
// sent it.
func matches(n *Node, role string, labels map[string]string) bool {
	if role != "" && n.Role != role {
		return false
	}
	for k, v := range labels {
		if n.Labels[k] != v {
			return false
		}
	}
	return role != "" || len(labels) > 0
}

// purgeTokens keeps of the token records only what is still of use, by the command's
// time. A control token's sealed identity (the new node's TLS key and operator
// credentials, which the token's secret opens) goes once the token has expired, used
// or not: until then a joiner whose answer was lost may repeat its admission and needs
// it, from then on nothing does, and a copy of the state (a backup, a snapshot) must
// not hold it for whoever finds the token text. A record goes a day after its
// expiry. It walks the tokens only when one is due, so a fleet's enrolments do not
// each pay for all.
func (s *State) purgeTokens(at time.Time) {
	if !s.purgeAt.IsZero() && at.Before(s.purgeAt) {
		return
	}
	var next time.Time
	for id, t := range s.Tokens {
		if at.After(t.Expiry.Add(expiredTokenRetention)) {
			s.dropToken(id)
			continue
		}
		if t.HoldsIdentity() && !at.Before(t.Expiry) {
			t.dropIdentity()
		}
		if due := t.purgeDue(); next.IsZero() || due.Before(next) {
			next = due
		}
	}
	if next.IsZero() {
		next = at.Add(expiredTokenRetention) // no token: nothing falls due before a new one
	}
	s.purgeAt = next
}

// PurgeDue reports whether a command at time at would drop a token record or a
// sealed identity. After a restore nothing says when the next one falls due until a
// command has run, so then any token counts as due.
func (s *State) PurgeDue(at time.Time) bool {
	return len(s.Tokens) > 0 && (s.purgeAt.IsZero() || !at.Before(s.purgeAt))
}

// purgeDue is when purgeTokens next has something to do with t: its expiry while it
// holds a sealed identity, then the end of its retention.
func (t *Token) purgeDue() time.Time {
	if t.HoldsIdentity() {
		return t.Expiry
	}
	return t.Expiry.Add(expiredTokenRetention)
}

// collectBodies drops bodies no node refers to any more.
func (s *State) collectBodies() {
	used := map[string]bool{BodyDigest([]byte(emptyBody)): true}
	for _, n := range s.Nodes {
		used[n.Declared.BodyDigest] = true
	}
	for d := range s.Bodies {
		if !used[d] {
			delete(s.Bodies, d)
		}
	}
}

func (s *State) applyRefresh(at time.Time, c *RefreshCmd) Result {
	var res Result
	for _, id := range c.Nodes {
		n, ok := s.Nodes[id]
		if !ok || n.Revoked {
			res.Skipped = append(res.Skipped, id)
			continue
		}
		n.Declared.IssuedAt, n.Declared.ExpiresAt = at, at.Add(s.Validity)
		res.Assignments = append(res.Assignments, Assignment{Node: id, Version: n.Declared.Version})
	}
	return res
}

// StampAheadTolerance is how far in the reading node's future a declaration's issue
// time may be before DueForRefresh counts it due: clocks that disagree by minutes
// change nothing (decision 0006).
const StampAheadTolerance = 5 * time.Minute

// DueRefresh is what DueForRefresh finds: the declarations to stamp again, and
// those it must not.
type DueRefresh struct {
	// Nodes are the nodes whose declaration is due, sorted.
	Nodes []string
	// Ahead counts those of Nodes whose declaration was issued more than
	// StampAheadTolerance in the reader's future.
	Ahead int
	// Behind are the nodes, sorted, whose declaration was issued further in the
	// reader's future than the validity: stamped again, it would expire before
	// its current stamp was issued. They are not among Nodes.
	Behind []string
	// Newest is the latest issue time among Behind's declarations.
	Newest time.Time
}

// DueForRefresh finds the nodes whose declaration has less than half its validity
// left at now (or has expired), or was issued more than StampAheadTolerance after
// now (Ahead), and those issued more than the validity after now (Behind). It is
// the leader's question before it proposes a refresh; no rule of the state reads it.
//
// A declaration issued in now's future was stamped by a clock ahead of this one: the
// leader's before NTP stepped it back, or another control node's that led. Hosts
// with a right clock refuse it once it is more than an hour ahead (not_yet_valid),
// and by its expiry alone it would be re-signed only once half the validity counted
// from that future time had passed, while the copy the hosts hold expires: so it is
// stamped again by this clock, same version and body.
//
// Unless it was issued more than the validity after now: stamped again, it would
// expire before the time it was issued, so every clock that agrees with the one that
// stamped it would refuse the copy as expired. Either this clock is behind by more
// than the validity (a machine booted with its clock restored from its last
// shutdown, before NTP), and then everything it stamps is refused, or the one that
// stamped it was that far ahead. The reader cannot tell which, and stamping it again
// helps only in the second case: it is left as it is (Behind), for the leader to
// report.
func (s *State) DueForRefresh(now time.Time) DueRefresh {
	var r DueRefresh
	for id, n := range s.Nodes {
		if n.Revoked {
			continue
		}
		switch {
		case now.Add(s.Validity).Before(n.Declared.IssuedAt):
			r.Behind = append(r.Behind, id)
			if n.Declared.IssuedAt.After(r.Newest) {
				r.Newest = n.Declared.IssuedAt
			}
		case n.Declared.IssuedAt.Sub(now) > StampAheadTolerance:
			r.Ahead++
			r.Nodes = append(r.Nodes, id)
		case n.Declared.ExpiresAt.Sub(now) < s.Validity/2:
			r.Nodes = append(r.Nodes, id)
		}
	}
	slices.Sort(r.Nodes)
	slices.Sort(r.Behind)
	return r
}
