// Package authn decides who may connect to the mesh's brokers, in which account, and
// what each may do there, from the replicated roster. It is the broker's
// Authenticator; the table of who may publish and subscribe where is docs/security.md's
// authority model, and this package is where the broker is told it.
//
// Seven kinds of client:
//   - the control plane's own in-process connections, one per role, with a random
//     per-process token;
//   - operators, with a user JWT issued by the mesh's admin account (a standard NATS
//     .creds file), proving the user key by signing the server's nonce; they reach
//     the operator API and nats-server's read-only monitoring, nothing else;
//   - the operator credentials of a removed control node, proving their key the
//     same way: for a minute, in an account of their own, the operator API's reads
//     only, with answers on their own key's inbox;
//   - enrolled nodes, proving their nkey by signing the nonce; they reach their own
//     subjects only, and log in at a bounded rate (NodeLogins), not at all for a
//     while after the control plane disconnected them for their budget (Kicked);
//   - revoked nodes' keys, proving the key the same way: for a few seconds, in an
//     account of their own, to ask for their state and hear the signed notice of
//     their revocation;
//   - enrolling clients, proving a token's secret (older ones: presenting it) and the
//     node key they are about to register (signing the nonce with it): the
//     enrolment subjects of the node name they log in under and an inbox bound to
//     that key, for 30 seconds with a live token of that node, 5 with one the mesh
//     refuses (used, expired, cancelled, another node's), so they are told which;
//   - and nobody else.
//
// The check is cheap and consumes nothing: nats-server runs it again for every client
// on a reload. Tokens are consumed by the enrolment handler, through the log.
package authn

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/logging"
	"mesh/tokenfmt"
)

// User name prefixes of granted connections; Kick finds connections by them.
const (
	NodeUserPrefix     = "node:"
	RevokedUserPrefix  = "revoked:"
	EnrolUserPrefix    = "enrol:"
	OperatorUserPrefix = "operator:"
)

// Role names one of the control plane's own connections. Each gets the subjects its
// job needs and no more, so that a connection that answers hosts can never publish
// where the operator API or another node listens.
type Role string

// The control plane's connections (docs/security.md, "The authority model").
const (
	// RoleHosts answers hosts: enrolment, sync and status requests in the hosts
	// account. It may publish only on hosts' and enrolling clients' inboxes.
	RoleHosts Role = "control-plane:hosts"
	// RolePublisher sends declarations and notices from the control account, which
	// the broker streams to each node's declaration subject. It subscribes nowhere.
	RolePublisher Role = "control-plane:publisher"
	// RoleAdmin serves the operator API in the control account, and this node's
	// own view (api.ControlStatusSubject). It may publish only on the reply subjects
	// the broker makes for operators' requests.
	RoleAdmin Role = "control-plane:admin"
	// RoleControl carries the control nodes' heartbeats, in the control account: it
	// may publish and subscribe on mesh.control.*.heartbeat only.
	RoleControl Role = "control-plane:control"
	// RoleEvents hears nats-server's connection events and may close connections of
	// the hosts account, in the system account.
	RoleEvents Role = "control-plane:events"
	// RoleRevoked answers revoked nodes' keys in the revoked account: their sync
	// requests, with the signed notice of their revocation. It may publish only on
	// nodes' declaration subjects and inboxes there.
	RoleRevoked Role = "control-plane:revoked"
)

// Roles lists every role, one connection each (the daemon opens them all):
// InternalGrant knows each, and nothing else.
func Roles() []Role {
	return []Role{RoleHosts, RolePublisher, RoleAdmin, RoleControl, RoleEvents, RoleRevoked}
}

// Lifetimes and budgets of enrolling clients.
const (
	// EnrolConnectionLifetime bounds an enrolling client's connection.
	EnrolConnectionLifetime = 30 * time.Second
	// RefusalConnectionLifetime bounds the connection of a token the mesh no
	// longer admits (used by another key, or expired): long enough to be told
	// why, and no longer.
	RefusalConnectionLifetime = 5 * time.Second
	// RevokedConnectionLifetime bounds the connection of a revoked node's key: long
	// enough to ask for its state and be told, signed, that it was revoked.
	RevokedConnectionLifetime = 10 * time.Second
	// RevokedConnections is how many connections one revoked key is granted per
	// RevokedConnectionLifetime on one broker; more are refused outright.
	RevokedConnections = 2
	// RetiredConnectionLifetime bounds a connection made with the operator
	// credentials of a removed control node: a read, or a few, and no longer.
	RetiredConnectionLifetime = time.Minute
	// RetiredConnections is how many connections such credentials are granted per
	// RetiredConnectionLifetime on one broker; more are refused outright.
	RetiredConnections = 4
	// DefaultTokenConnections is how many connections one token is granted per
	// EnrolConnectionLifetime on one broker, so at most this many are open at once.
	DefaultTokenConnections = 3
)

