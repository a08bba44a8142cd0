// Package presence follows, across every broker of the mesh, which clients hold open
// connections in the hosts account. nats-server announces each connection that opens
// or closes in its system account, and the announcements cross the cluster's routes;
// a Tracker listens to them, and pages through every broker's connection list to know
// the connections that opened before it started.
//
// The control plane uses it to tell a connected host from one that merely reported
// recently, and to close the connections of a node that exceeds its budget, on
// whichever broker they are.
package presence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/logging"
)

// Conn names one client connection: the broker's server id and its connection id.
type Conn struct {
	Server string
	CID    uint64
}

// Config configures a Tracker.
type Config struct {
	// Conn is a connection in the system account allowed to hear Connect and
	// Disconnect, and to request $SYS.REQ.SERVER.*.CONNZ and .KICK.
	Conn *nats.Conn
	// Connect and Disconnect are the account's event subjects.
	Connect, Disconnect string
	// Reachable, when set, reports whether a broker, by server id, is still part of
	// the mesh (broker.Server.Reachable). Sync forgets the connections of a broker
	// that neither answered its listing nor is reachable: one that stopped or died
	// (a broker stopping sends no disconnect event for the connections it closes,
	// one dying sends nothing), or restarted under a new id.
	Reachable func(server string) bool
	// Account is the account's name, to list its connections.
	Account string
	// OnChange, when set, is called after a user's count of open connections
	// changes, with the connection that changed it and when the broker accepted it
	// (zero when not known). It runs on the events goroutine and must not block.
	OnChange func(user string, c Conn, started time.Time, opened bool, open int)
	// OnKicked, when set, is called when a connection closes because it was kicked
	// ($SYS.REQ.SERVER.<id>.KICK: the disconnect event's reason "Kicked"), on the
	// events goroutine, after OnChange; it must not block.
	OnKicked func(user string, c Conn)
	// Ignore, when set, names users not to track (the control plane's own
	// connections in the account).
	Ignore func(user string) bool
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Tracker is the cluster-wide map of open connections by authenticated user (for an
// nkey client, its public key; otherwise the user name its grant gave it).
type Tracker struct {
	cfg  Config
	subs []*nats.Subscription

	mu    sync.Mutex
	users map[string]map[Conn]time.Time // when each connection was first seen
	byID  map[Conn]string
	// addrs holds the client's address of each connection whose broker said it
	// (the IP it sees): what a node told that another machine holds its key is
	// told it is from.
	addrs   map[Conn]string
	gone    tombstones    // closed connections, so a late listing does not bring them back
	kicking map[Conn]bool // asked to close, not closed yet

	// repeats bounds the lines about kicks that could not be asked for: one a
	// connection, a revocation of 1,000 nodes during a reconnect wrote 1,000.
	repeats *logging.Limiter
}

// tombstoneFor is how long a closed connection is remembered.
const tombstoneFor = 2 * time.Minute

// tombstones remembers closed connections for tombstoneFor. They expire in the order
// they were closed, so a queue finds the expired ones without looking at the others:
// a fleet's enrolment closes 20,000 connections in half a minute, and scanning every
// tombstone on each close made that quadratic.
type tombstones struct {
	at    map[Conn]grave
	order []tombstone // oldest first; an entry whose time at no longer holds is stale
	head  int
}

type tombstone struct {
	c  Conn
	at time.Time
}

// grave is what a tombstone remembers of a closed connection.
type grave struct {
	at time.Time
	// user is the user the connection was recorded under, "" when it never was.
	user string
	// kickOwed says it was kicked before it was recorded: the first connect event
	// that comes for it names who to blame (onConnect).
	kickOwed bool
}

func (g *tombstones) has(c Conn) bool {
	_, ok := g.at[c]
	return ok
}

// add records c, recorded under user ("" if never), as closed at now and forgets
// the tombstones older than tombstoneFor. A tombstone's user and owed kick are kept
// when it is closed again.
func (g *tombstones) add(c Conn, now time.Time, user string) {
	if g.at == nil {
		g.at = map[Conn]grave{}
	}
	prior := g.at[c]
	if user == "" {
		user = prior.user
	}
	g.at[c] = grave{at: now, user: user, kickOwed: prior.kickOwed}
	g.order = append(g.order, tombstone{c, now})
	g.expire(now)
}

// expire forgets the tombstones older than tombstoneFor.
func (g *tombstones) expire(now time.Time) {
	for g.head < len(g.order) && now.Sub(g.order[g.head].at) > tombstoneFor {
		old := g.order[g.head]
		if gr, ok := g.at[old.c]; ok && gr.at.Equal(old.at) {
			delete(g.at, old.c)
		}
		g.order[g.head] = tombstone{}
		g.head++
	}
	if g.head > len(g.order)/2 {
		g.order = append(g.order[:0], g.order[g.head:]...)
		g.head = 0
	}
}

// Start subscribes to the events. Call Sync to learn the connections that opened
// before.
func Start(cfg Config) (*Tracker, error) {
	if cfg.Conn == nil || cfg.Connect == "" || cfg.Disconnect == "" {
		return nil, errors.New("presence: a system-account connection and the event subjects are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t := &Tracker{cfg: cfg, users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{},
		repeats: logging.NewLimiter(logging.RepeatInterval, cfg.Now)}
	for subj, h := range map[string]nats.MsgHandler{cfg.Connect: t.onConnect, cfg.Disconnect: t.onDisconnect} {
		sub, err := cfg.Conn.Subscribe(subj, h)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("presence: subscribe %s: %w", subj, err)
		}
		// Events come in bursts (a fleet reconnecting): never drop them.
		_ = sub.SetPendingLimits(-1, -1)
		t.subs = append(t.subs, sub)
	}
	if err := cfg.Conn.Flush(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// Close stops listening.
func (t *Tracker) Close() {
	for _, s := range t.subs {
		_ = s.Unsubscribe()
	}
}

// event is the part of nats-server's client connect and disconnect events the
// tracker reads (server.ConnectEventMsg, server.DisconnectEventMsg).
type event struct {
	Server struct {
		ID string `json:"id"`
	} `json:"server"`
	Client struct {
		ID    uint64    `json:"id"`
		User  string    `json:"user"`
		Start time.Time `json:"start"`
		Host  string    `json:"host"`
	} `json:"client"`
	// Reason is why a connection closed (a disconnect event's).
	Reason string `json:"reason"`
}

// reasonKicked is a disconnect event's reason for a connection closed by
// $SYS.REQ.SERVER.<id>.KICK (nats-server's ClosedState Kicked).
const reasonKicked = "Kicked"

// decode reads a connection event; a disconnect event (needUser false) may name no
// user: the tracker blames the user it recorded.
func (t *Tracker) decode(m *nats.Msg, needUser bool) (Conn, string, time.Time, string, string, bool) {
	var e event
	if err := json.Unmarshal(m.Data, &e); err != nil || e.Server.ID == "" || (needUser && e.Client.User == "") {
		t.cfg.Logger.Warn("connection event not understood", "subject", m.Subject, "err", err)
		return Conn{}, "", time.Time{}, "", "", false
	}
	return Conn{Server: e.Server.ID, CID: e.Client.ID}, e.Client.User, e.Client.Start, e.Client.Host, e.Reason, true
}

func (t *Tracker) onConnect(m *nats.Msg) {
	c, user, started, addr, _, ok := t.decode(m, true)
	if !ok {
		return
	}
	n, added := t.add(user, c, addr, t.cfg.Now())
	if added && t.cfg.OnChange != nil {
		t.cfg.OnChange(user, c, started, true, n)
	}
	// Kicked before this event was handled (the two kinds of event come on two
	// subscriptions, each on its goroutine): the connect event names the user it
	// logged in as, the first one for the connection.
	if !added && t.kickOwedTo(c) && t.cfg.OnKicked != nil {
		t.cfg.OnKicked(user, c)
	}
}

// kickOwedTo says whether c was kicked before it was recorded, and forgets it: the
// caller blames the user of the first connect event for it.
func (t *Tracker) kickOwedTo(c Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	g, ok := t.gone.at[c]
	if !ok || !g.kickOwed {
		return false
	}
	g.kickOwed = false
	t.gone.at[c] = g
	return true
}

// onDisconnect takes the closed connection for the user it was recorded under, not
// the one its event names: nats-server names the user its options hold at the
// close, and a host that sends CONNECT again on its live connection, naming another
// node's key, has them hold that key until its CONNECT is refused. Kicked then (for
// its own budget), the event blamed the other node, whose key this broker refused
// for a while (a review: one kick in six at a random moment). A kicked connection
// no longer recorded (a listing dropped it first) is blamed on the user its
// tombstone keeps; one not recorded yet, on the user its connect event names when
// it comes (onConnect).
func (t *Tracker) onDisconnect(m *nats.Msg) {
	c, _, started, _, reason, ok := t.decode(m, false)
	if !ok {
		return
	}
	user, n, removed := t.remove(c, t.cfg.Now())
	if removed && t.cfg.OnChange != nil {
		t.cfg.OnChange(user, c, started, false, n)
	}
	if reason != reasonKicked || t.cfg.OnKicked == nil {
		return
	}
	if user != "" {
		t.cfg.OnKicked(user, c)
		return
	}
	t.mu.Lock()
	if g, ok := t.gone.at[c]; ok {
		g.kickOwed = true
		t.gone.at[c] = g
	}
	t.mu.Unlock()
}

// forgetServer drops every connection of broker server, as closed, and returns how
// many it dropped. No tombstone is kept: a listing never names a broker's old id
// again, and a broker only cut off for a while lists its connections again when it
// is back, which must bring them back.
func (t *Tracker) forgetServer(server string) int {
	type closed struct {
		user string
		c    Conn
		open int
	}
	var gone []closed
	t.mu.Lock()
	for c, user := range t.byID {
		if c.Server != server {
			continue
		}
		delete(t.byID, c)
		delete(t.kicking, c)
		delete(t.addrs, c)
		set := t.users[user]
		delete(set, c)
		if len(set) == 0 {
			delete(t.users, user)
		}
		gone = append(gone, closed{user, c, len(set)})
	}
	t.mu.Unlock()
	if t.cfg.OnChange != nil {
		for _, g := range gone {
			t.cfg.OnChange(g.user, g.c, time.Time{}, false, g.open)
		}
	}
	return len(gone)
}

// add records c, user's connection from addr ("" when not known), as first seen at
// now, unless it is known or closed already.
func (t *Tracker) add(user string, c Conn, addr string, now time.Time) (int, bool) {
	if t.cfg.Ignore != nil && t.cfg.Ignore(user) {
		return 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gone.has(c) {
		return len(t.users[user]), false
	}
	if _, known := t.byID[c]; known {
		if addr != "" && t.addrs[c] == "" {
			// An event that did not say it; a listing does.
			if t.addrs == nil {
				t.addrs = map[Conn]string{}
			}
			t.addrs[c] = addr
		}
		return len(t.users[user]), false
	}
	set := t.users[user]
	if set == nil {
		set = map[Conn]time.Time{}
		t.users[user] = set
	}
	set[c] = now
	t.byID[c] = user
	if addr != "" {
		if t.addrs == nil {
			t.addrs = map[Conn]string{}
		}
		t.addrs[c] = addr
	}
	return len(set), true
}

// remove forgets c as closed at now, and returns the user it was recorded under (or,
// closed already, its tombstone's; "" if never recorded) and how many connections
// that user still holds; removed is false when c was not open.
func (t *Tracker) remove(c Conn, now time.Time) (user string, open int, removed bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.kicking, c)
	user, ok := t.byID[c]
	t.gone.add(c, now, user)
	if !ok {
		return t.gone.at[c].user, 0, false
	}
	delete(t.byID, c)
	delete(t.addrs, c)
	set := t.users[user]
	delete(set, c)
	if len(set) == 0 {
		delete(t.users, user)
	}
	return user, len(set), true
}

// Open returns how many connections user holds open, cluster-wide.
func (t *Tracker) Open(user string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.users[user])
}

// Count returns how many connections are open, cluster-wide.
func (t *Tracker) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// Stranded returns the brokers whose connections the tracker counts though they
// are not reachable (Config.Reachable): gone, and counted until a listing (Sync)
// forgets them. nil without Config.Reachable.
func (t *Tracker) Stranded() []string {
	if t.cfg.Reachable == nil {
		return nil
	}
	servers := map[string]bool{}
	t.mu.Lock()
	for c := range t.byID {
		servers[c.Server] = true
	}
	t.mu.Unlock()
	var out []string
	for s := range servers {
		if !t.cfg.Reachable(s) {
			out = append(out, s)
		}
	}
	return out
}

// Expire forgets the closed connections remembered longer than tombstoneFor. A
// close forgets them too; Expire is for a mesh where none closes for a while.
func (t *Tracker) Expire() {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone.expire(now)
}

// Remembered returns how many connections the tracker holds open and how many
// closed ones it remembers (for tombstoneFor), for the figures of what a control
// node keeps in memory.
func (t *Tracker) Remembered() (open, closed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID), len(t.gone.at)
}

// Since returns when the oldest of user's open connections was first seen, if any.
func (t *Tracker) Since(user string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	for _, at := range t.users[user] {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// Holder is one of a user's open connections: where it is, from where, and since
// when the tracker knows of it.
type Holder struct {
	Conn
	// Addr is the client's address as its broker sees it (an IP), "" when the
	// broker did not say.
	Addr string
	// Since is when the tracker first saw the connection: its start, or the
	// tracker's if the connection was open before.
	Since time.Time
}

// Holders returns user's open connections, the oldest first.
func (t *Tracker) Holders(user string) []Holder {
	t.mu.Lock()
	out := make([]Holder, 0, len(t.users[user]))
	for c, at := range t.users[user] {
		out = append(out, Holder{Conn: c, Addr: t.addrs[c], Since: at})
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b Holder) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return cmp.Compare(a.CID, b.CID)
	})
	return out
}

// SharedSince returns since when user has held more than one connection at once:
// when the second oldest of its open connections was first seen. ok is false while
// it holds one or none. A connection that closed and was replaced meanwhile starts
// the count again from its replacement, so the time is never earlier than the
// truth: an agent's reconnection whose old connection its broker has not seen end
// yet holds two for as long as the broker takes to notice (a client silent for
// three pings), and a second machine holding the key holds two for good.
func (t *Tracker) SharedSince(user string) (since time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	set := t.users[user]
	if len(set) < 2 {
		return time.Time{}, false
	}
	var first, second time.Time
	for _, at := range set {
		switch {
		case first.IsZero() || at.Before(first):
			first, second = at, first
		case second.IsZero() || at.Before(second):
			second = at
		}
	}
	return second, true
}

// Users returns every user with at least one open connection.
func (t *Tracker) Users() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.users))
	for u := range t.users {
		out = append(out, u)
	}
	return out
}

