package broker_test

import (
	"crypto/tls"
	"mesh/host/redact/redacttest"
	"net"
	"strings"
	"testing"

	"mesh/broker"
)

// TestClientCredentialsNeverPrinted (audit of secrets, finding 4): a Client
// printed with any verb, logged with slog or marshalled to JSON, itself or held in
// another struct, shows none of its credentials.
func TestClientCredentialsNeverPrinted(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      any
		public string // shown all the same
	}{
		{"Client", broker.Client{
			Username: "enrol:web-1", Password: redacttest.Marker, Token: redacttest.Marker, Nkey: "UPUBLICNKEY", JWT: redacttest.Marker,
			Sig: "c2ln", Name: "meshhost", Nonce: []byte("nonce"), Binding: []byte("binding"),
			Remote: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4222}, TLS: &tls.ConnectionState{},
		}, "enrol:web-1"},
	} {
		for name, out := range redacttest.Renderings(t, c.v, true) {
			for _, form := range redacttest.Forms() {
				if strings.Contains(out, form) {
					t.Errorf("%s %s: the output holds a credential (%q): %s", c.name, name, form, out)
				}
			}
			if !strings.Contains(out, c.public) {
				t.Errorf("%s %s: the output does not show %q: %s", c.name, name, c.public, out)
			}
		}
	}
}
