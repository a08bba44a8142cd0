package presence

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// disconnectEvent is nats-server's disconnect event for connection cid on server,
// naming user, closed for reason.
func disconnectEvent(t *testing.T, server string, cid uint64, user, reason string) *nats.Msg {
	t.Helper()
	var e event
	e.Server.ID, e.Client.ID, e.Client.User, e.Reason = server, cid, user, reason
	data, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return &nats.Msg{Subject: "$SYS.ACCOUNT.A.DISCONNECT", Data: data}
}

// connectEvent is nats-server's connect event for connection cid on server, naming user.
func connectEvent(t *testing.T, server string, cid uint64, user string) *nats.Msg {
	t.Helper()
	m := disconnectEvent(t, server, cid, user, "")
	m.Subject = "$SYS.ACCOUNT.A.CONNECT"
	return m
}

// TestAClosedConnectionIsBlamedOnTheUserItWasRecordedUnder: nats-server's
// disconnect event names the user the connection's options hold at its close. A
// host that sends CONNECT again on its live connection, naming another node's key,
// has them hold that key until the CONNECT is refused: kicked meanwhile (for its
// own budget), the event named the other node, whose key the broker then refused
// for a while (OnKicked: authn.Kicked). The tracker tells the connection's close,
// and its kick, under the user it recorded the connection for: open, or closed
// already (a listing dropped it before its event came, and its tombstone keeps
// the user), or, kicked before its connect event was handled (the two kinds come on
// two subscriptions), the user that connect event names, once.
func TestAClosedConnectionIsBlamedOnTheUserItWasRecordedUnder(t *testing.T) {
	type call struct {
		user   string
		opened bool
		open   int
	}
	var changed, kicked []call
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{},
		cfg: Config{Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler),
			OnChange: func(user string, _ Conn, _ time.Time, opened bool, open int) {
				changed = append(changed, call{user, opened, open})
			},
			OnKicked: func(user string, _ Conn) { kicked = append(kicked, call{user: user}) }}}
	tr.add("UATTACKER", Conn{Server: "S1", CID: 7}, "", t0)
	tr.add("UATTACKER", Conn{Server: "S1", CID: 8}, "", t0)

	tr.onDisconnect(disconnectEvent(t, "S1", 7, "UVICTIM", reasonKicked))
	if len(kicked) != 1 || kicked[0].user != "UATTACKER" {
		t.Errorf("a kick of the attacker's connection, its event naming the victim's key, was blamed on %+v; want the attacker", kicked)
	}
	if len(changed) != 1 || changed[0] != (call{"UATTACKER", false, 1}) {
		t.Errorf("the close was told as %+v; want the attacker's, one connection left", changed)
	}
	if tr.Open("UVICTIM") != 0 || tr.Open("UATTACKER") != 1 {
		t.Errorf("open: victim %d, attacker %d; want 0 and 1", tr.Open("UVICTIM"), tr.Open("UATTACKER"))
	}

	// Dropped by a listing before its kick's event came.
	kicked, changed = nil, nil
	tr.remove(Conn{Server: "S1", CID: 8}, t0)
	tr.onDisconnect(disconnectEvent(t, "S1", 8, "UVICTIM", reasonKicked))
	if len(kicked) != 1 || kicked[0].user != "UATTACKER" || len(changed) != 0 {
		t.Errorf("a kick of a connection a listing dropped first: kicked %+v, changed %+v; want the attacker blamed, no change told", kicked, changed)
	}

	// Kicked before its connect event was handled: blamed on the user that event
	// names, once; a later connect event for it (a reload's) changes nothing.
	kicked = nil
	tr.onDisconnect(disconnectEvent(t, "S1", 9, "", reasonKicked))
	if len(kicked) != 0 {
		t.Errorf("a kick of a connection not recorded yet was blamed at once on %+v", kicked)
	}
	tr.onConnect(connectEvent(t, "S1", 9, "UATTACKER"))
	tr.onConnect(connectEvent(t, "S1", 9, "UVICTIM"))
	if len(kicked) != 1 || kicked[0].user != "UATTACKER" {
		t.Errorf("a kick of a connection recorded after it was blamed on %+v; want the attacker, once", kicked)
	}
	if tr.Open("UATTACKER") != 0 || tr.Open("UVICTIM") != 0 {
		t.Errorf("a connection kicked before its connect event came is counted open: attacker %d, victim %d", tr.Open("UATTACKER"), tr.Open("UVICTIM"))
	}

	// A close whose event names no user (a second CONNECT cleared it) is still a close.
	changed = nil
	tr.add("UATTACKER", Conn{Server: "S1", CID: 10}, "", t0)
	tr.onDisconnect(disconnectEvent(t, "S1", 10, "", "Client Closed"))
	if tr.Open("UATTACKER") != 0 || len(changed) != 1 || changed[0].user != "UATTACKER" {
		t.Errorf("a close whose event names no user: open %d, changed %+v; want closed, told as the attacker's", tr.Open("UATTACKER"), changed)
	}
}
