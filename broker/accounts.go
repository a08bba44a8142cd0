package broker

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Account is one of the broker's NATS accounts. Accounts are separate subject
// spaces: a message published in one reaches another only through the exports and
// imports below, which the broker enforces whatever a client asks (docs/decisions/0008).
type Account int

// The accounts every broker of a mesh has.
const (
	// AccountNone is the zero value: a Grant must name an account.
	AccountNone Account = iota
	// AccountHosts holds enrolled hosts, enrolling clients and the control plane's
	// host-facing connection. Every connection in it is bounded by Limits.
	AccountHosts
	// AccountControl holds the control plane's own connections: the publisher of
	// declarations, the operator API and the control nodes' heartbeats.
	AccountControl
	// AccountOperators holds operators. It reaches the operator API and nats-server's
	// read-only monitoring, and nothing else.
	AccountOperators
	// AccountSystem is nats-server's system account; only the control plane's
	// listener for connection events is granted it.
	AccountSystem
	// AccountRevoked holds the connections of revoked nodes' keys, each for a few
	// seconds, to be told, signed, that they were revoked. Nothing crosses between
	// it and any other account: a revoked key never sees what a node enrolled since
	// under the same id receives. Bounded by Limits like the hosts account.
	AccountRevoked
	// AccountRetired holds the operator credentials of removed control nodes. It
	// reaches the operator API's reads (Flows.RetiredServices) and nothing else, with
	// at most RetiredAccountConnections connections; in
	// an account of their own, the answers to their requests can reach nobody but
	// them, whatever reply subject they name (in the operators account they could
	// name another operator's inbox, or a subject they may not publish on).
	AccountRetired
)

var accountNames = [...]string{"", "HOSTS", "CONTROL", "OPERATORS", "SYSTEM", "REVOKED", "RETIRED"}

// String returns the account's name (the name tag nats-server reports).
func (a Account) String() string {
	if a <= AccountNone || int(a) >= len(accountNames) {
		return fmt.Sprintf("Account(%d)", int(a))
	}
	return accountNames[a]
}

// Flows are the only ways a message crosses from one account into another.
type Flows struct {
	// HostStreams are subjects published in the control account and delivered to
	// subscribers in the hosts account (declarations and notices).
	HostStreams []string
	// OperatorServices are subjects served in the control account that operators
	// may request; nats-server rewrites each request's reply subject, so the
	// responder can answer the requester and nobody else.
	OperatorServices []string
	// OperatorGathers are subjects served in the control account by every control
	// node, each with its own answer, that operators may request: like
	// OperatorServices, but the requester hears every answer, not the first, for up
	// to MaxGatherWait.
	OperatorGathers []string
	// RetiredServices are what the operator credentials of removed control nodes
	// may request (AccountRetired): the reads among OperatorServices, which their
	// clients call by the same subjects (Local) and the control account serves
	// apart (Export), so that such credentials flooding their reads fill a queue of
	// their own, not the one every operator's changes wait in.
	RetiredServices []Renamed
}

// Renamed is a service the control account exports as Export, which clients of the
// importing account request as Local.
type Renamed struct {
	Local, Export string
}

// The retired account's bounds: a removed control node's credentials read now and
// then (a command, a script), and nothing more is theirs to take.
const (
	// RetiredAccountConnections caps the connections of all the retired account's
	// credentials, cluster-wide: they cannot fill the descriptors a control node
	// keeps for operators.
	RetiredAccountConnections = 16
	// RetiredResponseWait is how long the broker carries an answer back to a
	// retired request (meshctl's default timeout): what it keeps for each request
	// until then is bounded to what a flood can send before it is disconnected.
	RetiredResponseWait = 15 * time.Second
)

// MaxGatherWait is how long the answers to a request on one of Flows.OperatorGathers
// are carried back to the requester.
const MaxGatherWait = 30 * time.Second

// Limits bound every connection of the hosts account, enforced by nats-server: a
// larger message closes the connection ("Maximum Payload Violation"); a subscription
// past the cap is refused ("Maximum Subscriptions Exceeded") and the connection stays.
// The revoked and retired accounts have the same subscription cap.
type Limits struct {
	// MaxPayload caps one message published in the hosts account; 0 means 64 KiB.
	MaxPayload int32
	// MaxSubscriptions caps one connection's subscriptions; 0 means
	// DefaultHostSubscriptions (4).
	MaxSubscriptions int32
}