// Logins of live node keys (docs/decisions/0038). A host kicked for its budget
// reconnected at once, 135 to 380 times a second, each login costing its broker
// about 1.7 ms of CPU, and each connection's flood more: most of a core.
const (
	// NodeLogins is how many logins of one live node key one broker admits per
	// NodeLoginSpan; more are refused (ErrNodeLoginRate) until the oldest is that
	// old. An agent logs in again only when its connection ends; it tries the other
	// brokers first, and waits 1 to 2 s after each pass over them that fails (longer
	// as passes fail; before its first connection, 1 s, doubling). So a network that
	// drops each of its connections a moment after it is made has it log in about
	// once a second on one broker, 10 times a span; a broker restarted, a move back
	// to the first broker (decision 0020) or a rolling restart of the control nodes
	// add one or two each. Twice that leaves room for a machine cloned with its key
	// (two agents, one key), and gives a host that logs in as fast as it can 2 logins
	// a second. An agent that met it would be slowed, not stopped: refused there for
	// the rest of the span, it goes to another broker or tries again after its wait.
	NodeLogins = 20
	// NodeLoginSpan is the span NodeLogins are counted over.
	NodeLoginSpan = 10 * time.Second
	// KickCooldown is how long a broker refuses a live node key after the control
	// plane disconnected it for going past a budget (its message rate or size, or
	// more connections than it may hold: Kicked); each disconnection that follows
	// within KickCooldownReset of the end of the last cooldown doubles it, up to
	// MaxKickCooldown. An honest agent is never disconnected for its budget; a
	// machine cloned onto many (more connections than the budget, all with one key)
	// is refused a minute at a time at most, its connections kept.
	KickCooldown = time.Second
	// MaxKickCooldown bounds the cooldown after a disconnection for the budget.
	MaxKickCooldown = time.Minute
	// KickCooldownReset is how long a key must go without a disconnection for the
	// budget, after its last cooldown ended, for the next to start at KickCooldown
	// again.
	KickCooldownReset = 10 * time.Minute
)

// Refusals, each distinct in the control plane's log. Their code is the reason label
// of mesh_broker_connections_refused_total, which dashboards and alerts name: keep
// it stable (the text is for people, and may change). A nonce signature bound to
// another TLS session (a relay's) is ErrBadSignature; a token proof that does not
// verify is ErrUnknownSecret.
var (
	ErrNoCredentials   = broker.NewRefusal("no_credentials", "no credentials presented")
	ErrBadSignature    = broker.NewRefusal("bad_signature", "nonce signature does not verify")
	ErrUnknownKey      = broker.NewRefusal("unknown_key", "unknown node key")
	ErrRevoked         = broker.NewRefusal("revoked", "node revoked")
	ErrRevokedBusy     = broker.NewRefusal("revoked_busy", fmt.Sprintf("too many connections for this revoked key in the last %s (%d are granted)", RevokedConnectionLifetime, RevokedConnections))
	ErrRetiredBusy     = broker.NewRefusal("retired_busy", fmt.Sprintf("too many connections for a removed control node's operator credentials in the last %s (%d are granted)", RetiredConnectionLifetime, RetiredConnections))
	ErrNodeLoginRate   = broker.NewRefusal("node_login_rate", fmt.Sprintf("this node's key logged in more often than this broker admits (%d times in %s); refused until that span has passed", NodeLogins, NodeLoginSpan))
	ErrNodeCooldown    = broker.NewRefusal("node_cooldown", fmt.Sprintf("this node's key was disconnected for going past its budget; this broker refuses it for a while (%s, doubling with each such disconnection, up to %s)", KickCooldown, MaxKickCooldown))
	ErrUnknownSecret   = broker.NewRefusal("unknown_secret", "token secret matches no minted token, or its proof does not verify (a token minted by a meshctl older than this control plane, or while it was half upgraded, has no proof key: mint it again)")
	ErrNoEnrolKey      = broker.NewRefusal("no_enrol_key", "an enrolling client must present the node key it enrols (nkey and signed nonce)")
	ErrBadNode         = broker.NewRefusal("bad_node", "enrolling client names no valid node")
	ErrTokenBusy       = broker.NewRefusal("token_busy", fmt.Sprintf("too many connections for this token in the last %s", EnrolConnectionLifetime))
	ErrRateLimited     = broker.NewRefusal("rate_limited", "too many failed enrolment attempts from this address")
	ErrUnbound         = broker.NewRefusal("unbound", "the client signed the bare nonce or sent its token's secret, and this broker requires logins bound to the TLS session")
	ErrBadOperator     = broker.NewRefusal("bad_operator", "operator credentials not issued by this mesh")
	ErrOperatorRevoked = broker.NewRefusal("operator_revoked", "operator credentials revoked (meshctl operator revoke)")
	// ErrOperatorExpired: the mesh's own operator credentials, past their
	// expiry: an ordinary day once credentials live 90 days, counted apart from
	// credentials of another issuer (they were bad_operator, "not issued by this
	// mesh", which reads as an intrusion: a walkthrough).
	ErrOperatorExpired    = broker.NewRefusal("operator_expired", "operator credentials expired (meshctl operator add NAME --renew issues new ones before they do)")
	ErrOperatorUnrecorded = broker.NewRefusal("operator_unrecorded", "operator credentials this control node holds no record of: neither a control node's nor recorded by meshctl operator add (issued outside it, after the backup the mesh was restored from, or recorded a moment ago and not yet applied here)")
	ErrInternalMissing    = broker.NewRefusal("bad_internal", "wrong control-plane token or role")
)

// Refusals are every refusal the Authenticator gives: what the metrics export from
// the start, at 0 until one happens (a series that first appears at 1 shows no
// increase, and the first unknown key after a restart is the one to hear of).
func Refusals() []*broker.Refusal {
	return []*broker.Refusal{ErrNoCredentials, ErrBadSignature, ErrUnknownKey, ErrRevoked, ErrRevokedBusy, ErrRetiredBusy,
		ErrNodeLoginRate, ErrNodeCooldown, ErrUnknownSecret, ErrNoEnrolKey, ErrBadNode, ErrTokenBusy, ErrRateLimited, ErrUnbound, ErrBadOperator, ErrOperatorRevoked, ErrOperatorExpired, ErrOperatorUnrecorded, ErrInternalMissing}
}

// Roster is what authentication reads of the replicated state: typed queries that
// take the state's lock once and return values (state.FSM implements it).
type Roster interface {
	AdminAccount() string
	OperatorRevoked(key string) (node string, revoked bool)
	// OperatorStanding: whether operator credentials are recorded, revoked by
	// name, or unknown to the mesh.
	OperatorStanding(key string) state.OperatorStanding
	NodeByKey(key string) (state.NodeAuth, bool)
	RevokedKey(key string) (node string, revoked bool)
	TokenByID(id string) (state.TokenAuth, bool)
}

