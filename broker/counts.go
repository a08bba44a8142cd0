package broker

import (
	"maps"
	"strings"
	"sync"
)

// maxCountedKinds bounds the kinds of refusal and violation the broker counts: the
// kinds are nats-server's fixed wordings and the Authenticator's reasons, a few dozen
// at most, and the bound keeps a kind nobody foresaw from growing the map (and the
// metrics' label sets) without end. Events past it are counted under otherKind.
const maxCountedKinds = 128

// otherKind is where events of kinds past maxCountedKinds are counted.
const otherKind = "other"

// eventCounts counts events by kind, for the metrics: the log shows a few lines of
// each kind every interval (and how many it held back), the counts show them all.
type eventCounts struct {
	mu sync.Mutex
	m  map[string]uint64
}

func (c *eventCounts) add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]uint64{}
	}
	if _, ok := c.m[kind]; !ok && len(c.m) >= maxCountedKinds {
		kind = otherKind
	}
	c.m[kind]++
}

func (c *eventCounts) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.m)
}

// ViolationKind is a kind of client violation the broker counts: what nats-server
// says happened, and the account it happened in.
type ViolationKind struct {
	What, Account string
}

// EventCounts are what the broker refused and what clients tried that their grants do
// not allow, since it started.
type EventCounts struct {
	// Refused counts refused connections by the Authenticator's reason (see
	// ErrRefused).
	Refused map[string]uint64
	// Violations counts permissions violations (publish, reply, subscription) and
	// other client errors nats-server reports, by kind.
	Violations map[ViolationKind]uint64
}

// Violations are the kinds of violation the metrics export from the start, at 0
// until one happens: every kind the log tells apart, in each account of clients the
// mesh does not run (hosts and enrolling clients, operators, revoked keys, removed
// control nodes' credentials). The control plane's own accounts appear when first
// counted.
func Violations() []ViolationKind {
	var whats []string
	for _, a := range argEvents {
		whats = append(whats, a.what)
	}
	for _, words := range subscriptionViolations {
		whats = append(whats, strings.TrimSpace(words))
	}
	var out []ViolationKind
	for _, acc := range []Account{AccountHosts, AccountOperators, AccountRevoked, AccountRetired} {
		for _, w := range whats {
			out = append(out, ViolationKind{What: w, Account: acc.String()})
		}
	}
	return out
}
