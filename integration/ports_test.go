package integration

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestServeListensOnlyOnItsPorts: `meshctl serve` listens on the client, cluster and
// Raft ports, and on --metrics-listen when given one, and on nothing else: no TCP
// port besides, no UDP socket. Everything security.md says of the ports (TLS 1.3
// first, pins, bounds on strangers) is said of those; a listener nats-server or a
// library opened by default (monitoring, a leaf node, websocket, MQTT, a profiler)
// would be one nothing checks, and nothing noticed it: TestEveryPortSpeaksTLS13First
// probes the three ports it knows. Read from the process's own sockets (Linux).
func TestServeListensOnlyOnItsPorts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the serve process's sockets from /proc: Linux only")
	}
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "ports")
	cp.Serve()
	want := []string{cp.Listen, cp.Cluster, cp.Raft, cp.Metrics}
	if got := listening(t, cp.Process().Pid()); !slices.Equal(got, sortedAddrs(t, want)) {
		t.Errorf("serve with --metrics-listen listens on %v, want %v (client, cluster, Raft, metrics)", got, sortedAddrs(t, want))
	}

	cp.Process().Signal(syscall.SIGTERM)
	if code := cp.Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("serve stopped with exit %d:\n%s", code, cp.Process().Output())
	}
	cp.Serve("--metrics-listen=")
	want = want[:3]
	if got := listening(t, cp.Process().Pid()); !slices.Equal(got, sortedAddrs(t, want)) {
		t.Errorf("serve without --metrics-listen listens on %v, want %v (client, cluster, Raft)", got, sortedAddrs(t, want))
	}
}

func sortedAddrs(t *testing.T, addrs []string) []string {
	t.Helper()
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "tcp "+ap.String())
	}
	slices.Sort(out)
	return out
}

// listening lists the process's listening TCP sockets and every UDP socket it
// holds ("tcp ip:port", "udp ip:port"), sorted: its descriptors' socket inodes,
// looked up in the kernel's tables of its network namespace.
func listening(t *testing.T, pid int) []string {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []string
	for _, table := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] {
				continue
			}
			udp := strings.HasPrefix(table, "udp")
			if !udp && fields[3] != "0A" { // TCP_LISTEN
				continue
			}
			ap, err := procAddr(fields[1])
			if err != nil {
				t.Fatalf("%s: %q: %v", table, fields[1], err)
			}
			out = append(out, table[:3]+" "+ap.String())
		}
		f.Close()
	}
	slices.Sort(out)
	return out
}

// procAddr reads an address of /proc/net/{tcp,udp}[6]: the address in hex, each
// 32-bit word in the host's byte order (little-endian here), then the port.
func procAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port")
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", a)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// TestAPortTakenIsSaidAsSuch: `meshctl serve` whose broker, Raft or cluster port
// another process holds exits 1 saying that another process listens there, which
// command names it, and to stop it or give another address; before (a review), the
// broker's came in nats-server's words ("Error listening on port"), with nothing to
// do. Once the port is free, serve starts.
func TestAPortTakenIsSaidAsSuch(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "portheld")
	for _, addr := range []string{cp.Listen, cp.Raft, cp.Cluster} {
		held, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		serve := cp.StartServe()
		code := serve.Wait(30 * time.Second)
		held.Close()
		lines := strings.Split(strings.TrimSpace(serve.Output()), "\n")
		t.Logf("%s held: %s", addr, lines[len(lines)-1])
		// And that the holder may be this node's own serve, run from another
		// directory (a restore with the old serve not stopped: a walkthrough),
		// where "give another address" cannot help.
		if out := serve.Output(); code != 1 || !strings.Contains(out, "cannot listen on "+addr+": another process listens there") ||
			!strings.Contains(out, "sport = :"+port) || !strings.Contains(out, "if it is a meshctl serve of this control node") {
			t.Errorf("serve with %s held: exit %d, want 1 saying another process listens there, perhaps this node's own serve:\n%s", addr, code, out)
		}
	}
	cp.Serve()
}