// Config configures an Authenticator.
type Config struct {
	Roster Roster
	// Mesh is the mesh id, which an enrolling client's token proof names.
	Mesh string
	// InternalToken is the control plane's own credential, random per process.
	InternalToken string
	// HostEvents are the system-account subjects announcing hosts' connections
	// (broker.Server.ConnectionEvents): RoleEvents may subscribe to them.
	HostEvents []string
	Logger     *slog.Logger
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
	// FailureLimit failed enrolment attempts from one address within FailureWindow
	// block that address for FailureWindow. Zero values mean 5 and one minute.
	FailureLimit  int
	FailureWindow time.Duration
	// TokenConnections caps the connections one token is granted per
	// EnrolConnectionLifetime; 0 means DefaultTokenConnections.
	TokenConnections int
	// RequireBound refuses logins not bound to the TLS session (decision 0018):
	// bare nonce signatures (agents and meshctl older than it, the stock nats CLI)
	// and enrolling clients that send their token's secret. Off, they are admitted
	// and counted (Unbound).
	RequireBound bool
	// AwaitReplication, when set, is asked about a new login whose node key or
	// token this node does not know: a follower applies an enrolment or a token up
	// to a few commit intervals after the leader answered for it, and a host
	// started at once would be refused by every follower but the leader. It may
	// wait a moment for the state to move, calling found after each change until
	// it says yes. Not asked on a recheck (broker.Client).
	AwaitReplication func(found func() bool)
	// Unbound, when set, hears of every admission or refusal of a login not bound to
	// its TLS session, by the kind of client (UnboundNode, UnboundOperator,
	// UnboundEnrolling). nats-server asks again about every client on a
	// configuration reload, so a reload counts its clients again.
	Unbound func(kind string)
}

// Kinds of client whose login is not bound to its TLS session (Config.Unbound).
const (
	UnboundNode      = "node"
	UnboundOperator  = "operator"
	UnboundEnrolling = "enrolling"
)

// Authenticator implements broker.Authenticator over the replicated roster.
type Authenticator struct {
	cfg     Config
	log     *slog.Logger
	limiter *limiter
	// blocks bounds the lines saying an address is blocked: each address is blocked
	// once a window, but whoever holds many addresses (an IPv6 prefix) can have
	// each of them blocked in turn.
	blocks *logging.Limiter
	tokens *window
	// revoked counts the connections granted to each revoked key, which are held
	// for RevokedConnectionLifetime: a key the mesh revoked cannot hold more
	// connection slots than a few at once.
	revoked *window
	// retired counts the connections granted to the operator credentials of each
	// removed control node, held for RetiredConnectionLifetime.
	retired *window
	// nodes counts the logins of each live node key (NodeLogins).
	nodes *window
	// cooling holds the keys the control plane disconnected for their budget
	// (Kicked), refused for a while.
	cooling *cooldowns
	// cooled bounds the lines saying a key is refused for a while: one a
	// disconnection, and whoever holds many keys can have each disconnected.
	cooled *logging.Limiter
}

