// Package broker embeds the NATS server that every node of the mesh connects to.
//
// The broker does not decide who may connect: for every client it asks an
// Authenticator (the control plane, which holds the roster), and places the client in
// the account, with the permissions, the Authenticator grants. The accounts separate
// hosts, the control plane, operators and nats-server's system account; messages cross
// between them only along the Flows given at start (docs/decisions/0008). Everything
// the broker serves is TLS with the handshake first, so no byte of the NATS protocol
// crosses in clear and a client can check the pin before it sends anything.
package broker

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"mesh/host/busyaddr"
	"mesh/logging"
)

// Config is what the broker needs to start.
type Config struct {
	// Name identifies this broker among the mesh's brokers (the control node's id).
	Name string
	// Mesh is the mesh id; it names the accounts alike on every broker of the mesh.
	Mesh string
	// Flows are the subjects that cross between accounts.
	Flows Flows
	// HostLimits bound every connection of the hosts account.
	HostLimits Limits
	// Listen is the client address, ip:port; port 0 picks a free port (see Addr).
	Listen string
	// TLS is the server configuration: the leaf with the mesh CA in its chain.
	TLS *tls.Config
	// Auth decides every client connection.
	Auth Authenticator
	// Cluster, when set, joins this broker to the other control nodes' brokers.
	Cluster *ClusterConfig
	// Logger receives the broker's own log lines (permission violations among them).
	Logger *slog.Logger
	// MaxPayload caps one message in any account; 0 means 2 MiB (a declaration is at
	// most 1 MiB). HostLimits caps the hosts account further.
	MaxPayload int32
	// Admission says when hosts' TLS handshakes go ahead; the zero value admits
	// them from the start.
	Admission Admission
	// Capacity bounds the connections the broker holds (ProcessCapacity); the zero
	// value leaves nats-server's defaults and caps no hosts.
	Capacity Capacity
}

// ClusterConfig joins brokers of several control nodes over mutual TLS.
type ClusterConfig struct {
	Listen string      // ip:port for routes
	Routes []string    // other control nodes' route addresses, ip:port
	TLS    *tls.Config // mutual TLS: leaf, CA as ClientCAs and RootCAs, client certs required
	// Pins, when not nil, are the only leaves a route may present: each the hex
	// SHA-256 of a current control node's leaf SubjectPublicKeyInfo (this node's own
	// included, by the caller). Every leaf of the mesh CA is good for ten years, so
	// without pins a control node removed from the mesh could route back in. Nil
	// accepts every leaf the mesh CA signed.
	Pins []string
}

// Server is a running embedded broker.
type Server struct {
	ns       *server.Server
	log      *slog.Logger
	listen   string
	accounts *accounts
	admit    *admission
	hook     *hook
	nlog     *natsLog

	// peers serializes SetClusterPeers and guards opts: the options nats-server
	// runs with now. nats-server keeps the pointer it was given (at start, then at
	// each reload) as its current options, writes the ports it picked into it, and
	// diffs every exported field of the next options against it.
	peers     sync.Mutex
	opts      *server.Options
	clustered bool
	// closed is set, under peers, once Shutdown began: a sweep scheduled before
	// (sweepLater) does nothing then.
	closed bool
	// routePins are the pins every route handshake is checked against when the
	// peer's leaf arrives, set before each reload (routepins.go).
	routePins *routePins
	capacity  Capacity
	// answered are the control account's exports whose requesters wait for one
	// answer: the operators' services (PendingOperatorAnswers).
	answered []string
}

