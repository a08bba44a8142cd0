package operator

import (
	"encoding/base64"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/pki"
)

// loginRecorder is a broker's authentication that admits everyone and records
// which of its candidate keys signed each login's nonce.
type loginRecorder struct {
	mu         sync.Mutex
	keys       []string
	candidates []string
}

func (r *loginRecorder) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	sig, _ := base64.RawURLEncoding.DecodeString(o.Sig)
	msg := broker.BoundNonce(c.GetNonce(), broker.ChannelBinding(c.GetTLSConnectionState()))
	who := "?"
	for _, k := range r.candidates {
		if kp, _ := nkeys.FromPublicKey(k); kp.Verify(msg, sig) == nil {
			who = k
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, who)
	return true
}

func (r *loginRecorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return ""
	}
	return r.keys[len(r.keys)-1]
}

// TestAChangeIsSignedWithTheKeyTheConnectionLoggedInWith: credentials renewed in
// place (the same name, a new key) while a command runs sign nothing over the
// connection the old ones logged in with, and say to run the command again; once a
// reconnection logged in with the renewed ones, they sign. A first version compared
// with the key read as the command dialled, and refused the renewal after the
// reconnection too, saying to put the old file back (a review).
func TestAChangeIsSignedWithTheKeyTheConnectionLoggedInWith(t *testing.T) {
	ca, _, err := pki.NewCA("m", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rec1, rec2 := &loginRecorder{}, &loginRecorder{}
	s1 := brokerOf(t, ca, "cp-1", func(o *server.Options) { o.CustomClientAuthentication = rec1 })
	s2 := brokerOf(t, ca, "cp-2", func(o *server.Options) { o.CustomClientAuthentication = rec2 })
	account, _ := nkeys.CreateAccount()
	path := credsFile(t)
	first, _ := bootstrap.OperatorCreds(account, "alice")
	renewed, _ := bootstrap.OperatorCreds(account, "alice")
	var keys []string
	for _, creds := range [][]byte{first, renewed} {
		text, _ := jwt.ParseDecoratedJWT(creds)
		cl, _ := jwt.DecodeUserClaims(text)
		keys = append(keys, cl.Subject)
	}
	rec1.candidates, rec2.candidates = keys, keys
	if err := os.WriteFile(path, first, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := CAEndpoint([]string{s1.Addr().String(), s2.Addr().String()}, path, caFileOf(t, ca))
	if err != nil {
		t.Fatal(err)
	}
	c, err := DialEndpoint(e, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if rec1.last() != keys[0] {
		t.Fatalf("logged in as %s, want the first credentials' %s", rec1.last(), keys[0])
	}
	change := func() (*nats.Msg, error) {
		return c.signed(api.OpDeclare, &nats.Msg{Subject: "x", Data: []byte("{}")})
	}
	if m, err := change(); err != nil || !strings.Contains(m.Header.Get(api.OperatorSigHeader), keys[0]) {
		t.Fatalf("signed before the renewal: %v", err)
	}

	if err := os.WriteFile(path, renewed, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := change(); err == nil || !strings.Contains(err.Error(), "run the command again") {
		t.Fatalf("signed with the renewed key over the first one's connection: %v", err)
	}
	s1.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for rec2.last() == "" || c.nc.Status() != nats.CONNECTED {
		if time.Now().After(deadline) {
			t.Fatal("no reconnection to cp-2")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec2.last() != keys[1] {
		t.Fatalf("reconnected as %s, want the renewed credentials' %s", rec2.last(), keys[1])
	}
	if m, err := change(); err != nil || !strings.Contains(m.Header.Get(api.OperatorSigHeader), keys[1]) {
		t.Fatalf("after the reconnection with the renewed credentials: %v", err)
	}
}
