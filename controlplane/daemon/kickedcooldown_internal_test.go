package daemon

import (
	"testing"

	"mesh/controlplane/presence"
)

// TestAShedStartsNoCooldown: a live node's connection closed as kicked on this
// control node's broker starts the key's cooldown (decision 0038), one on another
// broker does not (that broker's control node starts its own), and none does while
// this broker sheds its hosts (decision 0023), which closes every host's connection
// that way: its hosts were refused again for a while once it admitted them, logged as
// disconnected for their budget (a review).
func TestAShedStartsNoCooldown(t *testing.T) {
	d := fleet(t, 0)
	kp := enrolledKey(t, d, "web")
	key, _ := kp.PublicKey()
	own := d.broker.InProcess().ID()
	cooling := func() int { return d.authn.Entries().NodeCooldowns }

	d.connectionKicked(key, presence.Conn{Server: "another-broker", CID: 7})
	if n := cooling(); n != 0 {
		t.Fatalf("a connection kicked on another broker started %d cooldown(s) here", n)
	}
	if _, err := d.broker.Shed(); err != nil {
		t.Fatal(err)
	}
	d.connectionKicked(key, presence.Conn{Server: own, CID: 8})
	if n := cooling(); n != 0 {
		t.Fatalf("a connection closed while this broker shed its hosts started %d cooldown(s)", n)
	}
	d.broker.Unshed()
	d.connectionKicked(key, presence.Conn{Server: own, CID: 9})
	if n := cooling(); n != 1 {
		t.Fatalf("a connection kicked on this broker started %d cooldown(s), want 1", n)
	}
}
