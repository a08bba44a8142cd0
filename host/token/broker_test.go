package token

import (
	"errors"
	"strings"
	"testing"
)

// TestParseBroker: one broker address, by the rules a token's list follows (without
// its canonical form), refused as ErrBadBroker without quoting what it was given.
func TestParseBroker(t *testing.T) {
	for in, want := range map[string]string{
		"10.0.0.1:7300":       "10.0.0.1:7300",
		"[fd00:0::1]:07300":   "[fd00::1]:7300",
		"[2001:db8::7]:65535": "[2001:db8::7]:65535",
		// Not dialled without a zone, but read: an identity or token from a mesh
		// that lists one beside brokers that work must not be refused whole.
		"[fe80::4:6eff:fe84:2003]:7300": "[fe80::4:6eff:fe84:2003]:7300",
	} {
		ap, err := ParseBroker(in)
		if err != nil || ap.String() != want {
			t.Errorf("ParseBroker(%q) = %v, %v; want %s", in, ap, err, want)
		}
	}
	secret := strings.Repeat("5e", 32)
	for in, want := range map[string]string{
		"[fe80::1%eth0]:80":                     "has an IPv6 zone",
		"0.0.0.0:7300":                          "is an unspecified address",
		"[::]:7300":                             "is an unspecified address",
		"10.0.0.1:0":                            "has port 0",
		"[ff02::1]:7300":                        "is a multicast address",
		"[::ffff:10.0.0.1]:7300":                "is an IPv4-mapped IPv6 address",
		"cp-1.example:7300":                     "is not ip:port",
		"10.0.0.1":                              "is not ip:port",
		"":                                      "is not ip:port",
		"10.0.0.1:7300_" + secret + "_deadbeef": "is not ip:port",
		"[fe80::1%" + secret + "]:80":           "has an IPv6 zone",
	} {
		_, err := ParseBroker(in)
		if !errors.Is(err, ErrBadBroker) || !strings.Contains(err.Error(), "the broker address "+want) {
			t.Errorf("ParseBroker(%q): %v; want ErrBadBroker, %q", in, err, want)
			continue
		}
		if strings.Contains(err.Error(), "10.0.0.1") || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "eth0") {
			t.Errorf("ParseBroker(%q) quotes its input: %v", in, err)
		}
	}
}
