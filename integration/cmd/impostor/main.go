// Command impostor is test tooling for the network-namespace scenario: a real
// nats-server under a CA of its own that accepts any credential, run inside an
// attacker's namespace. Every second it writes what it received to --stats as JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"mesh/broker"
	"mesh/controlplane/pki"
)

type counting struct{ n atomic.Int64 }

func (c *counting) Authenticate(broker.Client) (broker.Grant, error) {
	c.n.Add(1)
	return broker.Grant{User: "victim", Account: broker.AccountControl, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

func main() {
	listen := flag.String("listen", "", "ip:port to answer on")
	stats := flag.String("stats", "", "file to write {connections, in_bytes, credentials} to")
	flag.Parse()
	if err := run(*listen, *stats); err != nil {
		fmt.Fprintln(os.Stderr, "impostor:", err)
		os.Exit(1)
	}
}

func run(listen, statsFile string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return err
	}
	ca, _, err := pki.NewCA("impostor", time.Now())
	if err != nil {
		return err
	}
	leaf, err := ca.IssueLeaf("impostor", []net.IP{net.ParseIP(host)}, time.Now())
	if err != nil {
		return err
	}
	cfg, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		return err
	}
	auth := &counting{}
	srv, err := broker.Start(context.Background(), broker.Config{Name: "impostor", Mesh: "impostor", Listen: listen, TLS: cfg, Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Println("impostor listening on", srv.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		conns, in, err := srv.Traffic()
		if err == nil && statsFile != "" {
			data, _ := json.Marshal(map[string]int64{"connections": int64(conns), "in_bytes": in, "credentials": auth.n.Load()})
			_ = os.WriteFile(statsFile+".tmp", data, 0o644)
			_ = os.Rename(statsFile+".tmp", statsFile)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
