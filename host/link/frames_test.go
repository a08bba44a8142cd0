package link

import (
	"crypto/sha256"
	"testing"

	"github.com/nats-io/nats.go"

	"mesh/host/framing/framingtest"
)

// TestHostileBrokerCannotCrashTheConnection: a broker whose leaf chains to the
// pinned CA (a removed control node on the path, say) answers the login and then
// announces a message of 99999999999999999999 bytes. nats.go would have sized a
// buffer by it and panicked in its read loop, taking the agent down at every
// restart; the connection is closed instead, and the client lives on.
func TestHostileBrokerCannotCrashTheConnection(t *testing.T) {
	for name, hostile := range framingtest.Hostile {
		t.Run(name, func(t *testing.T) {
			addr, ca := framingtest.Broker(t, hostile)
			pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
			o := nats.GetDefaultOptions()
			o.Url = "tls://" + addr
			o.AllowReconnect = false
			closed := make(chan error, 1)
			o.ClosedCB = func(nc *nats.Conn) { closed <- nc.LastError() }
			for _, opt := range (Login{Pin: pin, PublicKey: "UNODE", Sign: func([]byte) ([]byte, error) { return []byte("sig"), nil }}).Options() {
				if err := opt(&o); err != nil {
					t.Fatal(err)
				}
			}
			nc, err := o.Connect()
			framingtest.ExpectRefused(t, nc, err, closed)
		})
	}
}
