package integration

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// heldLogin is an operator's connection that has done its TLS handshake and read
// the broker's INFO, and holds its CONNECT until told.
type heldLogin struct {
	opened time.Time
	conn   *tls.Conn
	r      *bufio.Reader
	nonce  string
}

func holdLogin(t *testing.T, addr string, pin [32]byte) *heldLogin {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, pki.PinnedClientConfig(pin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("no INFO: %q %v", line, err)
	}
	var info struct {
		Nonce string `json:"nonce"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "INFO ")), &info); err != nil || info.Nonce == "" {
		t.Fatalf("INFO without a nonce: %q %v", line, err)
	}
	return &heldLogin{opened: time.Now(), conn: conn, r: r, nonce: info.Nonce}
}

// login sends the CONNECT of the operator credentials userJWT and kp, and PING,
// and returns the broker's first answer that is no INFO.
func (l *heldLogin) login(userJWT string, kp nkeys.KeyPair) string {
	sig, err := kp.Sign([]byte(l.nonce))
	if err != nil {
		return err.Error()
	}
	connect, _ := json.Marshal(map[string]any{"jwt": userJWT, "sig": base64.RawURLEncoding.EncodeToString(sig),
		"verbose": false, "pedantic": false, "protocol": 1, "name": "held"})
	fmt.Fprintf(l.conn, "CONNECT %s\r\nPING\r\n", connect)
	for {
		line, err := l.r.ReadString('\n')
		if err != nil {
			return "closed: " + err.Error()
		}
		if !strings.HasPrefix(line, "INFO") {
			return strings.TrimSpace(line)
		}
	}
}

// TestALoginUnderWayWhileAControlNodeIsAdmittedGoesThrough: a control node's
// admission has every other node's broker reload its configuration, and nats-server
// then asks about every client it holds, one between its TLS handshake and its
// CONNECT too, with nothing presented: the broker refused it, and a meshctl, an
// enrolment or an agent connecting at that moment failed. Here operator logins are
// held there from before cp-2's join and through it, within the broker's 5 s for a
// CONNECT, and every one goes through, those held across cp-1's reload included.
func TestALoginUnderWayWhileAControlNodeIsAdmittedGoesThrough(t *testing.T) {
	t.Parallel() // mostly waits (a join): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "reloadlogin")
	serve := cp1.Serve()
	pin := pinOf(t, cp1)
	creds, err := os.ReadFile(filepath.Join(cp1.Dir, datadir.AdminCredsFile))
	if err != nil {
		t.Fatal(err)
	}
	userJWT, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	if got := holdLogin(t, cp1.Listen, pin).login(userJWT, kp); got != "PONG" {
		t.Fatalf("an operator's login before any reload: %q", got)
	}

	tok, cp2 := cp1.ControlToken("cp-2")
	const reloaded = "cluster peers changed"
	// The reload comes within a second of the join's start: logins are held from
	// before it (for up to 4 s, where the broker allows 5), and every 250 ms
	// another (for up to 2 s).
	var held []*heldLogin
	for range 4 {
		held = append(held, holdLogin(t, cp1.Listen, pin))
		time.Sleep(100 * time.Millisecond)
	}
	// Counted once they are held: a reload before would be taken for the join's.
	before := strings.Count(serve.Output(), reloaded)
	joined := time.Now()
	join := harness.StartWithInput(t, tok, bin.Meshctl, "join", "--data", cp2.Dir, "--raft-heartbeat", "300ms")
	across, logins := 0, 0
	login := func(l *heldLogin, when string) {
		t.Helper()
		if got := l.login(userJWT, kp); got != "PONG" {
			t.Errorf("an operator's login held %s before its CONNECT, %s: %q", time.Since(l.opened).Round(time.Millisecond), when, got)
		}
		logins++
	}
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(serve.Output(), reloaded) == before {
		if time.Now().After(deadline) {
			t.Fatalf("cp-1 did not reload its routes within 30 s of cp-2's join:\njoin:\n%s\nserve:\n%s", join.Output(), serve.Output())
		}
		var still []*heldLogin
		for _, l := range held {
			hold := 2 * time.Second
			if l.opened.Before(joined) {
				hold = 4 * time.Second
			}
			if time.Since(l.opened) > hold {
				login(l, "before cp-1's reload was seen")
				continue
			}
			still = append(still, l)
		}
		held = append(still, holdLogin(t, cp1.Listen, pin))
		time.Sleep(250 * time.Millisecond)
	}
	for _, l := range held {
		if l.opened.Before(joined) {
			// Held from before the join to after the reload was logged: across it.
			across++
		}
		login(l, "after cp-1's reload for cp-2's admission")
	}
	if across == 0 {
		t.Fatalf("no login was held across the reload (%d logins; the reload came %s after the join began): the test tested nothing",
			logins, time.Since(joined).Round(time.Millisecond))
	}
	t.Logf("%d logins, %d of them held across cp-1's reload", logins, across)
	if code := join.Wait(60 * time.Second); code != 0 {
		t.Errorf("join: exit %d:\n%s", code, join.Output())
	}
}
