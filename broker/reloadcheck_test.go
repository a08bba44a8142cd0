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
// removed failed. Such a client is now let be by the reload, and its CONNECT
// decides it as any login: the authenticator is asked about it once, at its
// CONNECT, not as a recheck. A client logged in before is asked about at the
// reload, as a recheck.
func TestAReloadKeepsAClientThatHasNotLoggedInYet(t *testing.T) {
	m := newMesh(t)
	a, b := controlNodeOf(t, m.ca, "cp-a", m.leaf), newControlNode(t, m.ca, "cp-b")
	auth := byToken(accountGrants())
	s, _ := startClustered(t, m, auth, a, freePorts(t, 1)[0], nil, []string{a.pin})
	const login = `CONNECT {"auth_token":%q,"verbose":false,"pedantic":false,"protocol":1}` + "\r\n"
	before := dialRaw(t, s, m.ca.Pin())
	if got := before.send(fmt.Sprintf(login, "cp-hosts")); got != "PONG" {
		t.Fatalf("a login before the reload: %q", got)
	}
	pending := dialRaw(t, s, m.ca.Pin())
	refused := dialRaw(t, s, m.ca.Pin())
	if err := s.SetClusterPeers([]string{a.pin, b.pin}, nil); err != nil {
		t.Fatal(err)
	}
	if calls := auth.calls(); len(calls) != 2 || !calls[1].Recheck || calls[1].Token != "cp-hosts" {
		t.Errorf("the authenticator was asked %+v, want the login before the reload and its recheck: nothing about clients that had not logged in", calls)
	}
	if got := pending.send(fmt.Sprintf(login, "host")); got != "PONG" {
		t.Fatalf("a client that connected before the reload and logged in after it: %q, want PONG", got)
	}
	if got := pending.send("SUB mesh.node.a.decl 1\r\n"); got != "PONG" {
		t.Errorf("a client let be by the reload and granted at its CONNECT may not subscribe its subject: %q", got)
	}
	if got := refused.send(fmt.Sprintf(login, "nobody")); !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a client let be by the reload with a credential the authenticator refuses: %q, want refused", got)
	}
	if calls := auth.calls(); len(calls) != 4 || calls[2].Recheck || calls[3].Recheck {
		t.Errorf("the authenticator was asked %+v, want once more for each CONNECT, neither a recheck", calls)
	}
}

// TestAConnectDuringAReloadIsALogin: while the broker reloads, a CONNECT is still
// a login: one presenting nothing is refused (the hook cannot tell it by its
// options from a client that has not logged in, which a reload lets be). A second
// CONNECT during a reload is TestAConnectIsNeverARecheck's.
func TestAConnectDuringAReloadIsALogin(t *testing.T) {
	m := newMesh(t)
	auth := byToken(accountGrants())
	s, _ := start(t, m, auth)
	defer broker.HoldReload(s)()
	if got := dialRaw(t, s, m.ca.Pin()).send("CONNECT {}\r\n"); !strings.Contains(got, "Authorization Violation") {
		t.Errorf("a CONNECT presenting nothing during a reload: %q, want refused", got)
	}
	for _, c := range auth.calls() {
		if c.Recheck {
			t.Errorf("a CONNECT during a reload was passed as a recheck: %+v", c)
		}
	}
}
