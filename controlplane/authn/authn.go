// Package authn decides who may connect to the mesh's brokers and what each may do,
// from the replicated roster. It is the broker's Authenticator.
//
// Four kinds of client:
//   - the control plane's own in-process client, with a random per-process token;
//   - operators, with a user JWT issued by the mesh's admin account (a standard NATS
//     .creds file), proving the user key by signing the server's nonce;
//   - enrolled nodes, proving their nkey by signing the nonce;
//   - enrolling clients, presenting a token secret, which gets them only the enrolment
//     subject of their node and a private inbox, for a short while.
//
// The check is cheap and consumes nothing: nats-server runs it again for every client
// on a reload. Tokens are consumed by the enrolment handler, through the log.
package authn

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/tokenfmt"
)

// User name prefixes of granted connections; Kick finds connections by them.
const (
	NodeUserPrefix     = "node:"
	EnrolUserPrefix    = "enrol:"
	OperatorUserPrefix = "operator:"
	InternalUser       = "control-plane"
)

// EnrolConnectionLifetime bounds an enrolling client's connection.
const EnrolConnectionLifetime = 30 * time.Second

// Refusal reasons, each distinct in the control plane's log.
var (
	ErrNoCredentials   = fmt.Errorf("%w: no credentials presented", broker.ErrRefused)
	ErrBadSignature    = fmt.Errorf("%w: nonce signature does not verify", broker.ErrRefused)
	ErrUnknownKey      = fmt.Errorf("%w: unknown node key", broker.ErrRefused)
	ErrRevoked         = fmt.Errorf("%w: node revoked", broker.ErrRefused)
	ErrUnknownSecret   = fmt.Errorf("%w: token secret matches no minted token", broker.ErrRefused)
	ErrRateLimited     = fmt.Errorf("%w: too many failed enrolment attempts from this address", broker.ErrRefused)
	ErrBadOperator     = fmt.Errorf("%w: operator credentials not issued by this mesh", broker.ErrRefused)
	ErrInternalMissing = fmt.Errorf("%w: wrong control-plane token", broker.ErrRefused)
)

// Config configures an Authenticator.
type Config struct {
	FSM *state.FSM
	// InternalToken is the control plane's own credential, random per process.
	InternalToken string
	Logger        *slog.Logger
	// Now is the clock (tests inject one); nil means time.Now.
	Now func() time.Time
	// FailureLimit failed enrolment attempts from one address within FailureWindow
	// block that address for FailureWindow. Zero values mean 5 and one minute.
	FailureLimit  int
	FailureWindow time.Duration
}

// Authenticator implements broker.Authenticator over the replicated roster.
type Authenticator struct {
	cfg     Config
	log     *slog.Logger
	limiter *limiter
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
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Authenticator{cfg: cfg, log: log, limiter: &limiter{limit: cfg.FailureLimit, window: cfg.FailureWindow, m: map[string]*bucket{}}}
}

// Authenticate implements broker.Authenticator.
func (a *Authenticator) Authenticate(c broker.Client) (broker.Grant, error) {
	switch {
	case c.Token != "":
		if subtle.ConstantTimeCompare([]byte(c.Token), []byte(a.cfg.InternalToken)) == 1 && a.cfg.InternalToken != "" {
			return broker.Grant{User: InternalUser, AllowAll: true}, nil
		}
		return broker.Grant{}, ErrInternalMissing
	case c.JWT != "":
		return a.operator(c)
	case c.Nkey != "":
		return a.node(c)
	case strings.HasPrefix(c.Username, EnrolUserPrefix):
		return a.enrolling(c)
	}
	return broker.Grant{}, ErrNoCredentials
}

