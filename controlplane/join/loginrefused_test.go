package join

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/authn"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/tokenfmt"
)

// refuseWith refuses every login with err, as the mesh's authenticator does.
type refuseWith struct{ err error }

func (r refuseWith) Authenticate(broker.Client) (broker.Grant, error) { return broker.Grant{}, r.err }

// meshBroker starts a broker of mesh "m" whose certificates were made at made (the
// CA and its leaf, valid from an hour before), deciding logins with auth; it returns
// its address and the CA's pin.
func meshBroker(t *testing.T, made time.Time, auth broker.Authenticator) (string, [32]byte) {
	t.Helper()
	ca, _, err := pki.NewCA("m", made)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueLeaf("control cp-1", []net.IP{net.IPv4(127, 0, 0, 1)}, made)
	if err != nil {
		t.Fatal(err)
	}
	srvTLS, err := pki.ServerConfig(leaf, ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.Start(t.Context(), broker.Config{Name: "cp-1", Mesh: "m", Listen: "127.0.0.1:0", TLS: srvTLS, Auth: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv.Addr(), ca.Pin()
}

// TestALoginRefusalKeepsTheJoinsKeys: a broker refuses an enrolling login without
// saying why, for a while as well as for good: a token's connections over their
// budget (3 in 30 s: a fourth run of join within that time), a broker that holds as
// many hosts as it has room for (where a control node is most often added). The
// join called every such refusal token_unknown (exit 4, "never minted"), tried no
// other broker, and deleted join-pending.json: the keys the mesh recorded for a join
// it had admitted, which only could finish it (the next run was refused token_used,
// and a new token node_exists). Now the join tries the token's other brokers and
// ends with ErrLoginRefused (exit 3), keeping the keys, saying to wait a minute and
// run it again with the same token, and naming the causes without asserting one.
func TestALoginRefusalKeepsTheJoinsKeys(t *testing.T) {
	for name, refusal := range map[string]error{"token busy": authn.ErrTokenBusy, "broker full of hosts": broker.ErrFull} {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			refusing, pin := meshBroker(t, now, refuseWith{refusal})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			down := ln.Addr().String()
			ln.Close() // another broker of the token, down
			tok := controlTokenFor(t, []string{refusing, down}, pin, tokenfmt.RoleControl, now)
			parsed, err := tokenfmt.Parse(tok, now)
			if err != nil {
				t.Fatal(err)
			}
			th := parsed.SecretHash()

			// The data directory of a join the mesh admitted, then interrupted.
			d := datadir.Dir(t.TempDir())
			user, _ := nkeys.CreateUser()
			curve, _ := nkeys.CreateCurveKeys()
			us, _ := user.Seed()
			cs, _ := curve.Seed()
			keys, _ := json.Marshal(pending{Node: "cp-2", TokenHash: hexOf(th[:]), NkeySeed: string(us), CurveSeed: string(cs)})
			write(t, d.Path(pendingFile), string(keys))
			save(t, d, datadir.Config{Format: datadir.ConfigFormat, Mesh: "m", Node: "cp-2", Listen: "127.0.0.1:7300", RaftListen: "127.0.0.1:7301",
				ClusterListen: "127.0.0.1:7302", Brokers: []string{refusing}, CAPin: hexOf(pin[:]), Joining: true, Joined: true})

			var out strings.Builder
			err = Join(t.Context(), Options{Dir: d, Token: tok, Out: &out})
			if !errors.Is(err, ErrLoginRefused) || errors.Is(err, ErrRefused) {
				t.Fatalf("want ErrLoginRefused, not a refusal for good (ErrRefused); got %v\n%s", err, out.String())
			}
			if after, rerr := os.ReadFile(d.Path(pendingFile)); rerr != nil || !bytes.Equal(after, keys) {
				t.Fatalf("the keys of the admitted join (%s) were not kept: %v\n%s", pendingFile, rerr, out.String())
			}
			msg := err.Error()
			for _, says := range []string{refusing + ": login refused", "wait a minute and run meshctl join --data " + string(d) + " again with the same token",
				"too many connections used the token", "as many hosts as it has room for", "never minted", "meshctl token list"} {
				if !strings.Contains(msg, says) {
					t.Errorf("the error does not say %q: %v", says, err)
				}
			}
			if strings.Contains(msg, "token_unknown") {
				t.Errorf("the error asserts the token is unknown: %v", err)
			}
			if steps := out.String(); !strings.Contains(steps, down+": unreachable") || strings.Contains(steps, "removed the keys") {
				t.Errorf("the token's other broker was not tried, or the keys were said removed:\n%s", steps)
			}
		})
	}
}

// TestAJoinOnAMachineWithAWrongClockSaysSo: a joining machine whose clock is behind
// the mesh's certificates (a machine booted with a wrong RTC, before NTP) sees the
// broker's chain reach the pinned CA, out of its validity. The join said "no broker
// of the mesh could be reached ... retrying may help", which it does not until the
// clock is set. Now it names the clock, as meshhost enrol does (ErrClock, a
// pki.ClockError: exit 3), and says to run the join again once the clock is right.
func TestAJoinOnAMachineWithAWrongClockSaysSo(t *testing.T) {
	now := time.Now()
	addr, pin := meshBroker(t, now.Add(3*time.Hour), refuseWith{broker.ErrRefused})
	d := datadir.Dir(t.TempDir())
	var out strings.Builder
	err := Join(t.Context(), Options{Dir: d, Token: controlToken(t, addr, pin, tokenfmt.RoleControl, now), Out: &out})
	var ce *pki.ClockError
	if !errors.Is(err, ErrClock) || !errors.As(err, &ce) || errors.Is(err, operator.ErrUnreachable) || errors.Is(err, pki.ErrPinMismatch) {
		t.Fatalf("want ErrClock (a pki.ClockError), not unreachable or substituted; got %v\n%s", err, out.String())
	}
	msg := err.Error()
	for _, says := range []string{"not valid at this machine's time", "this machine's clock is behind", "run meshctl join --data " + string(d) + " again with the same token once the clock is right"} {
		if !strings.Contains(msg, says) {
			t.Errorf("the error does not say %q: %v", says, err)
		}
	}
	if strings.Contains(msg, "retrying may help") || !strings.Contains(out.String(), addr+": REFUSED: the certificate chains to the pinned CA but is not valid at this machine's time") {
		t.Errorf("the clock is not named:\n%v\n%s", err, out.String())
	}
	if d.Exists(datadir.ConfigFile) {
		t.Error("a join refused for the clock wrote mesh.json")
	}
}
