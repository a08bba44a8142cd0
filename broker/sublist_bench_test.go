package broker_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// BenchmarkDistinctSubjects measures nats-server's subject cache under a fleet's
// traffic, where every host publishes and subscribes on subjects of its own: a new
// host's subscriptions (its declarations, and nats.go's request inbox, a wildcard,
// which the cache must match against every subject it holds) while the hosts' own
// publications keep the cache full, and publications to distinct subjects with one
// subscriber each (a declaration's fan-out, the hosts' reports). Both ways in one
// run: nats-server's default, the cache on, and the cache off (Options.NoSublistCache).
func BenchmarkDistinctSubjects(b *testing.B) {
	for _, c := range []struct {
		name    string
		noCache bool
	}{{"cache=on", false}, {"cache=off", true}} {
		b.Run("subscribe/"+c.name, func(b *testing.B) {
			pub, sub := rawPair(b, c.noCache)
			b.ResetTimer()
			for i := range b.N {
				// A host's report on its own subject, then another host's subscriptions:
				// its declarations, and the inbox nats.go's requests share (a wildcard).
				if err := pub.Publish(fmt.Sprintf("mesh.node.h%d.status", i), nil); err != nil {
					b.Fatal(err)
				}
				if _, err := sub.Subscribe(fmt.Sprintf("mesh.node.h%d.declaration", i), func(*nats.Msg) {}); err != nil {
					b.Fatal(err)
				}
				if _, err := sub.Subscribe(fmt.Sprintf("_INBOX.h%d.*", i), func(*nats.Msg) {}); err != nil {
					b.Fatal(err)
				}
			}
			if err := sub.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := pub.Flush(); err != nil {
				b.Fatal(err)
			}
		})
		b.Run("publish/"+c.name, func(b *testing.B) {
			const hosts = 10_000
			pub, sub := rawPair(b, c.noCache)
			got := make(chan struct{}, 1)
			var n atomic.Int64
			for i := range hosts {
				if _, err := sub.Subscribe(fmt.Sprintf("mesh.node.h%d.declaration", i), func(*nats.Msg) {
					if n.Add(1) == int64(b.N) {
						got <- struct{}{}
					}
				}); err != nil {
					b.Fatal(err)
				}
			}
			if err := sub.Flush(); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 600)
			b.ResetTimer()
			for i := range b.N {
				if err := pub.Publish(fmt.Sprintf("mesh.node.h%d.declaration", i%hosts), payload); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-got:
			case <-time.After(time.Minute):
				b.Fatalf("%d of %d delivered", n.Load(), b.N)
			}
		})
	}
}

// rawPair starts a plain nats-server (no TLS, no authentication: only the subject
// cache differs) and connects a publisher and a subscriber to it.
func rawPair(b *testing.B, noCache bool) (pub, sub *nats.Conn) {
	b.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		NoSublistCache: noCache, MaxPending: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		b.Fatal("nats-server did not start")
	}
	b.Cleanup(ns.Shutdown)
	for _, nc := range []**nats.Conn{&pub, &sub} {
		c, err := nats.Connect(ns.ClientURL(), nats.SyncQueueLen(1<<20))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		*nc = c
	}
	sub.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { b.Error(err) })
	return pub, sub
}