// New returns an Authenticator.
func New(cfg Config) *Authenticator {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.FailureLimit == 0 {
		cfg.FailureLimit = 5
	}
	if cfg.FailureWindow == 0 {
		cfg.FailureWindow = time.Minute
	}
	if cfg.TokenConnections == 0 {
		cfg.TokenConnections = DefaultTokenConnections
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Authenticator{
		cfg: cfg, log: log,
		limiter: &limiter{limit: cfg.FailureLimit, window: cfg.FailureWindow, m: map[string]*bucket{}},
		blocks:  logging.NewLimiter(logging.RepeatInterval, cfg.Now),
		tokens:  &window{limit: cfg.TokenConnections, span: EnrolConnectionLifetime, m: map[string][]admitted{}},
		revoked: &window{limit: RevokedConnections, span: RevokedConnectionLifetime, m: map[string][]admitted{}},
		retired: &window{limit: RetiredConnections, span: RetiredConnectionLifetime, m: map[string][]admitted{}},
		nodes:   &window{limit: NodeLogins, span: NodeLoginSpan, m: map[string][]admitted{}},
		cooling: &cooldowns{first: KickCooldown, most: MaxKickCooldown, reset: KickCooldownReset, m: map[string]*cooldown{}},
		cooled:  logging.NewLimiter(logging.RepeatInterval, cfg.Now),
	}
}

// Authenticate implements broker.Authenticator.
func (a *Authenticator) Authenticate(c broker.Client) (broker.Grant, error) {
	switch {
	case c.Token != "":
		return a.internal(c)
	case c.JWT != "":
		return a.operator(c)
	case c.HostsFull && (strings.HasPrefix(c.Username, EnrolUserPrefix) || c.Nkey != ""):
		// A host the broker has no room for: refused before its signature is
		// verified or its token's connection budget spent.
		return broker.Grant{}, broker.ErrFull
	case strings.HasPrefix(c.Username, EnrolUserPrefix):
		return a.enrolling(c)
	case c.Nkey != "":
		return a.node(c)
	}
	return broker.Grant{}, ErrNoCredentials
}

func (a *Authenticator) internal(c broker.Client) (broker.Grant, error) {
	// The control plane's own connections are in process: they have no TLS, which
	// every connection over the network has (handshake first). A copy of the token
	// is worth nothing from anywhere else.
	if c.TLS != nil || a.cfg.InternalToken == "" || subtle.ConstantTimeCompare([]byte(c.Token), []byte(a.cfg.InternalToken)) != 1 {
		return broker.Grant{}, ErrInternalMissing
	}
	g, ok := InternalGrant(Role(c.Username), a.cfg.HostEvents)
	if !ok {
		return broker.Grant{}, ErrInternalMissing
	}
	return g, nil
}

// InternalGrant is what each of the control plane's own connections may do.
func InternalGrant(r Role, hostEvents []string) (broker.Grant, bool) {
	g := broker.Grant{User: string(r)}
	switch r {
	case RoleHosts:
		g.Account = broker.AccountHosts
		// The enrolment subjects under one wildcard, as the control plane
		// subscribes them: its connection stays below the hosts' cap.
		g.Subscribe = []string{api.EnrolPrefix + ">", api.NodePrefix + "*" + api.SyncSuffix, api.NodePrefix + "*" + api.StatusSuffix}
		g.Publish = []string{api.NodeInboxPrefix + "*.>", api.EnrolInboxPrefix + "*.>"}
	case RolePublisher:
		g.Account = broker.AccountControl
		g.Publish = []string{api.NodePrefix + "*" + api.DeclarationSuffix}
	case RoleAdmin:
		g.Account = broker.AccountControl
		g.Subscribe = []string{api.AdminPrefix + ">", api.RetiredPrefix + ">", api.ControlStatusSubject}
		g.Publish = []string{"_R_.>"}
	case RoleControl:
		// The heartbeats, and nothing else: it makes no request (it was granted
		// every inbox of the control account, and all of mesh.control., for none).
		g.Account = broker.AccountControl
		g.Subscribe = []string{api.ControlHeartbeatSubject("*")}
		g.Publish = []string{api.ControlHeartbeatSubject("*")}
	case RoleRevoked:
		g.Account = broker.AccountRevoked
		g.Subscribe = []string{api.NodePrefix + "*" + api.SyncSuffix}
		g.Publish = []string{api.NodePrefix + "*" + api.DeclarationSuffix, api.NodeInboxPrefix + "*.>"}
	case RoleEvents:
		g.Account = broker.AccountSystem
		g.Subscribe = append([]string{"_INBOX.>"}, hostEvents...)
		g.Publish = []string{"$SYS.REQ.SERVER.*.CONNZ", "$SYS.REQ.SERVER.*.KICK", "$SYS.REQ.SERVER.PING.IDZ"}
	default:
		return broker.Grant{}, false
	}
	return g, true
}

// OperatorGrant is what an operator may do: call the operator API and read
// nats-server's monitoring, with replies on its own inbox.
func OperatorGrant(name string) broker.Grant {
	return broker.Grant{
		User:      OperatorUserPrefix + name,
		Account:   broker.AccountOperators,
		Publish:   append([]string{api.AdminPrefix + ">", api.ControlStatusSubject}, broker.MonitoringSubjects()...),
		Subscribe: []string{"_INBOX.>"},
	}
}

// RemovedOperatorGrant is what the operator credentials of a removed control node may
// still do: read (api.ReadOnly), never change the mesh. The removed machine keeps its
// credentials file; reading lets it learn that it was removed (and stop), and tells an
// operator holding a copy why their changes are refused. It hears replies on the
// inbox of its own key only (api.OperatorInbox): with every inbox, it heard the
// answers to the other operators' changes and monitoring requests (every host's
// connection, with its address), which it may not ask for itself. The connection
// ends at deadline, and each key is granted RetiredConnections of them a
// RetiredConnectionLifetime: a command reads and leaves, and a copy of the file can
// hold no more of the control node's descriptors than that.
func RemovedOperatorGrant(name, node, key string, deadline time.Time) broker.Grant {
	return broker.Grant{
		User:      OperatorUserPrefix + name + RemovedOperatorSuffix + node,
		Account:   broker.AccountRetired,
		Publish:   api.ReadOnlySubjects(),
		Subscribe: []string{api.OperatorInbox(key) + ".>"},
		Deadline:  deadline,
	}
}

// RemovedOperatorSuffix marks, in the broker's user name, the operator credentials of
// a removed control node (followed by the node's id).
const RemovedOperatorSuffix = " of removed control node "

// NodeGrant is what enrolled node id may do: report and sync on its own subjects,
// receive its own declarations and replies.
func NodeGrant(id string) broker.Grant {
	return broker.Grant{
		User:      NodeUserPrefix + id,
		Account:   broker.AccountHosts,
		Publish:   []string{api.StatusSubject(id), api.SyncSubject(id)},
		Subscribe: []string{api.DeclarationSubject(id), api.NodeInbox(id) + ".>"},
		Host:      true,
	}
}

// RevokedGrant is what the key of node id, revoked, may do until deadline, in the
// revoked account: NodeGrant's subjects, where the only answer to its sync is the
// signed notice of its revocation (docs/decisions/0016) and its status reaches no
// one. The agent stops on that notice alone; a bare refusal could come from anyone
// holding a leaf of the mesh CA. The status subject is granted so that the report an
// agent sends as it connects is not a permissions violation, logged as an error by
// the broker for every revoked host that comes back.
func RevokedGrant(id string, deadline time.Time) broker.Grant {
	return broker.Grant{
		User:      RevokedUserPrefix + id,
		Account:   broker.AccountRevoked,
		Publish:   []string{api.StatusSubject(id), api.SyncSubject(id)},
		Subscribe: []string{api.DeclarationSubject(id), api.NodeInbox(id) + ".>"},
		Deadline:  deadline,
		Host:      true,
	}
}

// EnrolGrant is what a client enrolling node with key may do, until deadline: ask on
// the node's enrolment subject, hear the answer on the inbox bound to its key.
func EnrolGrant(node, key string, deadline time.Time) broker.Grant {
	return broker.Grant{
		User:      EnrolUserPrefix + node,
		Account:   broker.AccountHosts,
		Publish:   []string{api.EnrolKeySubject(node, key), api.EnrolSubject(node)},
		Subscribe: []string{api.EnrolInbox(node, key) + ".>"},
		Deadline:  deadline,
		Host:      true,
	}
}

// OtherNodeGrant is EnrolGrant for a login naming another node than its token's,
// for the few seconds it takes to be told token_other_node: on its key's subject
// only. On the node's old subject, whose budget every client enrolling the node
// shares, such a login spent that budget under any node's name, with any token the
// mesh knows (an outside probe); a client asks there only with its own node's
// token, the one it names.
func OtherNodeGrant(node, key string, deadline time.Time) broker.Grant {
	g := EnrolGrant(node, key, deadline)
	g.Publish = []string{api.EnrolKeySubject(node, key)}
	return g
}

func (a *Authenticator) operator(c broker.Client) (broker.Grant, error) {
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return broker.Grant{}, fmt.Errorf("%w: %v", ErrBadOperator, err)
	}
	account := a.cfg.Roster.AdminAccount()
	if account == "" || claims.Issuer != account {
		return broker.Grant{}, ErrBadOperator
	}
	now := a.cfg.Now().Unix()
	if claims.NotBefore != 0 && now < claims.NotBefore {
		return broker.Grant{}, fmt.Errorf("%w: credentials not valid yet", ErrBadOperator)
	}
	// The login's signature first: whoever holds an old JWT without its key is
	// refused for that, not counted as an ordinary expiry (a review).
	if err := a.checkLogin(claims.Subject, c, UnboundOperator); err != nil {
		return broker.Grant{}, err
	}
	// Expired from the second the JWT names on, as the connection's deadline
	// (below), operator list and operator add have it: "now > Expires" admitted a
	// login for up to a second past it, its connection closed at once by that
	// deadline, and the client's next request, sent again over a new login, was
	// answered (TestAConnectionEndsWithItsCredentials, under load).
	if claims.Expires != 0 && now >= claims.Expires {
		return broker.Grant{}, ErrOperatorExpired
	}
	if claims.BearerToken {
		// The mesh's credentials are never bearer tokens, and nats-server's
		// connection listing hides a bearer JWT, which a revocation's kick reads.
		return broker.Grant{}, fmt.Errorf("%w: a bearer token", ErrBadOperator)
	}
	standing := a.cfg.Roster.OperatorStanding(claims.Subject)
	if standing == state.OperatorUnrecorded {
		// Credentials recorded a moment ago, on a control node whose state has
		// not applied the record yet (a follower behind by a heartbeat): as a
		// node's new key, given the state a moment to catch up.
		a.lookAgain(c, func() bool {
			standing = a.cfg.Roster.OperatorStanding(claims.Subject)
			return standing != state.OperatorUnrecorded
		})
	}
	switch standing {
	case state.OperatorRevokedByName:
		// At a reload too (c.Recheck): a connection made before the revocation
		// is closed by it if nothing closed it first.
		return broker.Grant{}, ErrOperatorRevoked
	case state.OperatorUnrecorded:
		return broker.Grant{}, ErrOperatorUnrecorded
	}
	var g broker.Grant
	if node, revoked := a.cfg.Roster.OperatorRevoked(claims.Subject); revoked {
		now := a.cfg.Now()
		if !a.retired.admit(claims.Subject, string(c.Nonce), now) {
			return broker.Grant{}, ErrRetiredBusy
		}
		g = RemovedOperatorGrant(claims.Name, node, claims.Subject, now.Add(RetiredConnectionLifetime))
	} else {
		g = OperatorGrant(claims.Name)
	}
	if claims.Expires != 0 {
		// nats-server ends a JWT's connection at its expiry only when it checks
		// the JWT itself; this hook does, so the grant says when.
		if exp := time.Unix(claims.Expires, 0); g.Deadline.IsZero() || exp.Before(g.Deadline) {
			g.Deadline = exp
		}
	}
	return g, nil
}