func (a *Authenticator) operator(c broker.Client) (broker.Grant, error) {
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return broker.Grant{}, fmt.Errorf("%w: %v", ErrBadOperator, err)
	}
	var account string
	a.cfg.FSM.Read(func(s *state.State) { account = s.AdminAccount })
	if account == "" || claims.Issuer != account {
		return broker.Grant{}, ErrBadOperator
	}
	now := a.cfg.Now().Unix()
	if claims.Expires != 0 && now > claims.Expires {
		return broker.Grant{}, fmt.Errorf("%w: credentials expired", ErrBadOperator)
	}
	if claims.NotBefore != 0 && now < claims.NotBefore {
		return broker.Grant{}, fmt.Errorf("%w: credentials not valid yet", ErrBadOperator)
	}
	if err := verifyNonce(claims.Subject, c.Nonce, c.Sig); err != nil {
		return broker.Grant{}, err
	}
	return broker.Grant{User: OperatorUserPrefix + claims.Name, AllowAll: true}, nil
}

func (a *Authenticator) node(c broker.Client) (broker.Grant, error) {
	var (
		id      string
		found   bool
		revoked bool
	)
	a.cfg.FSM.Read(func(s *state.State) {
		if _, r := s.RevokedKeys[c.Nkey]; r {
			revoked = true
		}
		if n, ok := s.NodeByKey(c.Nkey); ok {
			id, found = n.ID, true
			revoked = revoked || n.Revoked
		}
	})
	if revoked {
		return broker.Grant{}, ErrRevoked
	}
	if !found {
		return broker.Grant{}, ErrUnknownKey
	}
	// nats-server does not check the nonce signature of a key it does not know
	// itself; we are the ones who know it, so we check.
	if err := verifyNonce(c.Nkey, c.Nonce, c.Sig); err != nil {
		return broker.Grant{}, err
	}
	return broker.Grant{
		User:      NodeUserPrefix + id,
		Publish:   []string{api.StatusSubject(id), api.SyncSubject(id)},
		Subscribe: []string{api.DeclarationSubject(id), api.NodeInbox(id) + ".>"},
	}, nil
}

func (a *Authenticator) enrolling(c broker.Client) (broker.Grant, error) {
	node := strings.TrimPrefix(c.Username, EnrolUserPrefix)
	if err := tokenfmt.ValidateNodeID(node); err != nil {
		return broker.Grant{}, fmt.Errorf("%w: enrolling client names no valid node", broker.ErrRefused)
	}
	host := remoteHost(c)
	now := a.cfg.Now()
	if a.limiter.blocked(host, now) {
		return broker.Grant{}, ErrRateLimited
	}
	id, ok := SecretID(c.Password)
	known := false
	if ok {
		a.cfg.FSM.Read(func(s *state.State) { _, known = s.Tokens[id] })
	}
	if !known {
		if a.limiter.fail(host, now) {
			a.log.Warn("enrolment attempts from this address are blocked", "remote", host, "node", node, "for", a.cfg.FailureWindow.String())
		}
		return broker.Grant{}, ErrUnknownSecret
	}
	return broker.Grant{
		User:      EnrolUserPrefix + node,
		Publish:   []string{api.EnrolSubject(node)},
		Subscribe: []string{api.EnrolInbox(node) + ".>"},
		Deadline:  now.Add(EnrolConnectionLifetime),
	}, nil
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

func verifyNonce(pub string, nonce []byte, sig string) error {
	if len(nonce) == 0 || sig == "" {
		return ErrBadSignature
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		raw, err = base64.StdEncoding.DecodeString(sig)
		if err != nil {
			return ErrBadSignature
		}
	}
	if err := kp.Verify(nonce, raw); err != nil {
		return ErrBadSignature
	}
	return nil
}

func remoteHost(c broker.Client) string {
	if c.Remote == nil {
		return ""
	}
	s := c.Remote.String()
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		return s[:i]
	}
	return s
}

// limiter counts failed enrolment attempts per remote address.
type limiter struct {
	mu     sync.Mutex
	limit  int
	window time.Duration
	m      map[string]*bucket
}

type bucket struct {
	start        time.Time
	fails        int
	blockedUntil time.Time
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
	if len(l.m) > 100_000 { // bound memory under a spray from many addresses
		for k, b := range l.m {
			if now.Sub(b.start) > l.window && now.After(b.blockedUntil) {
				delete(l.m, k)
			}
		}
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

var _ broker.Authenticator = (*Authenticator)(nil)
