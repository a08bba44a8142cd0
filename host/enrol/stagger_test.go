package enrol

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/wire"
)

// TestALateAttemptAtAnotherBrokerSendsNoLogin: dialEnrolment in use, not link.Lent alone
// alone. The token's first broker is the mesh's (its certificate passes the pin) and
// completes the TLS handshake at once, but holds its INFO; the second answers and
// takes the enrolment. Once Enrol returned, the first sends its INFO: the attempt
// still under way there must sign nothing and so send no CONNECT (no login, no
// token proof). Using kp.Sign instead of the lent key, or not ending the loan,
// sends one.
func TestALateAttemptAtAnotherBrokerSendsNoLogin(t *testing.T) {
	mesh := newFakeMesh(t, func(*wire.EnrolResponse) {})
	leaf, broker := mesh.leaf, mesh.broker

	// The holding broker: the mesh's certificate, its INFO held until released.
	hold, release, heard := holdingBroker(t, leaf)

	tok := withBrokersFirst(t, mesh.token, []string{hold.Addr().String()})

	var out strings.Builder
	res, err := Enrol(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tok, Out: &out,
		DialTimeout: 10 * time.Second, RequestTimeout: 5 * time.Second, DialStagger: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("enrol: %v\n%s", err, out.String())
	}
	if res.Broker != broker {
		t.Fatalf("enrolled through %s, want %s", res.Broker, broker)
	}
	close(release)
	select {
	case line := <-heard:
		if strings.HasPrefix(line, "CONNECT") {
			t.Fatalf("an attempt still under way when the enrolment had its connection sent a login: %.120s…", line)
		}
		if line != "" {
			t.Fatalf("the holding broker: %s", line)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the holding broker heard nothing and saw no close")
	}
}

// TestFaultsAreSaidInTheTokensOrder: brokers tried at once end in any order (a
// silent first broker last), and the final error says their faults in the token's
// order, as it did when they were tried one after another.
func TestFaultsAreSaidInTheTokensOrder(t *testing.T) {
	silent := silentBroker(t)
	closed := closedAddresses(t, 2)
	brokers := append([]string{silent.Addr().String()}, closed...)
	_, err := Enrol(context.Background(), Options{StateDir: filepath.Join(t.TempDir(), "state"), Token: tokenFor(brokers),
		DialTimeout: time.Second, DialStagger: 100 * time.Millisecond})
	if err == nil {
		t.Fatal("enrolled through brokers that never answer")
	}
	msg := err.Error()
	s, c := strings.Index(msg, silent.Addr().String()+": "), strings.Index(msg, "2 brokers ("+strings.Join(closed, ", ")+"): ")
	if s < 0 || c < 0 || s > c {
		t.Fatalf("the faults are not said in the token's order (%s first):\n%s", brokers[0], msg)
	}
}

// holdingBroker listens on loopback with the mesh's leaf, completes one client's
// TLS handshake and holds its INFO until release is closed; heard then gets the
// first line the client sends ("" if it closed or sent nothing for 3 s, or what
// failed before). It is closed with the test.
func holdingBroker(t *testing.T, leaf tls.Certificate) (hold net.Listener, release chan struct{}, heard chan string) {
	t.Helper()
	hold, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close() })
	release, heard = make(chan struct{}), make(chan string, 1)
	go func() {
		c, err := hold.Accept()
		if err != nil {
			heard <- "accept: " + err.Error()
			return
		}
		defer c.Close()
		if err := c.(*tls.Conn).Handshake(); err != nil {
			heard <- "handshake: " + err.Error()
			return
		}
		<-release
		fmt.Fprintf(c, "INFO {\"server_id\":\"held\",\"version\":\"2.15.2\",\"proto\":1,\"headers\":true,\"max_payload\":1048576,\"auth_required\":true,\"tls_required\":true,\"nonce\":\"abcdefghijklmnop\"}\r\n")
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			heard <- "" // closed or silent: no login
			return
		}
		heard <- line
	}()
	return hold, release, heard
}