// Start configures and starts the broker and waits until it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.TLS == nil {
		return nil, errors.New("broker: TLS configuration is required")
	}
	if cfg.Auth == nil {
		return nil, errors.New("broker: an authenticator is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	host, port, err := splitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker listen address: %w", err)
	}
	port = anyPort(port)
	// nats-server discards a client's JWT unless it runs in operator mode, and the
	// operators' standard .creds files authenticate with one. A key of this process
	// is the trusted operator: it signs the account JWTs and nothing else, and the
	// authentication hook decides every client (docs/decisions/0002, 0008).
	operator, err := nkeys.CreateOperator()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	trusted, _ := operator.PublicKey()
	accts, err := newAccounts(cfg.Mesh, operator, cfg.Flows, cfg.HostLimits)
	if err != nil {
		return nil, err
	}
	maxPayload := cfg.MaxPayload
	if maxPayload == 0 {
		maxPayload = 2 << 20
	}
	admit := newAdmission(cfg.Admission)
	pins := &routePins{}
	opts := &server.Options{
		ServerName: cfg.Name,
		Host:       host,
		Port:       port,
		NoSigs:     true,
		NoLog:      false,
		MaxPayload: maxPayload,
		TLS:        true,
		TLSConfig:  admit.serverTLS(cfg.TLS),
		// A host's handshake may be held (Admission.MaxWait) before it runs.
		TLSTimeout:        (admit.maxWait + handshakeTime).Seconds(),
		TLSHandshakeFirst: true,
		AlwaysEnableNonce: true,
		// A client must authenticate quickly; enrolling clients get a connection deadline
		// of their own on top of this.
		AuthTimeout:     5,
		TrustedKeys:     []string{trusted},
		AccountResolver: accts.resolver,
		SystemAccount:   accts.system,
		// The broker is a message bus, not a store; JetStream stays off.
		JetStream: false,
		HTTPPort:  0,
		// Ping clients often enough that a dead peer is noticed within
		// SilentClientClosedWithin.
		PingInterval: clientPingInterval,
		MaxPingsOut:  clientMaxPingsOut,
		// nats-server pings a client 2 s after its CONNECT by default, and nats.go
		// fails a connection whose first answer is that PING rather than its PONG:
		// a login decided slowly (a control node busy with a fleet reconnecting)
		// failed, meshctl's among them. The first ping comes at PingInterval.
		DisableShortFirstPing: true,
		// Every host publishes and subscribes on subjects of its own, so nats-server's
		// subject cache only churns, and it makes each host's wildcard subscription
		// (nats.go's request inbox) scan every cached subject under the account's
		// write lock: 19–24 µs a host's subscriptions with it, 9–11 µs without, a
		// publication the same (BenchmarkDistinctSubjects).
		NoSublistCache: true,
		// nats-server remembers closed connections for its monitoring (CONNZ
		// state=closed), 10,000 by default. Every enrolment closes one, so a fleet
		// enrolling would keep 10,000 records (most of a kilobyte each) for nobody.
		MaxClosedClients: maxClosedClients,
		MaxConn:          cfg.Capacity.MaxConnections,
	}
	if c := cfg.Cluster; c != nil {
		ch, cp, err := splitHostPort(c.Listen)
		if err != nil {
			return nil, fmt.Errorf("broker cluster address: %w", err)
		}
		if c.TLS == nil {
			return nil, errors.New("broker: the cluster's mutual TLS configuration is required")
		}
		opts.Cluster = server.ClusterOpts{
			Name:       "mesh",
			Host:       ch,
			Port:       anyPort(cp),
			TLSConfig:  routeTLS(c.TLS, pins),
			TLSTimeout: routeTLSTimeout.Seconds(),
			// nats-server's default, set here because the pin checks rest on what
			// it does: with compression configured, a route whose peer sends no
			// INFO is closed as stale (routeRegisterWindow) instead of pinged.
			Compression: server.CompressionOpts{Mode: server.CompressionAccept},
			// Routes are authenticated by their certificate, not by a password.
			TLSMap: false,
			// Clients learn the brokers from the signed membership (hosts) or their
			// own configuration (meshctl), never from a broker's INFO: nats-server
			// would list every broker's client address there (connect_urls) to
			// anyone who completes the TLS handshake, credentials or not, and a
			// client adds those addresses, signed by nobody, to the ones it dials.
			NoAdvertise: true,
			// A control node whose process stops reading (stopped, wedged) keeps its
			// subscriptions in every other broker's view until its route is closed,
			// and its subscriptions include the leader's API, which the others then
			// go on routing requests and reports to. The clients' 20 s pings would
			// keep that up for a minute after a new leader serves; routes are few,
			// so they ping often.
			PingInterval: routePingInterval,
			MaxPingsOut:  routeMaxPingsOut,
		}
		if opts.Cluster.TLSPinnedCerts, err = pinSet(c.Pins); err != nil {
			return nil, err
		}
		pins.store(opts.Cluster.TLSPinnedCerts)
		opts.CustomRouterAuthentication = routeAuth{pins: pins}
		if opts.Routes, err = routeURLs(c.Routes); err != nil {
			return nil, err
		}
	}
	h := &hook{auth: cfg.Auth, log: log, accounts: accts, maxHosts: cfg.Capacity.MaxHosts}
	opts.CustomClientAuthentication = h
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	h.ns = ns
	// Trace stays off whatever the level: nats-server's traces are the protocol itself,
	// every message and its payload.
	nlog := newNATSLog(log, logging.NewLimiter(logging.RepeatInterval, time.Now))
	ns.SetLoggerV2(nlog, nlog.debug, false, false)
	go ns.Start()
	deadline := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		deadline = time.Until(d)
	}
	if err := waitReady(ns, nlog, deadline); err != nil {
		ns.Shutdown()
		// nats-server says a listener it could not open in its own words only:
		// asked again, the system says which and why.
		listens := []string{cfg.Listen}
		if cfg.Cluster != nil {
			listens = append(listens, cfg.Cluster.Listen)
		}
		if lerr := busyaddr.Check(listens...); lerr != nil {
			return nil, fmt.Errorf("broker: %w: %w", ErrNotReady, lerr)
		}
		return nil, fmt.Errorf("broker: not accepting connections on %s: %w", cfg.Listen, err)
	}
	answered := slices.Clone(cfg.Flows.OperatorServices)
	for _, r := range cfg.Flows.RetiredServices {
		answered = append(answered, r.Export)
	}
	return &Server{ns: ns, log: log, listen: ns.ClientURL(), accounts: accts, admit: admit, hook: h, nlog: nlog, opts: opts,
		clustered: cfg.Cluster != nil, routePins: pins, capacity: cfg.Capacity, answered: answered}, nil
}

