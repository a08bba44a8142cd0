package broker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A reload of nats-server's options (SetClusterPeers, a sweep of the routes) has it
// ask the hook again about every client it holds, and it holds a client from the
// end of its TLS handshake on: one between its handshake and its CONNECT is asked
// about with nothing to decide on. Refused, it was closed, and an agent, a meshctl
// or an enrolment that connected while a control node was admitted or removed
// failed. Such a client is now let through the reload with no permission at all,
// in no account of the mesh's, and its CONNECT decides it as any login.
//
// The hook cannot tell nats-server's reload asking from a CONNECT that sent nothing
// (nats-server's options are then as they were before it): one processed during a
// reload is let through the same, with no permission, in no account of the mesh's,
// and it is never asked about again. pendingLogins closes it once any client let
// through could only have logged in or been closed by nats-server's own timeouts.

// pendingLogins are the clients let through a reload before their CONNECT, by
// nats-server's client id, with when.
type pendingLogins struct {
	mu sync.Mutex
	at map[uint64]time.Time
	// within is how long a client let through may take to log in: the TLS timeout
	// and the authentication timeout nats-server closes it after, and a margin.
	within time.Duration
	// reloads counts the reloads under way, the only time a client is let through.
	reloads int
}

// errNoLoginAtReload is why a connection let through a reload was closed: it was
// asked about for its CONNECT then, and sent nothing to decide on.
var errNoLoginAtReload = NewRefusal("no_login_at_reload",
	"it logged in with nothing to decide on while the broker reloaded its configuration")

// preLogin is what nats-server holds as a client's options before its CONNECT (its
// defaultOpts; TestAReloadKeepsAClientThatHasNotLoggedInYet fails if that changes).
func preLogin() server.ClientOpts {
	return server.ClientOpts{Verbose: true, Pedantic: true, Echo: true}
}

// nobody is the user a client let through a reload is registered as: no account
// (it stays in nats-server's global one, where nothing of the mesh's is), no subject.
func nobody() *server.User {
	return &server.User{Permissions: &server.Permissions{Publish: allowOnly(nil), Subscribe: allowOnly(nil)}}
}

// clientID is nats-server's id of c, if c has one (every client nats-server asks about).
func clientID(c server.ClientAuthentication) (uint64, bool) {
	if id, ok := c.(interface{ GetID() uint64 }); ok {
		return id.GetID(), true
	}
	return 0, false
}

// letThrough says whether c is a client asked about during a reload before its
// CONNECT, and if it is, registers it as nobody and remembers it. Under mu, as every
// registration of the hook's is (register): a client whose CONNECT was decided
// meanwhile is never stripped of its grant.
func (h *hook) letThrough(c server.ClientAuthentication, o *server.ClientOpts) bool {
	p := &h.pending
	p.mu.Lock()
	defer p.mu.Unlock()
	// nats-server writes a client's options at its CONNECT under a lock the hook
	// cannot take, before it asks the hook: read under mu, a CONNECT already being
	// decided shows here. One still being read is a race nats-server's interface
	// leaves (GetOpts); comparing with the defaults reads no string's bytes.
	if p.reloads == 0 || *o != preLogin() {
		return false
	}
	id, ok := clientID(c)
	if !ok || h.inOurAccount(c) != nil {
		return false
	}
	c.RegisterUser(nobody())
	if p.at == nil {
		p.at = map[uint64]time.Time{}
	}
	p.at[id] = time.Now()
	h.log.Debug("a client that had not logged in yet was let through a reload; its CONNECT decides it",
		"component", logComponent, "remote", addrString(c.RemoteAddress()), "cid", id)
	return true
}

// asked forgets c as let through a reload: the hook is deciding its CONNECT.
func (h *hook) asked(c server.ClientAuthentication) {
	id, ok := clientID(c)
	if !ok {
		return
	}
	h.pending.mu.Lock()
	delete(h.pending.at, id)
	h.pending.mu.Unlock()
}

// register gives c the grant's user, under the lock letThrough holds.
func (h *hook) register(c server.ClientAuthentication, u *server.User) {
	h.pending.mu.Lock()
	defer h.pending.mu.Unlock()
	c.RegisterUser(u)
}

// reloading runs reload with clients before their CONNECT let through, and has those
// not asked about again by then closed once they could only have logged in.
func (h *hook) reloading(reload func() error) error {
	h.pending.mu.Lock()
	h.pending.reloads++
	h.pending.mu.Unlock()
	err := reload()
	h.pending.mu.Lock()
	h.pending.reloads--
	let := len(h.pending.at)
	h.pending.mu.Unlock()
	if let > 0 {
		time.AfterFunc(h.pending.within, h.closeUnasked)
	}
	return err
}

// closeUnasked closes the clients let through a reload at least within ago that the
// hook was not asked about since: their CONNECT, if any, was decided during the
// reload and sent nothing to decide on. Those closed by nats-server are forgotten.
func (h *hook) closeUnasked() {
	h.pending.mu.Lock()
	var due []uint64
	for id, at := range h.pending.at {
		if time.Since(at) >= h.pending.within {
			due = append(due, id)
			delete(h.pending.at, id)
		}
	}
	h.pending.mu.Unlock()
	for _, id := range due {
		if h.ns.DisconnectClientByID(id) != nil {
			continue // closed already: its handshake or its CONNECT timed out
		}
		code := RefusalCode(errNoLoginAtReload)
		h.refused.add(code)
		h.logRefused(slog.LevelWarn, "client closed", code, slog.Uint64("cid", id),
			slog.String("code", code), slog.String("reason", errNoLoginAtReload.Text))
	}
}
