package broker

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

type allowHosts struct{}

func (allowHosts) Authenticate(Client) (Grant, error) {
	return Grant{User: "host", Account: AccountHosts, Publish: []string{">"}, Subscribe: []string{">"}}, nil
}

// The hosts' subjects are their own, so nats-server's subject cache would hold
// subjects that are never asked for again, and make every wildcard subscription
// (nats.go's request inbox, one per host) scan all of them under the account's
// write lock (BenchmarkDistinctSubjects). The broker runs without it.
func TestNoSubjectCache(t *testing.T) {
	cfg, _ := serverConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Start(ctx, Config{Mesh: "test", Name: "cp-1", Listen: "127.0.0.1:0", TLS: cfg, Auth: allowHosts{},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(s.InProcess()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan struct{}, 10)
	if _, err := nc.Subscribe("_INBOX.h1.*", func(*nats.Msg) { got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := nc.Publish(fmt.Sprintf("_INBOX.h1.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("a message to a wildcard subscription was not delivered")
		}
	}
	sz, err := s.ns.Subsz(nil)
	if err != nil {
		t.Fatal(err)
	}
	if sz.NumCache != 0 {
		t.Fatalf("the broker cached %d subjects", sz.NumCache)
	}
}