// Kick asks the broker holding each of user's connections to close it, once per
// connection however often it is called before the connection is gone, and returns
// how many it asked for now and how many user holds open.
func (t *Tracker) Kick(user string) (asked, open int) {
	t.mu.Lock()
	var conns []Conn
	for c := range t.users[user] {
		if !t.kicking[c] {
			conns = append(conns, c)
		}
	}
	open = len(t.users[user])
	t.mu.Unlock()
	for _, c := range conns {
		t.KickConn(c)
	}
	return len(conns), open
}

// KickConn asks the broker holding c to close it (nats-server's
// $SYS.REQ.SERVER.<id>.KICK); the disconnect event follows.
func (t *Tracker) KickConn(c Conn) {
	t.mu.Lock()
	if _, known := t.byID[c]; known {
		t.kicking[c] = true
	}
	t.mu.Unlock()
	data, _ := json.Marshal(struct {
		CID uint64 `json:"cid"`
	}{c.CID})
	// nats-server acts on a system request only when it names a reply subject; the
	// answer is not needed.
	if err := t.cfg.Conn.PublishRequest("$SYS.REQ.SERVER."+c.Server+".KICK", t.cfg.Conn.NewRespInbox(), data); err != nil {
		// At most one line an interval (its count of those held back with the
		// next): the connection failing, every kick of a revocation fails with it.
		t.repeats.Log(context.Background(), t.cfg.Logger, slog.LevelWarn, "presence", "kick not sent",
			"could not ask a broker to close a connection", slog.String("server", c.Server), slog.Uint64("cid", c.CID), slog.Any("err", err))
	}
}

