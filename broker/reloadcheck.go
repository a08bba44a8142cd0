package broker

import (
	"runtime"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// A reload of nats-server's options (SetClusterPeers, a sweep of the routes) has it
// ask the hook again about every client it holds (reloadAuthorization), and it holds
// a client from the end of its TLS handshake on. The hook answers a reload and a
// CONNECT apart (decision 0040):
//
//   - A reload asking about a client in one of the mesh's accounts rechecks what
//     was admitted (Client.Recheck: the roster, not the signature this process
//     verified at the login).
//   - A reload asking about a client in none has nothing to decide: the client has
//     not sent its CONNECT yet, or its CONNECT is being decided right now, and that
//     decides it. It is let be. Refused, it was closed, and an agent, a meshctl or an
//     enrolment that connected while a control node was admitted or removed failed.
//   - A CONNECT is a login, whatever account the client is in: never a recheck. A
//     second CONNECT on a live connection replaces the client's options before
//     nats-server asks, and a reload running meanwhile could put the client back
//     in its account: decided as a recheck, another node's key with any signature
//     was granted that node's subjects (a review, reproduced under reloads).
//
// nats-server's interface says nothing of who asks; its call stack does. The stack
// is read only while the broker runs a reload of its own (every reload is: NoSigs),
// and a stack that does not name reloadAuthorization is taken for a CONNECT. If a
// release renamed it, a reload's questions would be logins, checked in full: no
// signature skipped, but every connected host refused at a reload when the broker
// is full, keys in a cooldown closed, and clients before their CONNECT refused
// again; TestAReloadKeepsAClientThatHasNotLoggedInYet fails then.

// reloadAuthorization is the function of nats-server's that asks about every client
// on a reload.
const reloadAuthorization = "github.com/nats-io/nats-server/v2/server.(*Server).reloadAuthorization"

// reloading runs reload, nats-server's reload of the broker's options, with the
// hook telling its questions from logins.
func (h *hook) reloading(reload func() error) error {
	h.reloads.Add(1)
	defer h.reloads.Add(-1)
	return reload()
}

// askedByReload says whether the question the hook is answering is a reload's.
func (h *hook) askedByReload() bool {
	if h.reloads.Load() == 0 {
		return false
	}
	var pcs [16]uintptr
	// The hook's Check and nats-server's isClientAuthorized lie between here and
	// reloadAuthorization; a CONNECT's stack is deeper, and never names it.
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs[:])])
	for {
		f, more := frames.Next()
		// Its closures too (reloadAuthorization.func1), should a release move
		// the questions into one.
		if f.Function == reloadAuthorization || strings.HasPrefix(f.Function, reloadAuthorization+".") {
			return true
		}
		if !more {
			return false
		}
	}
}

// inOurAccount is the mesh's account c is in, nil when it is in none (nats-server's
// global account, where every client is before its CONNECT is decided).
func (h *hook) inOurAccount(c server.ClientAuthentication) *server.Account {
	if cur, ok := c.(interface{ Account() *server.Account }); ok {
		if a := cur.Account(); a != nil && h.accounts.ours(a.Name) {
			return a
		}
	}
	return nil
}