func (a *Authenticator) node(c broker.Client) (broker.Grant, error) {
	var (
		node           string
		revoked, found bool
		n              state.NodeAuth
	)
	look := func() bool {
		node, revoked = a.cfg.Roster.RevokedKey(c.Nkey)
		n, found = a.cfg.Roster.NodeByKey(c.Nkey)
		return found || revoked
	}
	if !look() {
		a.lookAgain(c, look)
	}
	switch {
	case found && n.Revoked:
		node, revoked = n.ID, true
	case !found && !revoked:
		return broker.Grant{}, ErrUnknownKey
	}
	now := a.cfg.Now()
	// A live key's login past its budget is refused before its signature is
	// verified: only logins verified are counted, so nobody but the key's holder
	// fills its window, and refusing one costs a map read. A connection admitted
	// before is never closed for them on a recheck (a reload).
	live := !revoked && !c.Recheck
	if live {
		if a.cooling.refused(c.Nkey, now) {
			return broker.Grant{}, ErrNodeCooldown
		}
		if a.nodes.full(c.Nkey, now) {
			return broker.Grant{}, ErrNodeLoginRate
		}
	}
	// nats-server does not check the nonce signature of a key it does not know
	// itself; we are the ones who know it, so we check.
	if err := a.checkLogin(c.Nkey, c, UnboundNode); err != nil {
		return broker.Grant{}, err
	}
	if revoked {
		if !a.revoked.admit(c.Nkey, string(c.Nonce), now) {
			return broker.Grant{}, ErrRevokedBusy
		}
		return RevokedGrant(node, now.Add(RevokedConnectionLifetime)), nil
	}
	// Counted once verified; logins in parallel that all found room are counted
	// here, under the window's lock, and the last ones refused.
	if live && !a.nodes.admit(c.Nkey, string(c.Nonce), now) {
		return broker.Grant{}, ErrNodeLoginRate
	}
	return NodeGrant(n.ID), nil
}

