package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"mesh/logging"
)

// Client is what a connecting client presented, as the Authenticator sees it.
type Client struct {
	Username string
	Password string // an enrolling client's token secret: never log it
	Token    string // the control plane's own in-process credential: never log it
	Nkey     string // a node's public nkey
	JWT      string // an operator's user JWT
	Sig      string // signature of Nonce by Nkey, or by the JWT's subject key
	Name     string // the client's self-chosen connection name (informational)
	Nonce    []byte
	// Binding is the TLS session's channel binding (ChannelBinding), nil when the
	// connection exports none: a key that signs BoundNonce(Nonce, Binding) logged in
	// over this very session, not through a relay.
	Binding []byte
	Remote  net.Addr
	TLS     *tls.ConnectionState
	// HostsFull says the broker holds as many hosts as its capacity allows: an
	// Authenticator refuses a host's login with ErrFull before it spends anything on
	// it (a signature's verification, a token's connection budget). The broker
	// refuses a Host grant then anyway.
	HostsFull bool
	// Recheck says nats-server asks again about a client it admitted before (it
	// does on every configuration reload), rather than about a new login.
	Recheck bool
}

// Grant is the outcome of a successful authentication: who the client is, the account
// it is placed in and what it may do there. The broker refuses everything a Grant does
// not allow; no grant allows everything.
type Grant struct {
	// User is the name the connection is known by (used to find and kick it).
	User string
	// Account is where the client's subjects live; it must be set.
	Account Account
	// Publish and Subscribe list the allowed subjects; an empty or nil list allows
	// nothing.
	Publish   []string
	Subscribe []string
	// Deadline, when set, closes the connection at that time (enrolling clients).
	Deadline time.Time
	// Host says the client is a host (enrolled, enrolling or revoked): the broker
	// admits it only within its capacity (Capacity.MaxHosts).
	Host bool
}

// Authenticator decides client connections. It runs for every login and again for
// every client logged in on a configuration reload (Client.Recheck), so it must be
// idempotent and cheap: it must not consume anything (tokens are consumed by the
// enrolment handler, through the log).
type Authenticator interface {
	Authenticate(Client) (Grant, error)
}

// ErrRefused is the base of every refusal an Authenticator returns. Return a Refusal
// (NewRefusal), with any detail wrapped around it: the broker counts and limits the
// lines of refused clients by the Refusal's code (RefusalCode), so a client's text
// never makes a kind, a metric's series or a log's kind of its own.
var ErrRefused = errors.New("connection refused")

// Refusal is a refusal with a stable code: the reason label of
// mesh_broker_connections_refused_total and the kind the log limits refused clients
// by, which dashboards and alerts name, so it must not change when the wording does.
// Each is a value callers branch on with errors.Is (authn.ErrUnknownKey); every one is
// ErrRefused too.
type Refusal struct {
	// Code is lower-case letters and underscores, fixed by the code that refuses.
	Code string
	// Text says why, for people: the log's reason and the error's text. Fixed by
	// the code that refuses, never what a client chose: the log repeats it whole
	// (reasonText), and text a client chose goes in an error wrapped around it.
	Text string
}

// NewRefusal returns a refusal with code and text.
func NewRefusal(code, text string) *Refusal { return &Refusal{Code: code, Text: text} }

func (r *Refusal) Error() string { return ErrRefused.Error() + ": " + r.Text }

func (r *Refusal) Unwrap() error { return ErrRefused }

// Codes of refusals that carry none of their own (RefusalCode).
const (
	// CodeRefused: ErrRefused itself, or a refusal written around it without a
	// Refusal.
	CodeRefused = "refused"
	// CodeNotRefusal: an Authenticator's error that is no refusal at all (it
	// could not decide); the client is refused all the same.
	CodeNotRefusal = "error"
)

// errAccountChanged refuses, on a reload, a connection whose grant now names
// another account than the one it was admitted to.
var errAccountChanged = NewRefusal("account_changed", "its grant moved to another account")

// Refusals are the broker's own refusals, beside its Authenticator's: what the
// metrics export from the start, at 0 until one happens.
func Refusals() []*Refusal { return []*Refusal{ErrFull, errAccountChanged} }

// hook adapts an Authenticator to nats-server's CustomClientAuthentication.
type hook struct {
	auth     Authenticator
	log      *slog.Logger
	accounts *accounts
	ns       *server.Server
	// maxHosts, when positive, is the most hosts the broker holds (Capacity.MaxHosts).
	maxHosts int
	// admitting makes "room for one more host?" and the host's joining its account
	// one step: hosts logging in at once each found the last place free, and a fleet
	// started at once passed a cap of 16 by up to 13.
	admitting sync.Mutex
	// refusals limits the lines about refused clients: anyone who reaches the port
	// can be refused as often as it connects. Nil means one of the hook's own (limiter).
	refusals     *logging.Limiter
	refusalsOnce sync.Once
	// refused counts every refused connection by reason, logged or held back.
	refused eventCounts
	// reloads counts the broker's reloads under way (reloadcheck.go).
	reloads atomic.Int32
}

