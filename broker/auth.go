package broker

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	Remote   net.Addr
	TLS      *tls.ConnectionState
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
}

// Authenticator decides client connections. It runs for every connection and again for
// every client on a configuration reload, so it must be idempotent and cheap: it must
// not consume anything (tokens are consumed by the enrolment handler, through the log).
type Authenticator interface {
	Authenticate(Client) (Grant, error)
}

// ErrRefused is the base of every refusal an Authenticator returns.
var ErrRefused = errors.New("connection refused")

// hook adapts an Authenticator to nats-server's CustomClientAuthentication.
type hook struct {
	auth     Authenticator
	log      *slog.Logger
	accounts *accounts
	ns       *server.Server
}

func (h *hook) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o == nil {
		return false
	}
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
	g, err := h.auth.Authenticate(cl)
	if err != nil {
		h.log.Warn("client refused", "remote", addrString(cl.Remote), "user", cl.Username, "nkey", cl.Nkey, "reason", err.Error())
		return false
	}
	name, ok := h.accounts.names[g.Account]
	if !ok {
		h.log.Error("client refused: the grant names no account", "user", g.User)
		return false
	}
	acc, err := h.ns.LookupAccount(name)
	if err != nil {
		h.log.Error("client refused: account not found", "account", g.Account.String(), "err", err)
		return false
	}
	c.RegisterUser(&server.User{
		Username:           g.User,
		Account:            acc,
		ConnectionDeadline: g.Deadline,
		Permissions: &server.Permissions{
			Publish:   allowOnly(g.Publish),
			Subscribe: allowOnly(g.Subscribe),
		},
	})
	return true
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
