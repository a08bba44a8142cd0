package operator

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestParseServersHidesCredentials: a broker address written as a NATS URL with a
// user, a password or a token in it (a NATS context's url, MESH_SERVERS) is refused,
// and the refusal, which meshctl prints, names the address without them. The mesh
// never logs an operator in with them: operators present a .creds file.
func TestParseServersHidesCredentials(t *testing.T) {
	for _, s := range []string{
		"nats://alice:s3cr3t-pw@10.0.0.1:7300",
		"tls://s3cr3t-pw@10.0.0.1:7300",
		"s3cr3t-pw@10.0.0.1:7300",
		"tls://alice:s3cr3t-pw@cp-1.example:7300",
		"tls://10.0.0.1:7300,nats://alice:s3cr3t-pw@10.0.0.2:7300",
		"ws://alice:s3cr3t-pw@10.0.0.1:7300",
		"nats://alice:s3cr3t-pw@10.0.0.1:0",
		"nats://alice:s3cr3t-pw@10.0.0.1",
		"nats://alice:s3cr3t,pw@10.0.0.1:7300",
		"nats://alice:s3cr3t@pw@10.0.0.1:7300",
	} {
		_, err := ParseServers(s)
		if !errors.Is(err, ErrEndpoint) {
			t.Errorf("%s: %v, want ErrEndpoint", s, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "alice") {
			t.Errorf("the refusal shows the credentials: %v", err)
		}
	}
}

// TestABrokerURLKeepsItsIPv6Zone: --servers [fe80::1%eth0]:7300 (a link-local
// address, dialled through the named interface) went into the URL as is, which did
// not parse: the command failed as a broker unreachable, exit 3 (a review). The
// zone's "%" is escaped, and the URL reads back as the address given.
func TestABrokerURLKeepsItsIPv6Zone(t *testing.T) {
	for _, hostport := range []string{"[fe80::1%eth0]:7300", "[::1]:7300", "127.0.0.1:7300", "cp-1.example:7300"} {
		u, err := url.Parse(brokerURL(hostport))
		if err != nil || u.Scheme != "tls" || u.Host != hostport {
			t.Errorf("%s: URL %q reads back as %v (%v), want tls and the address given", hostport, brokerURL(hostport), u, err)
		}
	}
}
