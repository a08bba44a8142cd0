package presence

import (
	"encoding/json"
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

// TestAClosedConnectionIsBlamedOnTheUserItWasRecordedUnder: nats-server's
// disconnect event names the user the connection's options hold at its close. A
// host that sends CONNECT again on its live connection, naming another node's key,
// has them hold that key until the CONNECT is refused: kicked meanwhile (for its
// own budget), the event named the other node, whose key the broker then refused
// for a while (OnKicked: authn.Kicked). The tracker tells the connection's close,
// and its kick, under the user it recorded the connection for; a connection it
// never recorded is nobody's to blame.
func TestAClosedConnectionIsBlamedOnTheUserItWasRecordedUnder(t *testing.T) {
	type call struct {
		user   string
		opened bool
		open   int
	}
	var changed, kicked []call
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	tr := &Tracker{users: map[string]map[Conn]time.Time{}, byID: map[Conn]string{}, kicking: map[Conn]bool{},
		cfg: Config{Now: func() time.Time { return t0 },
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

	tr.onDisconnect(disconnectEvent(t, "S1", 99, "UVICTIM", reasonKicked))
	if len(kicked) != 1 || len(changed) != 1 {
		t.Errorf("the kick of a connection never recorded was told: kicked %+v, changed %+v", kicked, changed)
	}
}
