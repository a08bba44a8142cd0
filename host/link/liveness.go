package link

import (
	"net"
	"time"

	"github.com/nats-io/nats.go"
)

// How a running agent notices that its broker is gone. Two layers, each for the
// failure it sees at the least cost:
//
//   - The kernel watches the link. TCP keepalive probes an idle connection
//     (after KeepAliveIdle, then every KeepAliveInterval) and closes it after
//     KeepAliveCount unanswered probes; on Linux TCP_USER_TIMEOUT replaces that
//     count with UserTimeout of silence, and also closes a connection whose sent
//     data has gone unacknowledged for UserTimeout. A broker cut off without a
//     reset (a partition, a machine powered off) is noticed in 15–20 s, and a
//     probe is a bare TCP segment: no TLS record, no wake-up of either process.
//   - NATS pings (every PingInterval unless the operator chose another, and
//     MaxPingsOutstanding) notice a broker whose machine still answers TCP but
//     whose process does not read (stopped, wedged): within the interval ×
//     (MaxPingsOutstanding+1).
//
// The pings used to do both jobs every 5 s; at 10,000 hosts that was 2,000 TLS
// round trips a second through the broker, most of what an idle mesh cost
// (docs/decisions/0013-the-kernel-watches-the-link.md).
const (
	// PingInterval is how often a running agent pings its broker unless told
	// otherwise (`meshhost run --broker-ping`).
	PingInterval        = 20 * time.Second
	MaxPingsOutstanding = 2
	KeepAliveIdle       = 5 * time.Second
	KeepAliveInterval   = 5 * time.Second
	KeepAliveCount      = 2
	UserTimeout         = 15 * time.Second
	// DialTimeout bounds one TCP connection attempt to one broker address.
	DialTimeout = 10 * time.Second
)

// Liveness returns the options that make a long-lived connection notice a lost
// broker: pings every ping (PingInterval when ping is 0). The kernel's half is
// Dialer, which every Login dials with.
func Liveness(ping time.Duration) []nats.Option {
	if ping <= 0 {
		ping = PingInterval
	}
	return []nats.Option{
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(MaxPingsOutstanding),
	}
}

// Dialer returns the TCP dialer of a long-lived connection: keepalive as above, and
// TCP_USER_TIMEOUT where the system has it. The TLS session above it is Login's.
func Dialer() *net.Dialer {
	return &net.Dialer{
		Timeout: DialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     KeepAliveIdle,
			Interval: KeepAliveInterval,
			Count:    KeepAliveCount,
		},
		Control: setUserTimeout,
	}
}
