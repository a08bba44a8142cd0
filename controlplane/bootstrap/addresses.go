package bootstrap

import (
	"fmt"
	"net/netip"
	"strings"
)

// AddressFlags name the flags a control node's broker, Raft and cluster addresses
// are given with, for the messages that refuse them.
type AddressFlags struct{ Broker, Raft, Cluster string }

// ListenFlags are bootstrap's.
func ListenFlags() AddressFlags {
	return AddressFlags{Broker: "--listen", Raft: "--raft-listen", Cluster: "--cluster-listen"}
}

// Addresses are a control node's broker, Raft and cluster addresses, checked.
type Addresses struct{ Broker, Raft, Cluster netip.AddrPort }

// CheckAddresses checks a control node's three addresses by one set of rules, for
// bootstrap's first node and a control token's new one alike; the Raft and cluster
// addresses left empty take their defaults (completeAddresses). Each is an IP address
// and a port from 1 to 65535: not a name (the node's certificate carries IP
// addresses, and nothing resolves a name before it is dialled), not port 0 (a
// random port nobody could dial). The Raft and cluster addresses are dialled by the
// other control nodes, from the Raft configuration and the replicated state, so
// neither is a wildcard; the broker's may be one only when wildcardBroker (bootstrap's
// --listen, whose hosts dial --advertise). And no two are bound to the same port of
// one address, or to one port where either is a wildcard: serve would fail to listen
// on its own second address and blame another process. Errors are *OptionError,
// naming the flag.
func CheckAddresses(broker, raft, cluster string, flags AddressFlags, wildcardBroker bool) (Addresses, error) {
	var a Addresses
	var err error
	if a.Broker, err = parseAddress(flags.Broker, broker); err != nil {
		return a, err
	}
	if a.Broker.Addr().IsUnspecified() && !wildcardBroker {
		return a, optionError(flags.Broker, "%s is a wildcard address: give the new node's concrete ip:port, the broker address hosts will dial", a.Broker)
	}
	defaulted := map[string]bool{flags.Raft: raft == "", flags.Cluster: cluster == ""}
	if a.Broker.Addr().IsUnspecified() && (raft == "" || cluster == "") {
		var missing []string
		for _, f := range []string{flags.Raft, flags.Cluster} {
			if defaulted[f] {
				missing = append(missing, f)
			}
		}
		return a, optionError(flags.Broker, "%s is a wildcard address, and the Raft and cluster addresses, which the other control nodes dial, cannot default from it: give %s (this machine's ip:port)",
			a.Broker, strings.Join(missing, " and "))
	}
	if err := completeAddresses(a.Broker, &raft, &cluster, flags); err != nil {
		return a, err
	}
	if a.Raft, err = parseAddress(flags.Raft, raft); err != nil {
		return a, err
	}
	if a.Cluster, err = parseAddress(flags.Cluster, cluster); err != nil {
		return a, err
	}
	for _, c := range []struct {
		flag string
		addr netip.AddrPort
	}{{flags.Raft, a.Raft}, {flags.Cluster, a.Cluster}} {
		if c.addr.Addr().IsUnspecified() {
			return a, optionError(c.flag, "%s is a wildcard address: the other control nodes dial it, so give this machine's ip:port they reach it at", c.addr)
		}
	}
	bound := []struct {
		flag string
		addr netip.AddrPort
	}{{flags.Broker, a.Broker}, {flags.Raft, a.Raft}, {flags.Cluster, a.Cluster}}
	for i := 1; i < len(bound); i++ {
		for _, earlier := range bound[:i] {
			if !clash(earlier.addr, bound[i].addr) {
				continue
			}
			describe := func(flag string, addr netip.AddrPort) string {
				if defaulted[flag] {
					return fmt.Sprintf("%s (the default of %s)", addr, flag)
				}
				return fmt.Sprintf("%s (%s)", addr, flag)
			}
			return a, optionError(bound[i].flag, "%s takes the port of %s: the broker, Raft and cluster addresses must differ, as serve listens on each (and would fail on the second, blaming another process)",
				describe(bound[i].flag, bound[i].addr), describe(earlier.flag, earlier.addr))
		}
	}
	return a, nil
}

// CheckListen checks an address a control node's broker listens on, given with flag
// apart from the address hosts dial (join's --listen, behind NAT): an IP address,
// a wildcard allowed, and a nonzero port. Errors are *OptionError.
func CheckListen(flag, s string) (netip.AddrPort, error) { return parseAddress(flag, s) }

// parseAddress reads one address given with flag: an IP address and a nonzero port.
func parseAddress(flag, s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return ap, optionError(flag, "%q is not ip:port (an IP address, not a name: the node's certificate carries IP addresses, and nothing resolves a name before it is dialled)", s)
	}
	if ap.Port() == 0 {
		return ap, optionError(flag, "%s has port 0, which listens on a random port nobody could dial: give the port (1 to 65535)", ap)
	}
	// What no token carries as a broker's address (tokenfmt.CheckAddress), and so
	// what the control plane refuses in a control token: said here, as the
	// flag's, before a CA's claim is signed over it.
	switch a := ap.Addr(); {
	case a.Zone() != "":
		return ap, optionError(flag, "%s has an IPv6 zone, which means nothing on another machine (and no certificate carries one): give an address without it", ap)
	case a.Is4In6():
		return ap, optionError(flag, "%s is an IPv4-mapped IPv6 address: write it as plain IPv4 (%s)", ap, netip.AddrPortFrom(a.Unmap(), ap.Port()))
	case a.IsMulticast():
		return ap, optionError(flag, "%s is a multicast address, which no node listens on: give the node's own", ap)
	case a.Is6() && a.IsLinkLocalUnicast():
		return ap, optionError(flag, "%s is an IPv6 link-local address, which no other machine dials without the zone of its interface, and neither tokens nor certificates carry one: give a global or unique local (fd00::/8) address", ap)
	}
	return ap, nil
}

// clash reports whether a and b cannot both be listened on: one port of one
// address, or one port where either is a wildcard (IPv4 or IPv6: a dual-stack
// wildcard takes the port on both).
func clash(a, b netip.AddrPort) bool {
	if a.Port() != b.Port() {
		return false
	}
	x, y := a.Addr().Unmap(), b.Addr().Unmap()
	return x == y || x.IsUnspecified() || y.IsUnspecified()
}

// completeAddresses fills in a control node's Raft and cluster addresses left empty
// with their defaults: the broker's IP with its port plus 1 and plus 2. A default
// past port 65535 is refused: uint16 arithmetic wrapped it to 0 (a random port) or
// 1, which were recorded for good. Given addresses need no room above the broker's.
func completeAddresses(broker netip.AddrPort, raft, cluster *string, flags AddressFlags) error {
	var missing []string
	if *raft == "" && broker.Port() > 65535-1 {
		missing = append(missing, flags.Raft)
	}
	if *cluster == "" && broker.Port() > 65535-2 {
		missing = append(missing, flags.Cluster)
	}
	if len(missing) > 0 {
		return optionError(flags.Broker, "%s leaves no room for the default Raft and cluster addresses (its port plus 1 and plus 2, past 65535): give %s, or a lower port",
			broker, strings.Join(missing, " and "))
	}
	if *raft == "" {
		*raft = netip.AddrPortFrom(broker.Addr(), broker.Port()+1).String()
	}
	if *cluster == "" {
		*cluster = netip.AddrPortFrom(broker.Addr(), broker.Port()+2).String()
	}
	return nil
}
