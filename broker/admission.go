package broker

import (
	"crypto/tls"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// OperatorProtocol is the TLS application protocol (ALPN) an operator's client
// offers. Its handshake is not held (see Admission), so that an operator can reach a
// control node that is still starting. Offering it grants nothing else: who the
// client is, and what it may do, is decided at CONNECT as for any client.
const OperatorProtocol = "mesh-operator"

// ErrBusy is why a host's handshake was refused: the broker was still held after
// Admission.MaxWait. The host tries again after its back-off.
var ErrBusy = errors.New("broker not open yet: its control node is still starting; try again shortly")

// ErrIsolated is why a host's handshake was refused while the broker sheds its
// hosts (Server.Shed): its control node is cut off from the others, so a host here
// would reach neither the leader nor its declarations. The host takes the next
// broker it knows.
var ErrIsolated = errors.New("this control node is cut off from the other control nodes; try another")

// Admission decides when hosts' TLS handshakes go ahead.
//
// A control node restarted under a fleet meets every host's reconnection within a
// second or two. Admitted while the node still starts, those handshakes share the
// cores with the rest of its start (its own connections to the broker, the presence
// of hosts, the API's subscriptions), which then takes seconds instead of a few
// hundred milliseconds, and hosts ask for syncs nobody answers yet. Held, a host's
// handshake waits after its ClientHello, costing no CPU, until the node opens.
type Admission struct {
	// Held keeps host handshakes waiting until Server.Open. Operators are not held.
	Held bool
	// MaxWait is the longest a host's handshake waits for Open before it is refused
	// with ErrBusy; 0 means DefaultHandshakeWait.
	MaxWait time.Duration
}

// DefaultHandshakeWait is Admission.MaxWait's default: longer than a control node
// takes to start, well inside the hosts' own connection timeout.
const DefaultHandshakeWait = 5 * time.Second

// AdmissionStats count what the admission did since the broker started.
type AdmissionStats struct {
	// Held is how many host handshakes waited for Open; of them, Released went
	// ahead when it came and Refused were refused after MaxWait. Operators is how
	// many handshakes were an operator's.
	Held, Released, Refused, Operators uint64
	// Waiting is how many host handshakes wait now.
	Waiting int64
	// Isolated is how many host handshakes were refused while the broker shed its
	// hosts (Server.Shed).
	Isolated uint64
}

type admission struct {
	open    chan struct{}
	opened  sync.Once
	maxWait time.Duration

	held, released, refused, operators atomic.Uint64
	waiting                            atomic.Int64
	// shedding refuses every host handshake at once (ErrIsolated), held or not.
	shedding atomic.Bool
	isolated atomic.Uint64
}

func newAdmission(a Admission) *admission {
	wait := a.MaxWait
	if wait <= 0 {
		wait = DefaultHandshakeWait
	}
	adm := &admission{open: make(chan struct{}), maxWait: wait}
	if !a.Held {
		adm.Open()
	}
	return adm
}

// Open lets held handshakes go ahead; calling it again does nothing.
func (a *admission) Open() { a.opened.Do(func() { close(a.open) }) }

func (a *admission) stats() AdmissionStats {
	return AdmissionStats{Held: a.held.Load(), Released: a.released.Load(), Refused: a.refused.Load(),
		Operators: a.operators.Load(), Waiting: a.waiting.Load(), Isolated: a.isolated.Load()}
}

// admit waits until a host's handshake may go ahead.
func (a *admission) admit() error {
	if a.shedding.Load() {
		a.isolated.Add(1)
		return ErrIsolated
	}
	select {
	case <-a.open:
		return nil
	default:
	}
	a.held.Add(1)
	a.waiting.Add(1)
	defer a.waiting.Add(-1)
	timeout := time.NewTimer(a.maxWait)
	defer timeout.Stop()
	select {
	case <-a.open:
		a.released.Add(1)
		return nil
	case <-timeout.C:
		a.refused.Add(1)
		return ErrBusy
	}
}

// serverTLS returns base with the admission in front of every handshake. It runs
// after the ClientHello and before the key exchange, so a held handshake has cost
// the broker nothing yet.
func (a *admission) serverTLS(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Contains(hello.SupportedProtos, OperatorProtocol) {
			a.operators.Add(1)
			return nil, nil
		}
		return nil, a.admit()
	}
	return cfg
}