// Kicked tells the Authenticator that the control plane disconnected the
// connections of node key key for going past its budget (its message rate or size,
// or its connections): this broker refuses its logins for KickCooldown, doubled for
// each such disconnection that follows within KickCooldownReset of the last
// cooldown's end, up to MaxKickCooldown. Told again while the key is refused (the
// rest of a flood, queued before the disconnection), it changes nothing. A key that
// is no enrolled node's (an enrolling client's) is not recorded: the budget of its
// token bounds it.
//
// Before, a host disconnected for its budget connected again at once, and flooded
// again until disconnected: hundreds of times a second (docs/decisions/0038).
func (a *Authenticator) Kicked(key string) {
	n, ok := a.cfg.Roster.NodeByKey(key)
	if !ok || n.Revoked {
		return
	}
	now := a.cfg.Now()
	d, streak, started := a.cooling.kicked(key, now)
	if !started {
		return
	}
	const msg = "a node disconnected for its budget is refused on this broker for a while"
	a.cooled.LogFirst(context.Background(), a.log, slog.LevelWarn, 5, "authn", msg, msg,
		slog.String("node", n.ID), slog.String("key", key), slog.String("for", d.String()), slog.Int("in_a_row", streak))
}

// enrolling admits a client that presents a token's secret and the node key it is
// about to register. A live token (for the node the client names, unexpired, and
// unused or used by this very key: the same enrolment run again) is granted its
// node's enrolment subject and the inbox bound to the key, for
// EnrolConnectionLifetime. A token the mesh knows but does not admit (used by another
// key, expired, cancelled, or minted for another node than the one named) is granted the same
// subjects for RefusalConnectionLifetime only: the enrolment handler refuses it before
// anything is recorded, and the person is told "used", "expired" or "another node"
// rather than a bare refusal. A secret the mesh never minted, a revoked key, or a
// token past its budget of connections is refused by the broker itself.
func (a *Authenticator) enrolling(c broker.Client) (broker.Grant, error) {
	node := strings.TrimPrefix(c.Username, EnrolUserPrefix)
	if err := tokenfmt.ValidateNodeID(node); err != nil {
		return broker.Grant{}, ErrBadNode
	}
	host := remoteHost(c)
	now := a.cfg.Now()
	// A client since decision 0018 proves the secret (api.EnrolPassword); an older
	// one sends it.
	id, proof, proved := api.ParseEnrolPassword(c.Password)
	ok := proved
	if !proved {
		id, ok = SecretID(c.Password)
	}
	var t state.TokenAuth
	failed := false
	look := func() bool {
		t, ok = a.cfg.Roster.TokenByID(id)
		return ok
	}
	// A blocked address is refused only what it could be guessing: a token the
	// mesh knows is looked at whatever the address did (a map read; its proof is
	// checked below, and its connections counted), or five made-up logins from a
	// shared address (a NAT, a proxy) shut out every enrolment behind it.
	wellFormed := ok
	known := wellFormed && look()
	if !known && a.limiter.blocked(host, now) {
		return broker.Grant{}, ErrRateLimited
	}
	if wellFormed && !known {
		// Not known yet: counted before the wait for the replicated state, or
		// logins in parallel would have more guesses than logins one after the
		// other.
		a.fail(host, node, now)
		failed = true
		a.lookAgain(c, look)
	}
	// A recheck's proof and signature are those verified when the connection was
	// admitted (checkLogin); the token is looked at again.
	if ok && proved && !c.Recheck {
		pk, err := hex.DecodeString(t.ProofKey)
		ok = err == nil && tokenfmt.VerifyProof(pk, a.cfg.Mesh, node, c.Nkey, proof)
	}
	if !ok {
		if !failed {
			a.fail(host, node, now)
		}
		return broker.Grant{}, ErrUnknownSecret
	}
	if c.Nkey == "" || !nkeys.IsValidPublicUserKey(c.Nkey) {
		return broker.Grant{}, ErrNoEnrolKey
	}
	if !c.Recheck {
		bound, err := verifyNonce(c.Nkey, c)
		if err != nil {
			return broker.Grant{}, err
		}
		if proved && !bound {
			// Every client that proves rather than sends binds its nonce signature: a
			// proof with a bare signature was relayed, or made by a broken client.
			return broker.Grant{}, ErrBadSignature
		}
		if !proved || !bound {
			if err := a.unbound(UnboundEnrolling); err != nil {
				return broker.Grant{}, err
			}
		}
	}
	if _, revoked := a.cfg.Roster.RevokedKey(c.Nkey); revoked {
		return broker.Grant{}, ErrRevoked
	}
	if !a.tokens.admit(id, string(c.Nonce), now) {
		return broker.Grant{}, ErrTokenBusy
	}
	if t.Node != node {
		return OtherNodeGrant(node, c.Nkey, now.Add(RefusalConnectionLifetime)), nil
	}
	live := now.Before(t.Expiry) && !t.Cancelled && (!t.Used || t.UsedKey == c.Nkey)
	if !live {
		return EnrolGrant(node, c.Nkey, now.Add(RefusalConnectionLifetime)), nil
	}
	return EnrolGrant(node, c.Nkey, now.Add(EnrolConnectionLifetime)), nil
}

// lookAgain gives the replicated state a moment to catch up with a new login it
// does not know (Config.AwaitReplication); look looks again after each change.
func (a *Authenticator) lookAgain(c broker.Client, look func() bool) {
	if !c.Recheck && a.cfg.AwaitReplication != nil {
		a.cfg.AwaitReplication(look)
	}
}