// DefaultHostSubscriptions is the default of Limits.MaxSubscriptions. Every
// subscription a connection holds on a subject gets its own copy of each message
// published there, so what the control plane sends onto a node's subjects reaches
// the node up to this many times on each connection it holds: with 16, one host
// that subscribed 15 times on each of its 4 connections had its declaration sent to
// it 60 times a sync. What the clients of these accounts hold:
//
//   - an agent (meshhost run): its declaration subject, the inbox its status
//     reports name, and nats.go's request mux (its syncs): 3; agents before the
//     status inbox, 2; a revoked key's agent the same, in the revoked account;
//   - an enrolling client (meshhost enrol, meshctl join's control-role
//     enrolment): nats.go's request mux, 1;
//   - meshctl with a removed control node's credentials (the retired account):
//     the request mux and a gather's inbox, 2;
//   - the control plane's own connection in the hosts account: the enrolment
//     subjects (one wildcard), sync and status, 3. It is built with this broker,
//     never of another version, and its subscriptions are checked against the cap
//     by its tests.
//
// The most a host's client needs (3), plus one. A connection must stay below the
// cap, not at it, so 3 is what any client may really hold: at every reload of the
// broker (a control node admitted or removed), nats-server asks the authentication
// hook again about each client, and registering its user applies the account's
// limits again (client.go RegisterUser, applyAccountLimits), which closes a
// connection whose subscriptions reach the cap (subsAtLimit's >=). The control
// plane's connection held 4 and was closed at each such reload; an agent that took
// a 4th would be, the whole fleet at once.
const DefaultHostSubscriptions = 4

func (l Limits) withDefaults() Limits {
	if l.MaxPayload == 0 {
		l.MaxPayload = 64 << 10
	}
	if l.MaxSubscriptions == 0 {
		l.MaxSubscriptions = DefaultHostSubscriptions
	}
	return l
}

// MonitoringSubjects are nats-server's read-only monitoring requests, which the
// operators account imports from the system account: enough for `nats server ping`,
// `server list`, `server info` and `server report connections`. Nothing here
// changes the server (no KICK, LDM or RELOAD) or reads a profile.
var monitoringSuffixes = []string{"IDZ", "STATSZ", "VARZ", "SUBSZ", "CONNZ", "ROUTEZ", "ACCOUNTZ", "HEALTHZ", "JSZ", "GATEWAYZ", "LEAFZ"}

// MonitoringSubjects returns the subjects an operator may request for
// nats-server's own monitoring (each answered by every broker of the mesh).
func MonitoringSubjects() []string {
	out := []string{"$SYS.REQ.SERVER.PING"}
	for _, s := range monitoringSuffixes {
		out = append(out, "$SYS.REQ.SERVER.*."+s)
	}
	return out
}

// accountKey derives an account's identity from the mesh id. nats-server names a
// JWT account by a public account key, and every broker of a mesh must name its
// accounts alike or routes would not carry them; deriving the key from the mesh id
// and the account's role gives the same name everywhere with no state to hand over.
// Its private half signs nothing: client authentication is the control plane's
// hook, and the account JWTs are signed by each broker's own operator key.
func accountKey(mesh string, a Account) (nkeys.KeyPair, error) {
	seed := sha256.Sum256([]byte("mesh-nats-account-v1\x00" + mesh + "\x00" + a.String()))
	return nkeys.FromRawSeed(nkeys.PrefixByteAccount, seed[:])
}