// ErrNotReady means nats-server did not start listening, for the reason the error
// names: a port in use, an address not this machine's, or no answer in time.
var ErrNotReady = errors.New("the broker did not start")

// waitReady waits until ns accepts connections, for at most deadline, and fails as
// soon as nats-server reports why it cannot (a listener it could not open): that
// reason went only to the log, and the caller waited out the whole deadline to say
// "is the address in use?".
func waitReady(ns *server.Server, nlog *natsLog, deadline time.Duration) error {
	end := time.Now().Add(deadline)
	for {
		if ns.ReadyForConnections(50 * time.Millisecond) {
			return nil
		}
		if why := nlog.startFailure(); why != "" {
			return fmt.Errorf("%w: %s", ErrNotReady, why)
		}
		if time.Now().After(end) {
			return fmt.Errorf("%w: not ready after %s (is the address in use?)", ErrNotReady, deadline)
		}
	}
}

// A client the broker no longer hears from is pinged every clientPingInterval, the
// first time once it has heard nothing for an interval, and closed when
// clientMaxPingsOut pings are unanswered at the next.
const (
	clientPingInterval = 20 * time.Second
	clientMaxPingsOut  = 3
)

// SilentClientClosedWithin bounds how long after the last it heard from a client
// (its link cut, its machine gone) the broker closes its connection: nats-server
// delays its first ping up to an interval, then sends clientMaxPingsOut of them and
// closes at the interval after. Until then an agent that reconnected elsewhere holds
// two connections with its key.
const SilentClientClosedWithin = clientPingInterval * (clientMaxPingsOut + 2)

// A route that leaves routeMaxPingsOut pings unanswered is closed: within about
// routePingInterval × (routeMaxPingsOut+1) of its peer's process stopping. A peer
// stalled by load for 6 s (three times what Raft's default heartbeat timeout
// tolerates before an election) keeps its routes.
const (
	routePingInterval = 2 * time.Second
	routeMaxPingsOut  = 3
)

// routeTLSTimeout is how long a route's TLS handshake may take.
const routeTLSTimeout = 5 * time.Second

// handshakeTime is what the broker's TLS timeout allows a handshake beyond the time
// it may be held: a client on a slow link still completes, one that stalls is cut off.
const handshakeTime = 3 * time.Second

