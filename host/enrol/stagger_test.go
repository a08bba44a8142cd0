package enrol

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash/crc32"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/host/wire"
)

// TestALateAttemptAtAnotherBrokerSendsNoLogin: dialEnrolment in use, not lentKey
// alone. The token's first broker is the mesh's (its certificate passes the pin) and
// completes the TLS handshake at once, but holds its INFO; the second answers and
// takes the enrolment. Once Enrol returned, the first sends its INFO: the attempt
// still under way there must sign nothing and so send no CONNECT (no login, no
// token proof). Using kp.Sign instead of the lent key, or not ending the loan,
// sends one.
func TestALateAttemptAtAnotherBrokerSendsNoLogin(t *testing.T) {
	caDER, leaf := meshCertificates(t)
	ca, _ := x509.ParseCertificate(caDER)
	pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)

	// The mesh's answering broker.
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSHandshakeFirst: true, AlwaysEnableNonce: true,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	broker := s.Addr().(*net.TCPAddr).String()
	_, signing, _ := ed25519.GenerateKey(rand.Reader)
	nc, err := nats.Connect("tls://"+broker, nats.Secure(&tls.Config{InsecureSkipVerify: true}), nats.TLSHandshakeFirst()) //nolint:gosec // the test's own broker
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	if _, err := nc.Subscribe("mesh.enrol.web-1.*", func(m *nats.Msg) {
		var req wire.EnrolRequest
		if json.Unmarshal(m.Data, &req) != nil {
			return
		}
		data, _ := json.Marshal(signedAnswer(t, signing, req.PublicKey, caPEM, broker, 0))
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// The holding broker: the mesh's certificate, its INFO held until released.
	hold, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hold.Close() })
	release := make(chan struct{})
	heard := make(chan string, 1)
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

	var secret [32]byte
	rand.Read(secret[:])
	signed := fmt.Sprintf("mesh1_demo_%s,%s_%x_%x_web-1_worker_%d_%x", hold.Addr(), broker, pin, signing.Public(), time.Now().Add(30*time.Minute).Unix(), secret)
	tok := fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))

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