// checkLogin checks that pub signed the connection's nonce, and counts (or, when
// bound logins are required, refuses) a signature not bound to the TLS session.
//
// Not on a recheck: nats-server asks again about every connected client on each
// configuration reload (a control node added or removed is one), and the nonce, the
// signature and the session of a connection this broker admitted are those this
// process verified when it admitted it. What a recheck is for is the roster (a key
// revoked since, a credential removed), which the caller looks at either way.
// Verifying again cost a signature per connected host per reload (about a second of
// CPU per 10,000 hosts) and counted every unbound login again.
func (a *Authenticator) checkLogin(pub string, c broker.Client, kind string) error {
	if c.Recheck {
		return nil
	}
	bound, err := verifyNonce(pub, c)
	if err != nil {
		return err
	}
	if !bound {
		return a.unbound(kind)
	}
	return nil
}

// unbound counts a login not bound to its TLS session, and refuses it when bound
// logins are required.
func (a *Authenticator) unbound(kind string) error {
	if a.cfg.Unbound != nil {
		a.cfg.Unbound(kind)
	}
	if a.cfg.RequireBound {
		return ErrUnbound
	}
	return nil
}

func (a *Authenticator) fail(host, node string, now time.Time) {
	if a.limiter.fail(host, now) {
		const msg = "enrolment attempts from this address are blocked"
		a.blocks.LogFirst(context.Background(), a.log, slog.LevelWarn, 5, "authn", msg, msg,
			slog.String("remote", host), slog.String("node", node), slog.String("for", a.cfg.FailureWindow.String()))
	}
}

// SecretID returns the id the mesh stores a token under, from the hex secret an
// enrolling client presents. It is tokenfmt's SecretHash; ok is false if the text is
// not a well-formed secret.
func SecretID(secretHex string) (string, bool) {
	b, err := hex.DecodeString(secretHex)
	if err != nil || len(b) != tokenfmt.SecretSize {
		return "", false
	}
	var t tokenfmt.Token
	copy(t.Secret[:], b)
	h := t.SecretHash()
	return hex.EncodeToString(h[:]), true
}

// verifyNonce checks that pub signed the server's nonce, bound to the client's TLS
// session (broker.BoundNonce) or, from clients older than the binding and the stock
// nats CLI, bare. bound says which: a bare signature could have been relayed by
// anything holding a leaf of the mesh CA (docs/decisions/0018).
func verifyNonce(pub string, c broker.Client) (bound bool, err error) {
	if len(c.Nonce) == 0 || c.Sig == "" {
		return false, ErrBadSignature
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(c.Sig)
	if err != nil {
		raw, err = base64.StdEncoding.DecodeString(c.Sig)
		if err != nil {
			return false, ErrBadSignature
		}
	}
	// A bound message that is valid UTF-8 is never taken as bound: a client older
	// than the binding signs whatever nonce the INFO it read carries, always text
	// (nats.go decodes it from JSON), and a relay holding a leaf of the mesh CA
	// could hand it its own session's bound message as that nonce, then log in
	// with the signature, bound, past --require-bound-logins. A real binding is 32
	// random bytes, valid UTF-8 about once in 10^8 sessions: that login is refused,
	// and the client connects again over another session.
	if c.Binding != nil {
		if m := broker.BoundNonce(c.Nonce, c.Binding); !utf8.Valid(m) && kp.Verify(m, raw) == nil {
			return true, nil
		}
	}
	if err := kp.Verify(c.Nonce, raw); err != nil {
		return false, ErrBadSignature
	}
	return false, nil
}

// remoteHost is the address failed enrolments are counted under: the client's IP,
// an IPv6 one by its /64, which one holder has whole (one address each would give
// whoever holds a /64 2^64 fresh budgets).
func remoteHost(c broker.Client) string {
	if c.Remote == nil {
		return ""
	}
	s := c.Remote.String()
	if ap, err := netip.ParseAddrPort(s); err == nil {
		a := ap.Addr().Unmap()
		if a.Is6() {
			p, _ := a.WithZone("").Prefix(64)
			return p.String()
		}
		return a.String()
	}
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		return s[:i]
	}
	return s
}

// Sweep forgets what limits nobody any more: the connections counted for a token or
// a revoked key longer ago than their span, and the addresses whose failures and
// block are over. Between calls, the tables are swept only once they grow past
// sweepFloor keys (a spray): without Sweep a control node kept an entry for every
// token ever used to log in and every key revoked, up to 100,000 of each, for as
// long as it ran. The daemon calls it every few seconds; a sweep visits what the
// last spans left, a few entries per enrolment.
func (a *Authenticator) Sweep() {
	now := a.cfg.Now()
	a.tokens.sweepNow(now)
	a.revoked.sweepNow(now)
	a.retired.sweepNow(now)
	a.nodes.sweepNow(now)
	a.cooling.sweepNow(now)
	a.limiter.sweepNow(now)
}

// Entries are how many keys the Authenticator's tables hold.
type Entries struct {
	// TokenLogins: tokens with enrolling connections counted (Config.TokenConnections).
	TokenLogins int
	// RevokedLogins: revoked keys with connections counted (RevokedConnections).
	RevokedLogins int
	// FailedAddresses: remote addresses with failed enrolments counted or blocked.
	FailedAddresses int
	// NodeLogins: live node keys with logins counted (NodeLogins).
	NodeLogins int
	// NodeCooldowns: node keys disconnected for their budget, refused for a while
	// or remembered until KickCooldownReset has passed (Kicked).
	NodeCooldowns int
}

// Entries returns how many keys each of the Authenticator's tables holds.
func (a *Authenticator) Entries() Entries {
	return Entries{TokenLogins: a.tokens.len(), RevokedLogins: a.revoked.len(), FailedAddresses: a.limiter.len(),
		NodeLogins: a.nodes.len(), NodeCooldowns: a.cooling.len()}
}

// limiter counts failed enrolment attempts per remote address.
type limiter struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	m      map[string]*bucket
	sweep  sweeper
}

type bucket struct {
	start        time.Time
	fails        int
	blockedUntil time.Time
}