// connzPage is the part of a broker's answer to $SYS.REQ.SERVER.*.CONNZ the tracker
// reads (server.ServerAPIResponse carrying a server.Connz).
type connzPage struct {
	Server struct {
		ID string `json:"id"`
	} `json:"server"`
	Data struct {
		Total int `json:"total"`
		Conns []struct {
			CID  uint64 `json:"cid"`
			User string `json:"authorized_user"`
			IP   string `json:"ip"`
		} `json:"connections"`
	} `json:"data"`
	Error *struct {
		Description string `json:"description"`
	} `json:"error"`
}

// pageSize keeps one broker's page of connections well inside a message.
const pageSize = 1000

// Sync lists the open connections of every broker (servers of them are expected to
// answer) and makes the tracker agree with the listing: connections it did not know
// are added, and connections it knew from before the listing started that no broker
// listed are dropped (their disconnect event was missed). The connections of a broker
// that did not answer are kept while it is reachable (Config.Reachable), and
// forgotten once it is not: it stopped or died, or restarted under a new server id.
func (t *Tracker) Sync(ctx context.Context, servers int) error {
	started := t.cfg.Now()
	listed := map[Conn]listing{}
	pages, err := t.ping(ctx, 0, servers)
	if err != nil {
		return err
	}
	answered := map[string]bool{}
	for _, p := range pages {
		answered[p.Server.ID] = true
		t.collect(p, listed)
		for off := len(p.Data.Conns); off < p.Data.Total; off += pageSize {
			next, err := t.page(ctx, p.Server.ID, off)
			if err != nil {
				return err
			}
			t.collect(next, listed)
			if len(next.Data.Conns) == 0 {
				break
			}
		}
	}
	now := t.cfg.Now()
	t.mu.Lock()
	var dropped []Conn
	// A broker that did not answer is slow, or gone: its connections are forgotten
	// only when it is gone from the mesh.
	silent := map[string]bool{}
	for c, user := range t.byID {
		if !t.users[user][c].Before(started) {
			continue
		}
		if _, ok := listed[c]; !ok && answered[c.Server] {
			dropped = append(dropped, c)
		} else if !answered[c.Server] {
			silent[c.Server] = true
		}
	}
	t.mu.Unlock()
	for _, c := range dropped {
		t.remove(c, now)
	}
	for server := range silent {
		if t.cfg.Reachable == nil || t.cfg.Reachable(server) {
			continue
		}
		if n := t.forgetServer(server); n > 0 {
			t.cfg.Logger.Info("a broker is gone from the mesh; its connections are no longer counted", "server", server, "connections", n)
		}
	}
	for c, l := range listed {
		if n, added := t.add(l.user, c, l.addr, now); added && t.cfg.OnChange != nil {
			t.cfg.OnChange(l.user, c, time.Time{}, true, n)
		}
	}
	if len(answered) < servers {
		return fmt.Errorf("presence: %d of %d brokers listed their connections", len(answered), servers)
	}
	return nil
}