// Open lets through the host handshakes a broker started with Admission.Held keeps
// waiting, and every later one; it does nothing on a broker already open.
//
// The TLS timeout stays what the held handshakes need (8 s), though none is held
// from now on: lowering it takes a configuration reload, and nats-server takes every
// reload for a change of accounts and users and asks the Authenticator again about
// every client connected. Done here, at 10,000 hosts reconnecting after a kill -9,
// the API answered 12.3 s after the kill instead of 1.4 s.
func (s *Server) Open() { s.admit.Open() }

// Shed sends this broker's hosts elsewhere, for a control node cut off from the
// others (docs/decisions/0023): from now on every host's TLS handshake is refused
// at once (ErrIsolated), and every host connection it holds is closed, so that the
// agents take the next broker they know. Operators and the control plane's own
// connections stay. It returns how many host connections it closed. Unshed ends it.
func (s *Server) Shed() (int, error) {
	s.admit.shedding.Store(true)
	n := 0
	var errs []error
	for _, a := range []Account{AccountHosts, AccountRevoked} {
		connz, err := s.ns.Connz(&server.ConnzOptions{Account: s.accounts.names[a], State: server.ConnOpen, Limit: 1 << 20})
		if err != nil {
			errs = append(errs, fmt.Errorf("list the connections of %s: %w", a, err))
			continue
		}
		for _, c := range connz.Conns {
			// Hosts come over TLS; the control plane's own connections in this
			// account are in-process and have none.
			if c.TLSVersion == "" {
				continue
			}
			if err := s.ns.DisconnectClientByID(c.Cid); err == nil {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// Unshed admits hosts again after Shed.
func (s *Server) Unshed() { s.admit.shedding.Store(false) }

// Shedding reports whether the broker sheds its hosts (Shed).
func (s *Server) Shedding() bool { return s.admit.shedding.Load() }

// AdmissionStats says what the admission of host handshakes did so far.
func (s *Server) AdmissionStats() AdmissionStats { return s.admit.stats() }

// Addr returns the address clients connect to, ip:port.
func (s *Server) Addr() string {
	a := s.ns.Addr()
	if a == nil {
		return ""
	}
	return a.String()
}

// InProcess returns the provider for an in-process client connection (no socket, no
// TLS), used by the control plane for its own client.
func (s *Server) InProcess() *server.Server { return s.ns }

// ConnectionEvents returns the subjects on which nats-server announces, in the system
// account and across the cluster, each connection that opens or closes in account a.
func (s *Server) ConnectionEvents(a Account) (connect, disconnect string) {
	name := s.accounts.names[a]
	return "$SYS.ACCOUNT." + name + ".CONNECT", "$SYS.ACCOUNT." + name + ".DISCONNECT"
}

// AccountName returns the name nats-server knows account a by (a public account key).
func (s *Server) AccountName(a Account) string { return s.accounts.names[a] }

// HostLimits returns the limits this broker enforces on each connection of the hosts
// account (Config.HostLimits, defaults filled in). A message published on a node's
// subject reaches at most MaxSubscriptions copies on each connection the node holds.
func (s *Server) HostLimits() Limits { return s.accounts.limits }

// maxClosedClients is how many closed connections the broker's monitoring lists.
const maxClosedClients = 1000

// Kick closes every connection authenticated as user on this broker and returns how
// many it closed. user is the name nats-server knows the connection by: for a client
// that authenticated with an nkey, its public key; otherwise the granted user name.
func (s *Server) Kick(user string) (int, error) {
	connz, err := s.ns.Connz(&server.ConnzOptions{Username: true, User: user, State: server.ConnOpen, Limit: 1 << 16})
	if err != nil {
		return 0, fmt.Errorf("list connections of %s: %w", user, err)
	}
	n := 0
	for _, c := range connz.Conns {
		if err := s.ns.DisconnectClientByID(c.Cid); err == nil {
			n++
		}
	}
	return n, nil
}

// KickOperators closes the connections of the operators' account whose user key
// (the subject of the user JWT they logged in with) close names, and returns how
// many it closed. nats-server checks a connection's credentials at its login and at
// each reload of its options, and at no other time: credentials the mesh stops
// trusting as an operator's (a removed control node's) keep every right of the
// operators' account on a connection made before, until something closes it.
func (s *Server) KickOperators(close func(key string) bool) (int, error) {
	connz, err := s.ns.Connz(&server.ConnzOptions{Username: true, Account: s.accounts.names[AccountOperators], State: server.ConnOpen, Limit: 1 << 16})
	if err != nil {
		return 0, fmt.Errorf("list the operators' connections: %w", err)
	}
	n := 0
	for _, c := range connz.Conns {
		claims, err := jwt.DecodeUserClaims(c.JWT)
		if err != nil || !close(claims.Subject) {
			continue
		}
		if err := s.ns.DisconnectClientByID(c.Cid); err == nil {
			n++
		}
	}
	return n, nil
}

// Connections returns the number of open client connections per authenticated user
// (for nkey clients, their public key; see Kick).
func (s *Server) Connections() (map[string]int, error) {
	connz, err := s.ns.Connz(&server.ConnzOptions{Username: true, State: server.ConnOpen, Limit: 1 << 20})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int, len(connz.Conns))
	for _, c := range connz.Conns {
		out[c.AuthorizedUser]++
	}
	return out, nil
}

// SetClusterPeers changes, on the running broker, which control nodes it routes
// with: only leaves whose pin is in pins are accepted in a route handshake (nil:
// every leaf of the mesh CA, as ClusterConfig.Pins), and routes are the cluster
// addresses it solicits (ip:port, as ClusterConfig.Routes). A route already up
// whose peer's leaf is no longer pinned is closed, whichever side solicited it; a
// solicited route to an address no longer listed is closed and not redialled.
// Calls are serialized, and one that changes nothing does nothing.
//
// Every change is a reload of nats-server's options, and every reload has
// nats-server authenticate each logged-in client again: the Authenticator runs once
// more for each, as a recheck (nats-server takes its users and accounts options for
// changed on any reload; reloadcheck.go).
func (s *Server) SetClusterPeers(pins []string, routes []string) error {
	set, err := pinSet(pins)
	if err != nil {
		return err
	}
	urls, err := routeURLs(routes)
	if err != nil {
		return err
	}
	s.peers.Lock()
	defer s.peers.Unlock()
	if !s.clustered {
		return errors.New("broker: cluster peers set on a broker started without a cluster")
	}
	cur := s.opts
	pinsChanged := !reflect.DeepEqual(withoutSweep(cur.Cluster.TLSPinnedCerts), set)
	routesChanged := !slices.Equal(urlStrings(cur.Routes), urlStrings(urls))
	if !pinsChanged && !routesChanged {
		return nil
	}
	// A shallow copy: every other field keeps the very value nats-server holds,
	// so its reload finds only these two changed. A deep copy (Options.Clone)
	// copies the TLS configurations, which hold functions and so never compare
	// equal, and the reload would take them for new ones.
	next := *cur
	next.Cluster.TLSPinnedCerts = set
	next.Routes = urls
	// The handshakes under way are checked against the new pins from now on; the
	// reload closes the routes already up (routePins says why both).
	s.routePins.store(set)
	if err := s.reload(&next); err != nil {
		s.routePins.store(withoutSweep(cur.Cluster.TLSPinnedCerts))
		return fmt.Errorf("broker: set cluster peers: %w", err)
	}
	s.opts = &next
	s.logPeers(cur, &next)
	if pinsChanged {
		s.sweepLater(set)
	}
	return nil
}

// reload has nats-server run with next, its questions about the clients told from
// logins (reloadcheck.go).
func (s *Server) reload(next *server.Options) error {
	return s.hook.reloading(func() error { return s.ns.ReloadOptions(next) })
}

// sweepLater has the routes checked against the pins again if a route handshake
// passed with a pin set leaves out within routeRegisterWindow: that route may
// register after the reload that just checked them (routePins says why), and it
// will have done so, or been closed, by the time the check runs.
func (s *Server) sweepLater(set server.PinnedCertSet) {
	last, ok := s.routePins.unlistedSince(set, time.Now().Add(-routeRegisterWindow))
	if !ok {
		return
	}
	at := last.Add(routeRegisterWindow + routeSweepMargin)
	s.log.Warn("a route handshake passed shortly before its peer's pin was removed; the routes will be checked again",
		"in", time.Until(at).Round(time.Second).String())
	time.AfterFunc(time.Until(at), s.sweepRoutes)
}

// sweepRoutes has nats-server check every registered route against the pins of
// now, closing those whose peer's leaf they leave out.
func (s *Server) sweepRoutes() {
	s.peers.Lock()
	defer s.peers.Unlock()
	cur := s.opts
	if s.closed || cur.Cluster.TLSPinnedCerts == nil {
		return // shut down, or no pinning any more: every leaf may route
	}
	next := *cur
	next.Cluster.TLSPinnedCerts = sweepToggled(cur.Cluster.TLSPinnedCerts)
	if err := s.reload(&next); err != nil {
		s.log.Error("could not check the routes against the pins again; a removed control node may keep a route until the next change of the control nodes",
			"err", err)
		return
	}
	s.opts = &next
	s.log.Info("routes checked against the pins again")
}

// logPeers says what SetClusterPeers changed, in counts.
func (s *Server) logPeers(old, cur *server.Options) {
	pinsAdded, pinsRemoved := diffCount(slices.Collect(maps.Keys(withoutSweep(old.Cluster.TLSPinnedCerts))), slices.Collect(maps.Keys(cur.Cluster.TLSPinnedCerts)))
	routesAdded, routesRemoved := diffCount(urlStrings(old.Routes), urlStrings(cur.Routes))
	s.log.Info("cluster peers changed",
		"pinned", cur.Cluster.TLSPinnedCerts != nil, "pins", len(cur.Cluster.TLSPinnedCerts),
		"pins_added", pinsAdded, "pins_removed", pinsRemoved,
		"routes", len(cur.Routes), "routes_added", routesAdded, "routes_removed", routesRemoved)
}

// pinSet is nats-server's set of pinned leaves: nil for nil (no pinning), and
// otherwise the pins in the lower-case hex it compares against, checked here so a
// malformed pin is refused before anything changes.
func pinSet(pins []string) (server.PinnedCertSet, error) {
	if pins == nil {
		return nil, nil
	}
	set := make(server.PinnedCertSet, len(pins))
	for _, p := range pins {
		p = strings.ToLower(p)
		if b, err := hex.DecodeString(p); err != nil || len(b) != 32 {
			return nil, fmt.Errorf("broker: cluster pin %q is not the hex SHA-256 of a certificate's public key", p)
		}
		set[p] = struct{}{}
	}
	return set, nil
}

// routeURLs turns route addresses into nats-server's route URLs, sorted: nats-server
// sorts its current route list in place at each reload while its other goroutines
// may read it, and a sorted list is left as it is.
func routeURLs(routes []string) ([]*url.URL, error) {
	var urls []*url.URL
	for _, r := range routes {
		if _, _, err := splitHostPort(r); err != nil {
			return nil, fmt.Errorf("route: %w", err)
		}
		urls = append(urls, server.RoutesFromStr("tls://"+r)...)
	}
	slices.SortFunc(urls, func(a, b *url.URL) int { return strings.Compare(a.String(), b.String()) })
	return urls, nil
}

// urlStrings returns the URLs' text, sorted.
func urlStrings(urls []*url.URL) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = u.String()
	}
	slices.Sort(out)
	return out
}

// diffCount counts what is in b and not in a (added), and in a and not in b.
func diffCount(a, b []string) (added, removed int) {
	for _, x := range b {
		if !slices.Contains(a, x) {
			added++
		}
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			removed++
		}
	}
	return added, removed
}