// AccountName returns the name (a public account key) every broker of mesh gives
// account a.
func AccountName(mesh string, a Account) (string, error) {
	kp, err := accountKey(mesh, a)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// ConnectionEvents returns the subjects on which nats-server announces, in the system
// account and across the cluster, each connection that opens or closes in account a
// of mesh.
func ConnectionEvents(mesh string, a Account) (connect, disconnect string, err error) {
	name, err := AccountName(mesh, a)
	if err != nil {
		return "", "", err
	}
	return "$SYS.ACCOUNT." + name + ".CONNECT", "$SYS.ACCOUNT." + name + ".DISCONNECT", nil
}

// accounts is the resolved account layout of one broker.
type accounts struct {
	names    map[Account]string // public account key by account
	limits   Limits             // the hosts account's, defaults filled in
	resolver *server.MemAccResolver
	system   string
}

// ours reports whether name is one of these accounts.
func (a *accounts) ours(name string) bool {
	for _, n := range a.names {
		if n == name {
			return true
		}
	}
	return false
}

// newAccounts signs the account JWTs with operator and stores them in an
// in-memory resolver, the only place nats-server looks accounts up.
func newAccounts(mesh string, operator nkeys.KeyPair, flows Flows, limits Limits) (*accounts, error) {
	if mesh == "" {
		return nil, errors.New("broker: the mesh id is required: it names the broker's accounts")
	}
	limits = limits.withDefaults()
	acc := &accounts{names: map[Account]string{}, limits: limits, resolver: &server.MemAccResolver{}}
	for _, a := range []Account{AccountHosts, AccountControl, AccountOperators, AccountSystem, AccountRevoked, AccountRetired} {
		kp, err := accountKey(mesh, a)
		if err != nil {
			return nil, fmt.Errorf("broker: account %s: %w", a, err)
		}
		acc.names[a], _ = kp.PublicKey()
	}
	acc.system = acc.names[AccountSystem]

	claims := map[Account]*jwt.AccountClaims{}
	for a, pub := range acc.names {
		c := jwt.NewAccountClaims(pub)
		c.Name = a.String()
		// No JetStream anywhere: the broker is a bus, not a store.
		c.Limits.JetStreamLimits = jwt.JetStreamLimits{}
		claims[a] = c
	}
	hosts, control, ops, sys := claims[AccountHosts], claims[AccountControl], claims[AccountOperators], claims[AccountSystem]
	for _, c := range []*jwt.AccountClaims{hosts, claims[AccountRevoked]} {
		c.Limits.Payload = int64(limits.MaxPayload)
		c.Limits.Subs = int64(limits.MaxSubscriptions)
	}
	for _, subj := range flows.HostStreams {
		control.Exports.Add(&jwt.Export{Subject: jwt.Subject(subj), Type: jwt.Stream})
		hosts.Imports.Add(&jwt.Import{Account: acc.names[AccountControl], Subject: jwt.Subject(subj), Type: jwt.Stream})
	}
	for _, subj := range flows.OperatorServices {
		control.Exports.Add(&jwt.Export{Subject: jwt.Subject(subj), Type: jwt.Service})
		ops.Imports.Add(&jwt.Import{Account: acc.names[AccountControl], Subject: jwt.Subject(subj), Type: jwt.Service})
	}
	retired := claims[AccountRetired]
	retired.Limits.Conn = RetiredAccountConnections
	retired.Limits.Subs = int64(limits.MaxSubscriptions)
	for _, r := range flows.RetiredServices {
		control.Exports.Add(&jwt.Export{Subject: jwt.Subject(r.Export), Type: jwt.Service, ResponseThreshold: RetiredResponseWait})
		retired.Imports.Add(&jwt.Import{Account: acc.names[AccountControl], Subject: jwt.Subject(r.Export),
			LocalSubject: jwt.RenamingSubject(r.Local), Type: jwt.Service})
	}
	for _, subj := range flows.OperatorGathers {
		// The broker keeps a streamed request's way back until the threshold passes
		// (2 minutes by default), answered or not: bounded to what a gather waits.
		control.Exports.Add(&jwt.Export{Subject: jwt.Subject(subj), Type: jwt.Service, ResponseType: jwt.ResponseTypeStream,
			ResponseThreshold: MaxGatherWait})
		ops.Imports.Add(&jwt.Import{Account: acc.names[AccountControl], Subject: jwt.Subject(subj), Type: jwt.Service})
	}
	for _, subj := range MonitoringSubjects() {
		// Every broker answers a PING: the responses are a stream, not one reply.
		sys.Exports.Add(&jwt.Export{Subject: jwt.Subject(subj), Type: jwt.Service, ResponseType: jwt.ResponseTypeStream})
		ops.Imports.Add(&jwt.Import{Account: acc.names[AccountSystem], Subject: jwt.Subject(subj), Type: jwt.Service})
	}
	for a, c := range claims {
		token, err := c.Encode(operator)
		if err != nil {
			return nil, fmt.Errorf("broker: sign the %s account: %w", a, err)
		}
		if err := acc.resolver.Store(acc.names[a], token); err != nil {
			return nil, fmt.Errorf("broker: store the %s account: %w", a, err)
		}
	}
	return acc, nil
}