// Check decides a connection for nats-server, and scrubs what a refused client
// presented from the options nats-server keeps.
func (h *hook) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil {
		return false
	}
	// was is the account of a connection a reload asks about again; nil at a
	// CONNECT, whatever account the client is in (reloadcheck.go).
	var was *server.Account
	if h.askedByReload() {
		if was = h.inOurAccount(c); was == nil {
			// Not logged in yet: its CONNECT decides it.
			return true
		}
	}
	if h.check(c, o, was) {
		return true
	}
	scrub(o)
	return false
}

// scrub clears what a refused client sent that may be a secret. nats-server keeps
// a closed connection's options in the list any operator reads (CONNZ, state
// closed), and names its user in its log and the auth-error event: a seed file
// given as creds by mistake goes out whole as the "JWT" (nats.go's reading of a
// file with no JWT block), and a token pasted as a password. Left as they are on
// success: a reload asks again with them (Client.Recheck).
func scrub(o *server.ClientOpts) {
	o.JWT, o.Password, o.Token, o.Username = "", "", "", ""
}

// check is Check before the scrub; was is the mesh's account of a connection a
// reload asks about again, nil for a login.
func (h *hook) check(c server.ClientAuthentication, o *server.ClientOpts, was *server.Account) bool {
	cl := Client{
		Username: o.Username,
		Password: o.Password,
		Token:    o.Token,
		Nkey:     o.Nkey,
		JWT:      o.JWT,
		Sig:      o.Sig,
		Name:     o.Name,
		Nonce:    c.GetNonce(),
		Remote:   c.RemoteAddress(),
		TLS:      c.GetTLSConnectionState(),
	}
	if cl.TLS == nil && c.RemoteAddress() == nil {
		// Closed before its login was judged (nats-server lets go of a closed
		// connection's socket, and its TLS state with it: a broker stopping closes
		// every client at once). Judged without its TLS session, a bound nonce
		// signature is checked as a bare one and fails: a broker that stopped
		// logged the refusal of an honest host as bad_signature, what a relay's
		// login is refused for. Nothing is admitted over a closed connection.
		h.logRefused(slog.LevelDebug, "client gone before its login was judged", "", slog.String("user", userText(o.Username)))
		return false
	}
	cl.Binding = ChannelBinding(cl.TLS)
	// nats-server asks again about every connection on a reload (was, the account
	// it was admitted to). A connection never moves to another account
	// there (a node revoked meanwhile would be granted the revoked account, its
	// subscriptions kept): it is refused, and closed. A host beyond the broker's
	// capacity is refused before the process runs out of descriptors for its
	// operators and itself; one admitted before is never closed for it.
	cl.HostsFull = was == nil && h.full()
	cl.Recheck = was != nil
	g, err := h.auth.Authenticate(cl)
	if err == nil && g.Host && cl.HostsFull {
		err = ErrFull
	}
	if err != nil {
		reason := RefusalCode(err)
		h.refused.add(reason)
		h.logRefused(slog.LevelWarn, "client refused", reason, refusedAttrs(cl, err)...)
		return false
	}
	name, ok := h.accounts.names[g.Account]
	if !ok {
		h.logRefused(slog.LevelError, "client refused: the grant names no account", "", slog.String("user", clip(g.User)))
		return false
	}
	acc, err := h.ns.LookupAccount(name)
	if err != nil {
		h.logRefused(slog.LevelError, "client refused: account not found", "", slog.String("account", g.Account.String()), slog.Any("err", err))
		return false
	}
	if was != nil && was != acc {
		reason := RefusalCode(errAccountChanged)
		h.refused.add(reason)
		h.logRefused(slog.LevelInfo, "client refused", reason, slog.String("user", clip(g.User)), slog.String("account", g.Account.String()), slog.String("code", reason), slog.String("reason", errAccountChanged.Text))
		return false
	}
	user := &server.User{
		Username:           g.User,
		Account:            acc,
		ConnectionDeadline: g.Deadline,
		Permissions: &server.Permissions{
			Publish:   allowOnly(g.Publish),
			Subscribe: allowOnly(g.Subscribe),
		},
	}
	if !g.Host || was != nil || h.maxHosts <= 0 {
		c.RegisterUser(user)
		return true
	}
	// A new host: counted in its account by RegisterUser, under the same lock as
	// the count that admits it.
	h.admitting.Lock()
	defer h.admitting.Unlock()
	if h.full() {
		reason := RefusalCode(ErrFull)
		h.refused.add(reason)
		h.logRefused(slog.LevelWarn, "client refused", reason, refusedAttrs(cl, ErrFull)...)
		return false
	}
	c.RegisterUser(user)
	return true
}

