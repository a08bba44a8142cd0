package broker_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"mesh/broker"
	"mesh/controlplane/pki"
)

// rawLogin is a client that has finished its TLS handshake and read the broker's
// INFO, and has not sent its CONNECT yet.
type rawLogin struct {
	conn *tls.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, s *broker.Server, pin [32]byte) *rawLogin {
	t.Helper()
	conn, err := tls.Dial("tcp", s.Addr(), pki.PinnedClientConfig(pin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	if info, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(info, "INFO") {
		t.Fatalf("no INFO: %q %v", info, err)
	}
	return &rawLogin{conn: conn, r: r}
}

// send writes protocol lines and PING, reads the answer up to the PONG, and returns
// its first line that is neither INFO nor +OK (a client that sent no options is
// verbose), or what closed the connection.
func (l *rawLogin) send(lines ...string) string {
	fmt.Fprintf(l.conn, "%sPING\r\n", strings.Join(lines, ""))
	first := ""
	for {
		line, err := l.r.ReadString('\n')
		if err != nil {
			return "closed: " + err.Error()
		}
		line = strings.TrimSpace(line)
		if first == "" && !strings.HasPrefix(line, "INFO") && line != "+OK" {
			first = line
		}
		if line == "PONG" || strings.Contains(line, "Authorization Violation") {
			return first
		}
	}
}

// TestAReloadKeepsAClientThatHasNotLoggedInYet: nats-server asks the authenticator
// again about every client at a reload, those that have not sent their CONNECT yet
// too, with nothing to decide on; the broker refused them, and a meshctl, an
// enrolment or an agent that connected while a control node was admitted or
// removed failed. Such a client is now let through the reload, and its CONNECT
// decides it as any login: the authenticator is asked once, at its CONNECT, and
// the client keeps what it was granted there.
func TestAReloadKeepsAClientThatHasNotLoggedInYet(t *testing.T) {
	m := newMesh(t)
	a, b := controlNodeOf(t, m.ca, "cp-a", m.leaf), newControlNode(t, m.ca, "cp-b")
	auth := byToken(accountGrants())
	s, _ := startClustered(t, m, auth, a, freePorts(t, 1)[0], nil, []string{a.pin})
	pending := dialRaw(t, s, m.ca.Pin())
	refused := dialRaw(t, s, m.ca.Pin())
	if err := s.SetClusterPeers([]string{a.pin, b.pin}, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(auth.calls()); n != 0 {
		t.Errorf("the authenticator was asked %d times at the reload, about clients that had sent nothing to decide on", n)
	}
	if got := pending.send(`CONNECT {"auth_token":"host","verbose":false,"pedantic":false,"protocol":1}` + "\r\n"); got != "PONG" {
		t.Fatalf("a client that connected before the reload and logged in after it: %q, want PONG", got)
	}
	if got := refused.send(`CONNECT {"auth_token":"nobody","verbose":false,"pedantic":false,"protocol":1}` + "\r\n"); !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a client let through the reload with a credential the authenticator refuses: %q, want refused", got)
	}
	if calls := auth.calls(); len(calls) != 2 || calls[0].Recheck || calls[1].Recheck {
		t.Errorf("the authenticator was asked %+v, want once for each CONNECT, neither a recheck", calls)
	}
	// The broker's later check closes the clients let through that were never
	// asked about again: not this one, decided at its CONNECT.
	broker.CloseUnaskedLogins(s)
	if got := pending.send("SUB mesh.node.a.decl 1\r\n"); got != "PONG" {
		t.Errorf("a client let through the reload and granted at its CONNECT: %q after the broker's check, want PONG", got)
	}
}

// TestABareConnectDuringAReloadGetsNothingAndIsClosed: the broker cannot tell a
// reload asking about a client that has not logged in yet from a CONNECT that
// presents nothing (nats-server's options for the client are the same), so such a
// CONNECT decided during a reload is let through. It may do nothing there (no
// subscription, no publication), and the broker closes it once any client let
// through could have logged in, counting and logging it; a client let through that
// logs in afterwards is decided by its CONNECT and keeps its grant. Outside a
// reload, a CONNECT presenting nothing is refused.
func TestABareConnectDuringAReloadGetsNothingAndIsClosed(t *testing.T) {
	m := newMesh(t)
	auth := byToken(accountGrants())
	s, logs := start(t, m, auth)
	const bare = "CONNECT {}\r\n"
	if got := dialRaw(t, s, m.ca.Pin()).send(bare); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("a CONNECT presenting nothing, outside a reload: %q, want refused", got)
	}

	pending := dialRaw(t, s, m.ca.Pin())
	release := broker.HoldReload(s)
	bareConn := dialRaw(t, s, m.ca.Pin())
	if got := bareConn.send(bare); got != "PONG" {
		t.Fatalf("a CONNECT presenting nothing during a reload: %q, want let through", got)
	}
	for _, op := range []string{"SUB mesh.node.a.decl 1\r\n", "PUB mesh.node.a.status 1\r\nx\r\n"} {
		if got := bareConn.send(op); !strings.Contains(got, "Permissions Violation") {
			t.Errorf("%q from a client let through a reload: %q, want a permissions violation", strings.Fields(op)[:2], got)
		}
	}
	release()
	if got := pending.send(`CONNECT {"auth_token":"host","verbose":false,"pedantic":false,"protocol":1}` + "\r\n"); got != "PONG" {
		t.Fatalf("a client let through a reload logging in after it: %q, want PONG", got)
	}
	if got := pending.send("SUB mesh.node.a.decl 1\r\n"); got != "PONG" {
		t.Errorf("a client let through a reload and granted at its CONNECT may not subscribe its subject: %q", got)
	}

	broker.CloseUnaskedLogins(s)
	bareConn.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got := bareConn.send(""); !strings.HasPrefix(got, "closed") {
		t.Errorf("a client let through a reload with a CONNECT presenting nothing is still open after the broker's check: %q", got)
	}
	if got := pending.send(""); got != "PONG" {
		t.Errorf("a client that logged in after the reload was closed by the broker's check: %q", got)
	}
	if n := s.EventCounts().Refused["no_login_at_reload"]; n != 1 {
		t.Errorf("refusals counted no_login_at_reload %d times, want 1", n)
	}
	if !strings.Contains(logs.String(), "while the broker reloaded its configuration") {
		t.Errorf("the broker's log does not say why it closed the connection:\n%s", logs)
	}
}
