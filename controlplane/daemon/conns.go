package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/broker"
	"mesh/controlplane/authn"
)

// conns are the control plane's own connections to its broker, one per role
// (authn.Role): each may publish and subscribe only where its job needs, so a
// connection that answers hosts can never reach the operator API or another node's
// subjects, whatever reply subject a request names (docs/security.md).
type conns struct {
	hosts     *nats.Conn // answers enrolling clients and hosts, in the hosts account
	publisher *nats.Conn // sends declarations and notices, from the control account
	admin     *nats.Conn // serves the operator API, in the control account
	control   *nats.Conn // control nodes' heartbeats, in the control account
	events    *nats.Conn // nats-server's connection events, in the system account
	revoked   *nats.Conn // answers revoked nodes' keys, in the revoked account
}

// dialConns opens every role's in-process connection to b. onError hears what each
// reports outside a call (nats.Conn's asynchronous errors), by the role's name.
func dialConns(b *broker.Server, token, node string, onError func(conn string, sub *nats.Subscription, err error)) (*conns, error) {
	c := &conns{}
	for _, r := range c.slots() {
		nc, err := nats.Connect("",
			nats.InProcessServer(b.InProcess()),
			nats.UserInfo(string(r.role), ""),
			nats.Token(token),
			nats.Name(string(r.role)+" "+node),
			nats.MaxReconnects(-1),
			// nats.go's 2 s failed a start on a machine overloaded for a moment
			// (a test audit saw it); the agent and join wait 10 s too.
			nats.Timeout(10*time.Second),
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) { onError(string(r.role), sub, err) }),
		)
		if err != nil {
			c.close()
			return nil, fmt.Errorf("connect the control plane (%s) to its own broker: %w", r.role, err)
		}
		*r.nc = nc
	}
	return c, nil
}

// connSlot is one role's connection of conns.
type connSlot struct {
	role authn.Role
	nc   **nats.Conn
}

// slots are conns's connections by role; the broker reserves room for as many
// (broker.ControlPlaneClients).
func (c *conns) slots() []connSlot {
	return []connSlot{
		{authn.RoleHosts, &c.hosts},
		{authn.RolePublisher, &c.publisher},
		{authn.RoleAdmin, &c.admin},
		{authn.RoleControl, &c.control},
		{authn.RoleEvents, &c.events},
		{authn.RoleRevoked, &c.revoked},
	}
}

func (c *conns) all() []*nats.Conn {
	return []*nats.Conn{c.hosts, c.publisher, c.admin, c.control, c.events, c.revoked}
}

func (c *conns) close() {
	if c == nil {
		return
	}
	for _, nc := range c.all() {
		if nc != nil {
			nc.Close()
		}
	}
}

// flush waits until every connection's pending messages reached the broker.
func (c *conns) flush() error {
	var errs []error
	for _, nc := range c.all() {
		if nc != nil {
			errs = append(errs, nc.Flush())
		}
	}
	return errors.Join(errs...)
}