// expire forgets the addresses whose window and block are over. l.mu is held.
func (l *limiter) expire(now time.Time) {
	before := len(l.m)
	for k, b := range l.m {
		if now.Sub(b.start) > l.window && now.After(b.blockedUntil) {
			delete(l.m, k)
		}
	}
	l.sweep.swept(before, len(l.m))
}

func (l *limiter) sweepNow(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
}

func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

func (l *limiter) blocked(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.m[host]
	return b != nil && now.Before(b.blockedUntil)
}

// fail records a failure and reports whether it started a block.
func (l *limiter) fail(host string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sweep.due(len(l.m)) { // bound memory under a spray from many addresses
		l.expire(now)
	}
	b := l.m[host]
	if b == nil || now.Sub(b.start) > l.window {
		b = &bucket{start: now}
		l.m[host] = b
	}
	b.fails++
	if b.fails >= l.limit && !now.Before(b.blockedUntil) {
		b.blockedUntil = now.Add(l.window)
		return true
	}
	return false
}

// window admits at most limit connections per key within span: with connections
// that live at most span, at most limit are open at once. A connection is counted
// once, however often it is checked: nats-server authenticates every connected
// client again on each reload of its options (the control nodes' change of
// membership is one), and an enrolment in flight must not spend its token's budget
// a second time, or be closed for it.
type window struct {
	mu    sync.Mutex
	limit int
	span  time.Duration
	m     map[string][]admitted
	sweep sweeper
}

// admitted is one connection a window counted: when, and which (the nonce the
// broker made for it).
type admitted struct {
	at   time.Time
	conn string
}

// expire forgets the keys whose last connection counted is older than the span: it
// limits nothing any more. w.mu is held.
func (w *window) expire(now time.Time) {
	before := len(w.m)
	for k, ts := range w.m {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1].at) >= w.span {
			delete(w.m, k)
		}
	}
	w.sweep.swept(before, len(w.m))
}

func (w *window) sweepNow(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expire(now)
}

func (w *window) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// full says whether key has no room left in the window at now: admit would
// refuse a new connection. It changes nothing.
func (w *window) full(key string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, a := range w.m[key] {
		if now.Sub(a.at) < w.span {
			n++
		}
	}
	return n >= w.limit
}

func (w *window) admit(key, conn string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sweep.due(len(w.m)) {
		w.expire(now)
	}
	recent := w.m[key][:0]
	seen := false
	for _, a := range w.m[key] {
		if now.Sub(a.at) < w.span {
			recent = append(recent, a)
			seen = seen || (conn != "" && a.conn == conn)
		}
	}
	if seen {
		w.m[key] = recent
		return true
	}
	if len(recent) >= w.limit {
		w.m[key] = recent
		return false
	}
	w.m[key] = append(recent, admitted{at: now, conn: conn})
	return true
}

// cooldowns refuses keys for a while after each disconnection for their budget,
// for longer with each that follows soon after the last (Authenticator.Kicked).
type cooldowns struct {
	mu    sync.Mutex
	first time.Duration // the first cooldown
	most  time.Duration // the longest
	reset time.Duration // a key refused last longer ago than this starts at first again
	m     map[string]*cooldown
	sweep sweeper
}

// cooldown is one key's: refused until until; length is the last cooldown's, and
// streak how many disconnections in a row made it.
type cooldown struct {
	until  time.Time
	length time.Duration
	streak int
}

// kicked starts a cooldown for key at now, and returns it and how many in a row it
// makes; started is false when key is refused already (nothing changes).
func (c *cooldowns) kicked(key string, now time.Time) (d time.Duration, streak int, started bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sweep.due(len(c.m)) {
		c.expire(now)
	}
	e := c.m[key]
	switch {
	case e == nil || now.Sub(e.until) >= c.reset:
		e = &cooldown{length: c.first}
		c.m[key] = e
	case now.Before(e.until):
		return 0, e.streak, false
	default:
		e.length = min(2*e.length, c.most)
	}
	e.streak++
	e.until = now.Add(e.length)
	return e.length, e.streak, true
}

// refused says whether key is refused at now.
func (c *cooldowns) refused(key string, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[key]
	return e != nil && now.Before(e.until)
}

// expire forgets the keys whose last cooldown ended longer than reset ago: their
// next starts afresh, as for a key never refused. c.mu is held.
func (c *cooldowns) expire(now time.Time) {
	before := len(c.m)
	for k, e := range c.m {
		if now.Sub(e.until) >= c.reset {
			delete(c.m, k)
		}
	}
	c.sweep.swept(before, len(c.m))
}

func (c *cooldowns) sweepNow(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expire(now)
}

func (c *cooldowns) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// sweepFloor is how many keys a table of recent events holds before it is first swept
// of its expired ones.
const sweepFloor = 100_000

// sweeper says when to sweep a table whose keys come from outside (a remote address, a
// token id) of its expired entries: once it holds more than twice what the last sweep
// left, and more than sweepFloor. A sweep visits every entry, so sweeping on each new
// key once the table is large, as before, made a spray of fresh keys quadratic: with
// 150,000 addresses failed within the minute, each further failure cost 8.7 ms under
// the lock every enrolment takes (BenchmarkFailureSpray). Now a sweep of n entries
// follows at least n/2 new keys: at most about two visits per key, amortised.
type sweeper struct {
	next    int    // sweep when the table holds more than this (and than the floor)
	floor   int    // sweepFloor when zero
	visited uint64 // entries sweeps looked at, for the tests
}

func (s *sweeper) due(n int) bool {
	floor := s.floor
	if floor == 0 {
		floor = sweepFloor
	}
	return n > max(s.next, floor)
}

func (s *sweeper) swept(before, after int) {
	s.visited += uint64(before)
	s.next = 2 * after
}

var _ broker.Authenticator = (*Authenticator)(nil)
