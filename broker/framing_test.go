package broker

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/framing/framingtest"
)

// TestHostileBrokerCannotCrashTheClient: the control plane's own clients (meshctl as
// an operator, join, a starting node asking the others whether it was removed) dial
// through BoundDialer. A broker passing their CA check that announces a message
// nats.go would size a buffer by, or a line without end, has the connection closed;
// without the guard one line killed the process (runtime: out of memory).
func TestHostileBrokerCannotCrashTheClient(t *testing.T) {
	for name, hostile := range framingtest.Hostile {
		t.Run(name, func(t *testing.T) {
			addr, ca := framingtest.Broker(t, hostile)
			roots := x509.NewCertPool()
			roots.AddCert(ca)
			d := &BoundDialer{TLS: &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, ServerName: "127.0.0.1"}, Timeout: 5 * time.Second}
			closed := make(chan error, 1)
			nc, err := nats.Connect("tls://"+addr, nats.SetCustomDialer(d), nats.TLSHandshakeFirst(), nats.NoReconnect(),
				nats.ClosedHandler(func(nc *nats.Conn) { closed <- nc.LastError() }))
			framingtest.ExpectRefused(t, nc, err, closed)
		})
	}
}