// full says whether the broker has no room for another host: it holds maxHosts
// hosts already (the one asking is not counted yet: it joins its account once
// admitted). Asked before the Authenticator, so that a host refused costs nothing,
// and again under admitting, where the answer holds.
func (h *hook) full() bool {
	return h.maxHosts > 0 && h.hosts() >= h.maxHosts
}

// hosts is how many hosts the broker holds: the clients of the hosts' accounts
// beside the control plane's own connections there.
func (h *hook) hosts() int {
	n := 0
	for _, a := range []Account{AccountHosts, AccountRevoked} {
		if acc, err := h.ns.LookupAccount(h.accounts.names[a]); err == nil {
			n += acc.NumLocalConnections()
		}
	}
	return max(n-ControlPlaneHostClients, 0)
}

// refused logs a refused client, the first few of each message and reason an interval
// and then a count (clientEventsPerInterval): the reasons are few, the clients and the
// names they present are as many as anyone likes.
func (h *hook) logRefused(level slog.Level, msg, reason string, attrs ...slog.Attr) {
	h.limiter().LogFirst(context.Background(), h.log, level, clientEventsPerInterval, logComponent, msg+"\x00"+reason, msg, attrs...)
}

// limiter returns the hook's limiter, made at the first refusal if the hook was built
// without one: a refused client is never logged unlimited.
func (h *hook) limiter() *logging.Limiter {
	h.refusalsOnce.Do(func() {
		if h.refusals == nil {
			h.refusals = logging.NewLimiter(logging.RepeatInterval, time.Now)
		}
	})
	return h.refusals
}

// refusedAttrs are a refused client's attributes: what it presented (cut short, as the
// client chose it), the refusal's code (the metrics' reason) and the whole reason.
func refusedAttrs(cl Client, err error) []slog.Attr {
	return []slog.Attr{
		slog.String("remote", addrString(cl.Remote)),
		slog.String("user", userText(cl.Username)),
		slog.String("nkey", clip(cl.Nkey)),
		slog.String("code", RefusalCode(err)),
		slog.String("reason", reasonText(err)),
	}
}

// reasonText is a refusal's reason for the log: whole when it is one of the
// broker's own refusals, whose text no client chose (cut at 128 bytes, they lost
// their useful end: "up to 1m0s", "the host will try another control node", a
// walkthrough); cut as what a client chose otherwise, since a wrapped error may
// repeat it.
func reasonText(err error) string {
	var r *Refusal
	if errors.As(err, &r) && err == error(r) {
		return r.Error()
	}
	return clip(err.Error())
}

// userText is a refused client's user name for the log: as it is when it has the
// form of the names this mesh's clients present (enrol:web-1, a role), and
// otherwise only its length. A name of another form is a mistake or a probe, and
// may be a secret pasted in the wrong place (a token, a seed: upper case). So may a
// name of the right letters holding a long run of hex digits: a token's secret is
// 64 of them, and one pasted alone as a user name was logged whole (a reviewer's
// reading); no node name of the mesh's is likely to hold secretHexRun of them.
func userText(u string) string {
	if len(u) <= 80 && strings.TrimLeft(u, "abcdefghijklmnopqrstuvwxyz0123456789:._-") == "" && longestHexRun(u) < secretHexRun {
		return u
	}
	return fmt.Sprintf("(not shown: %d bytes, not of the form of a user name of this mesh)", len(u))
}

// secretHexRun is the run of lowercase hex digits from which a user name is taken
// for a secret (userText): a machine id (32 digits) is a name, a token's secret (64)
// or a SHA-1 (40) is not.
const secretHexRun = 40

// longestHexRun is the longest run of lowercase hex digits in s.
func longestHexRun(s string) int {
	longest, run := 0, 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// RefusalCode is a refusal's code: the code of the Refusal err wraps (whatever
// detail is wrapped around it), CodeRefused for ErrRefused without one, and
// CodeNotRefusal for an error that is no refusal.
func RefusalCode(err error) string {
	var r *Refusal
	switch {
	case errors.As(err, &r):
		return r.Code
	case errors.Is(err, ErrRefused):
		return CodeRefused
	default:
		return CodeNotRefusal
	}
}

// allowOnly permits exactly subjects. An empty list must deny everything, and
// nats-server reads an empty allow list as "no restriction" (for subscriptions even
// when it is non-nil), so that case is spelled as a deny of every subject.
func allowOnly(subjects []string) *server.SubjectPermission {
	if len(subjects) == 0 {
		return &server.SubjectPermission{Deny: []string{">"}}
	}
	return &server.SubjectPermission{Allow: append([]string{}, subjects...)}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}
