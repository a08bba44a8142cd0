package broker

// Every connection a broker holds is a file descriptor of the control node's process,
// and so are its Raft log and snapshots, its routes and Raft connections to the other
// control nodes, and its metrics listener. A fleet larger than the process's open-file
// limit used to take them all: nats-server then failed every accept ("too many open
// files"), the operators' included, and a full control node looked like a stopped one.
// Capacity keeps room for the process and for operators, and refuses hosts beyond it,
// who go on to another control node.

// Capacity is how many connections a broker holds.
type Capacity struct {
	// OpenFiles is the process's open-file limit the rest was derived from; 0 when
	// unknown.
	OpenFiles uint64
	// MaxConnections caps every client connection (nats-server's max_connections):
	// OpenFiles less what the process keeps for itself, plus the control plane's
	// in-process clients. 0 means nats-server's default.
	MaxConnections int
	// MaxHosts caps the hosts (enrolling, enrolled and revoked): the sockets
	// MaxConnections leaves less room for operators. A host beyond it is refused
	// (ErrFull) and tries another control node. 0 means no cap of its own.
	MaxHosts int
}

// Descriptors the process keeps for itself and sockets kept for operators, at most (a
// half and a quarter of a small limit).
const (
	processReserve  = 128
	operatorReserve = 32
)

// The control plane's own in-process connections to its broker (one per role,
// controlplane/daemon): they hold no descriptor, and the two in the hosts' accounts
// are no hosts.
const (
	ControlPlaneClients     = 6
	ControlPlaneHostClients = 2
)

// ErrFull refuses a host because its broker holds MaxHosts host connections already.
var ErrFull = NewRefusal("full", "this control node holds as many host connections as it admits (its open-file limit, or serve --max-hosts); the host will try another control node")

// CapacityFor derives a broker's capacity from the process's open-file limit. maxHosts,
// when positive, caps the hosts lower still (meshctl serve --max-hosts). An openFiles of
// 0 (unknown) leaves nats-server's default and caps only by maxHosts.
func CapacityFor(openFiles uint64, maxHosts int) Capacity {
	c := Capacity{OpenFiles: openFiles}
	if openFiles > 0 {
		limit := int(min(openFiles, 1<<30))
		sockets := max(limit-min(processReserve, limit/2), 1)
		c.MaxConnections = sockets + ControlPlaneClients
		c.MaxHosts = max(sockets-min(operatorReserve, limit/4), 1)
	}
	if maxHosts > 0 && (c.MaxHosts == 0 || maxHosts < c.MaxHosts) {
		c.MaxHosts = maxHosts
	}
	return c
}

// ProcessCapacity is CapacityFor the calling process's open-file limit (Go raises its
// soft limit to the hard one as a program starts).
func ProcessCapacity(maxHosts int) Capacity {
	return CapacityFor(openFileLimit(), maxHosts)
}