// listing is a connection as a broker's listing names it.
type listing struct{ user, addr string }

func (t *Tracker) collect(p connzPage, into map[Conn]listing) {
	for _, c := range p.Data.Conns {
		if c.User != "" {
			into[Conn{Server: p.Server.ID, CID: c.CID}] = listing{c.User, c.IP}
		}
	}
}

func (t *Tracker) request(offset int) []byte {
	data, _ := json.Marshal(map[string]any{"acc": t.cfg.Account, "auth": true, "state": 0, "offset": offset, "limit": pageSize})
	return data
}

// ping asks every broker for its first page and gathers the answers until servers of
// them answered or a second passed without a new one.
func (t *Tracker) ping(ctx context.Context, offset, servers int) ([]connzPage, error) {
	inbox := t.cfg.Conn.NewRespInbox()
	sub, err := t.cfg.Conn.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := t.cfg.Conn.PublishRequest("$SYS.REQ.SERVER.PING.CONNZ", inbox, t.request(offset)); err != nil {
		return nil, err
	}
	var out []connzPage
	for len(out) < servers {
		wait, cancel := context.WithTimeout(ctx, time.Second)
		m, err := sub.NextMsgWithContext(wait)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			break // the brokers that answer have answered
		}
		var p connzPage
		if err := json.Unmarshal(m.Data, &p); err != nil || p.Error != nil || p.Server.ID == "" {
			t.cfg.Logger.Warn("a broker's connection list was not understood", "err", err)
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func (t *Tracker) page(ctx context.Context, server string, offset int) (connzPage, error) {
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := t.cfg.Conn.RequestWithContext(wait, "$SYS.REQ.SERVER."+server+".CONNZ", t.request(offset))
	if err != nil {
		return connzPage{}, fmt.Errorf("presence: list the connections of broker %s: %w", server, err)
	}
	var p connzPage
	if err := json.Unmarshal(m.Data, &p); err != nil || p.Error != nil {
		return connzPage{}, fmt.Errorf("presence: broker %s answered a listing that is not understood: %v", server, err)
	}
	return p, nil
}