// EventCounts returns what the broker refused and what clients tried beyond their
// grants, since it started: every event, where the log shows a few of each kind.
func (s *Server) EventCounts() EventCounts {
	out := EventCounts{Refused: s.hook.refused.snapshot(), Violations: map[ViolationKind]uint64{}}
	for k, n := range s.nlog.violations.snapshot() {
		what, account, _ := strings.Cut(k, "\x00")
		out.Violations[ViolationKind{What: what, Account: account}] += n
	}
	return out
}

// Reachable reports whether the broker whose server id is id is this one or a peer
// this broker holds a route to now. A broker that shut down or died is neither: it
// lists no connection again, and a broker that restarts comes back under a new id.
// When the routes cannot be listed it answers true, the cautious answer for a caller
// about to forget the broker's connections.
func (s *Server) Reachable(id string) bool {
	if id == s.ns.ID() {
		return true
	}
	peers, err := s.routedPeers()
	return err != nil || slices.Contains(peers, id)
}

// Peers returns the server ids of the brokers this broker holds a route to now.
func (s *Server) Peers() []string {
	peers, _ := s.routedPeers()
	return peers
}

func (s *Server) routedPeers() ([]string, error) {
	rz, err := s.ns.Routez(nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rz.Routes {
		// Route pooling opens several connections to each peer.
		if !slices.Contains(out, r.RemoteID) {
			out = append(out, r.RemoteID)
		}
	}
	return out, nil
}

// RoutedNames returns the names (the control nodes' ids) of the peer brokers this
// one has a route to now, sorted.
func (s *Server) RoutedNames() []string {
	rz, err := s.ns.Routez(nil)
	if err != nil {
		return nil
	}
	var out []string
	for _, r := range rz.Routes {
		if !slices.Contains(out, r.RemoteName) {
			out = append(out, r.RemoteName)
		}
	}
	slices.Sort(out)
	return out
}

// NumRoutes reports how many cluster routes are up.
func (s *Server) NumRoutes() int { return s.ns.NumRoutes() }

// PendingOperatorAnswers counts the operator requests that came in through this
// broker and whose answer has not gone back through it yet: nats-server keeps each
// one's way back to its requester until the answer passes. An answer comes back only
// the way its request went, so a broker that stops while one is on its way (its
// request being served by a leader elsewhere) loses it, and the operator is left
// wondering whether the change was made.
func (s *Server) PendingOperatorAnswers() int {
	acc, err := s.ns.LookupAccount(s.accounts.names[AccountControl])
	if err != nil {
		return 0
	}
	n := 0
	for _, subj := range s.answered {
		n += acc.NumPendingResponses(subj)
	}
	return n
}

// Shutdown stops the broker and closes every connection.
func (s *Server) Shutdown() {
	s.peers.Lock()
	s.closed = true
	s.peers.Unlock()
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// anyPort maps port 0 to nats-server's "pick a free port": nats-server reads 0 as
// "the default port" (4222 for clients, no listener at all for routes), which is not
// what ip:0 means anywhere else.
func anyPort(port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	return port
}

func splitHostPort(addr string) (string, int, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		h, p, err2 := net.SplitHostPort(addr)
		if err2 != nil {
			return "", 0, fmt.Errorf("%q is not ip:port", addr)
		}
		port, err3 := strconv.Atoi(p)
		if err3 != nil || port < 0 || port > 65535 {
			return "", 0, fmt.Errorf("%q has no valid port", addr)
		}
		return h, port, nil
	}
	return ap.Addr().String(), int(ap.Port()), nil
}

// Stats are the broker's own counters (nats-server's Varz).
type Stats struct {
	Connections, Routes int
	InMsgs, OutMsgs     int64
	InBytes, OutBytes   int64
	SlowConsumers       int64
}

// Stats returns the broker's counters since it started.
func (s *Server) Stats() (Stats, error) {
	v, err := s.ns.Varz(nil)
	if err != nil {
		return Stats{}, err
	}
	return Stats{Connections: v.Connections, Routes: v.Routes, InMsgs: v.InMsgs, OutMsgs: v.OutMsgs,
		InBytes: v.InBytes, OutBytes: v.OutBytes, SlowConsumers: v.SlowConsumers}, nil
}

// Capacity is what the broker was started to hold.
func (s *Server) Capacity() Capacity { return s.capacity }

// Hosts is how many hosts (enrolling, enrolled, revoked) the broker holds now, on
// this control node only.
func (s *Server) Hosts() int { return s.hook.hosts() }

// Running reports whether the broker accepts client connections.
func (s *Server) Running() bool { return s.ns.Running() }

// Traffic reports what the broker received from clients since it started: the
// connections that completed a handshake and the application bytes read from them.
func (s *Server) Traffic() (connections uint64, inBytes int64, err error) {
	v, err := s.ns.Varz(nil)
	if err != nil {
		return 0, 0, err
	}
	return v.TotalConnections, v.InBytes, nil
}
