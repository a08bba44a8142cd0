package integration

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/integration/harness"
)

// TestRemovedControlNodeIsShutOut: a control node removed for good keeps its data
// directory (a machine that was lost, or is suspected), and with it a leaf of the
// mesh CA valid for years and operator credentials. Removal must shut both out:
//
//   - its operator credentials read, and change nothing (meshctl says so, exit 4);
//   - the Raft port and the route port of the remaining nodes close a connection
//     that presents its leaf right after the handshake, where a member's stays open;
//   - it stopped by itself (exit 6) although it was cut off at once.
//
// The built binaries, three control nodes so that two remain.
func TestRemovedControlNodeIsShutOut(t *testing.T) {
	t.Parallel() // mostly waits (grace periods, timeouts): see TestMain
	cp1 := harness.NewControlPlane(t, bin, "shut")
	cp1.Serve()
	// Minted before cp-2 joined: it does not list cp-2's broker, and the removal
	// does not name it.
	cp1.Token("web-0")
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	cfg1, err := datadir.Dir(cp1.Dir).LoadConfig()
	if err != nil {
		t.Fatal(err)
	}

	// Before the removal, cp-2's leaf is a member's: both ports keep the connection.
	if err := dialKept(t, cp2.Dir, cfg1.RaftListen); err != nil {
		t.Fatalf("raft port, a member's leaf: %v", err)
	}
	if err := dialKept(t, cp2.Dir, cfg1.ClusterListen); err != nil {
		t.Fatalf("route port, a member's leaf: %v", err)
	}

	// A token minted while cp-2 is a member lists its broker address: the removal
	// names its node, to be cancelled and minted again if cp-2 is suspected.
	cp1.Token("web-7")
	if r := cp1.Ctl("control", "remove", "cp-2"); r.Code != 0 {
		t.Fatalf("control remove cp-2 (exit %d): %s", r.Code, r.Combined())
	} else if !strings.Contains(r.Stdout, "pending tokens list its broker address (nodes: web-7)") || !strings.Contains(r.Stdout, "meshctl token cancel") {
		t.Errorf("the removal does not name the pending tokens that list the removed node:\n%s", r.Stdout)
	} else if strings.Contains(r.Stdout, "CA key") {
		t.Errorf("the removal of a node without the CA key speaks of it:\n%s", r.Stdout)
	}
	if code := cp2.Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed node exited %d 30 s after its removal, want 6 (-1: still serving):\n%s", code, cp2.Process().Output())
	}
	// Shown removed, with when it was last heard (it showed "never" and index 0).
	if v := controlView(t, cp1)["cp-2"]; v.State != api.StateRemoved || v.LastSeen.IsZero() || v.AppliedIndex == 0 || v.Hosts != nil {
		t.Errorf("the removed node is shown %+v", v)
	}
	// Its data directory remembers: serve, bootstrap and a join with a new token
	// refuse it at once and say so (bootstrap said to start it with serve, which
	// then waited for the other nodes to answer before it exited 6).
	for _, args := range [][]string{
		{"serve", "--raft-heartbeat", "300ms"},
		{"bootstrap", "--mesh", "shut", "--node", "cp-2", "--listen", cp2.Listen},
	} {
		start := time.Now()
		r := cp2.Ctl(args...)
		if r.Code != 6 || !strings.Contains(r.Stderr, "was removed") || !strings.Contains(r.Stderr, "fresh --data directory") {
			t.Errorf("%s on the removed node's directory (exit %d, want 6 and why):\n%s", args[0], r.Code, r.Combined())
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s on the removed node's directory took %v to refuse", args[0], took)
		}
	}
	tok, _ := cp1.ControlToken("cp-2")
	if r := harness.Run(t, tok, nil, bin.Meshctl, "join", "--data", cp2.Dir); r.Code != 6 || !strings.Contains(r.Stderr, "fresh --data directory") {
		t.Errorf("join with a new token into the removed node's directory (exit %d, want 6 and why):\n%s", r.Code, r.Combined())
	}

	// Its leaf: refused on both ports of the remaining nodes, as soon as they
	// applied the removal; a member's leaf is still kept.
	harness.Eventually(t, 10*time.Second, "cp-1's Raft and route ports refuse the removed node's leaf", func() bool {
		return dialKept(t, cp2.Dir, cfg1.RaftListen) != nil && dialKept(t, cp2.Dir, cfg1.ClusterListen) != nil
	})
	if err := dialKept(t, cp3.Dir, cfg1.RaftListen); err != nil {
		t.Fatalf("raft port, an active member's leaf after the removal: %v", err)
	}

	// Its operator credentials: reads, not changes.
	if r := cp2.Ctl("nodes", "--json"); r.Code != 0 {
		t.Fatalf("a removed node's credentials cannot read (exit %d): %s", r.Code, r.Combined())
	}
	body := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, body, `{"files":[{"path":"x","content":"y"}]}`)
	// The broker refuses such a change at once, and meshctl says so at once: before,
	// it waited its whole --timeout (15 s) for an answer that could not come.
	start := time.Now()
	r := cp2.Ctl("declare", "--all", "--file", body)
	if r.Code != 4 || !strings.Contains(r.Stderr, "may only read") {
		t.Fatalf("declare with a removed node's credentials (exit %d, want 4): %s", r.Code, r.Combined())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("declare with a removed node's credentials was refused after %s", took)
	}
	// Nor each control node's own view, which needs no leader: the broker keeps a
	// way back for each such request's answers, so only operators may ask.
	if r := cp2.Ctl("control", "status"); r.Code != 4 || !strings.Contains(r.Stderr, "may only read") {
		t.Fatalf("control status with a removed node's credentials (exit %d): %s", r.Code, r.Combined())
	}
	start = time.Now()
	if r := cp2.Ctl("token", "--node", "web-9"); r.Code != 4 {
		t.Fatalf("token with a removed node's credentials (exit %d, want 4): %s", r.Code, r.Combined())
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("token with a removed node's credentials was refused after %s", took)
	}
	for _, n := range cp1.Nodes().Nodes {
		if n.ID == "web-9" {
			t.Fatal("a removed node's credentials minted a token")
		}
	}
	// They hear the replies on their own key's inbox only: subscribed to every
	// inbox, they heard the answers to the other operators' changes and to their
	// monitoring requests (every host's connection and address), which they may
	// not ask for themselves.
	pin, err := cfg1.Pin()
	if err != nil {
		t.Fatal(err)
	}
	denied := make(chan error, 4)
	// Through cp-3: the reads above spent at cp-1 the four connections a minute
	// these credentials get at a broker (meshctl dials the brokers of its list in
	// order, and went on to the next when cp-1 refused the fifth). The answers are
	// in the operators' account on every broker, as cp-1's below are.
	eaves, err := nats.Connect("tls://"+cp3.Listen, append(operator.CredsLogin(filepath.Join(cp2.Dir, datadir.AdminCredsFile), pki.PinnedClientConfig(pin), 10*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))...)
	if err != nil {
		t.Fatalf("a removed node's credentials: %v", err)
	}
	defer eaves.Close()
	heard, err := eaves.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	eaves.Flush()
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("subscribing to every inbox: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a removed node's credentials subscribed to every inbox")
	}
	other := cp1.OperatorConn()
	if _, err := other.Request("$SYS.REQ.SERVER.PING.CONNZ", []byte(`{}`), 5*time.Second); err != nil {
		t.Fatalf("another operator's monitoring request: %v", err)
	}
	if m, err := heard.NextMsg(time.Second); err == nil {
		t.Fatalf("a removed node's credentials heard another operator's answer on %s", m.Subject)
	}
	// The mesh goes on: a change through the remaining nodes.
	if r := cp3.Ctl("token", "--node", "web-1"); r.Code != 0 {
		t.Fatalf("token through a remaining node (exit %d): %s", r.Code, r.Combined())
	}
	for _, c := range cp1.Nodes().Control {
		if c.ID == "cp-2" && c.Raft != api.RaftRemoved {
			t.Fatalf("cp-2 is listed %s", c.Raft)
		}
	}
}

// dialKept connects to addr with the leaf of the control node in dir, over the
// mutual TLS control nodes use, and reports nil when the other side keeps the
// connection open for a second after the handshake, and an error when it closes it
// (or the handshake fails). Both ports start with the TLS handshake; a route's
// broker then sends its INFO, a Raft peer waits for an RPC.
func dialKept(t *testing.T, dir, addr string) error {
	t.Helper()
	leaf, err := datadir.Dir(dir).LoadLeaf()
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, datadir.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.MutualConfig(leaf, caPEM)
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(addr)
	cfg.ServerName = host
	raw, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(3 * time.Second))
	c := tls.Client(raw, cfg)
	if err := c.Handshake(); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return nil // kept open, nothing to say yet: a Raft peer waits for an RPC
	case err == nil:
		return nil // the route sent something: it talks to us
	case errors.Is(err, io.EOF):
		return errors.New("closed after the handshake")
	}
	return err
}

// TestRemovalKeepsTheVotersOdd: removing one of three voters left two, and two voters
// stop the control plane when either stops, which one voter does only when it stops.
// The leader now demotes one of the two at the removal and says so; with the demoted
// node stopped, writes still commit; the node that joins next is promoted with it,
// back to three voters. Before, the two voters stayed, and stopping either stopped
// every write (the token below exits 3). The built binaries.
func TestRemovalKeepsTheVotersOdd(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "odd")
	cp1.Serve()
	byID := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": joinControl(t, cp1, "cp-2"), "cp-3": joinControl(t, cp1, "cp-3")}
	leader := ""
	for id, v := range controlView(t, cp1) {
		if v.Raft == api.RaftLeader {
			leader = id
		}
	}
	gone, kept := "cp-2", "cp-3"
	if leader == "cp-2" {
		gone, kept = "cp-3", "cp-1"
	} else if leader == "cp-3" {
		kept = "cp-1"
	}
	if leader == "" || leader == gone || leader == kept {
		t.Fatalf("leader %q", leader)
	}

	r := byID[leader].Ctl("control", "remove", gone, "--json")
	var res struct{ Removed, Demoted string }
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil || res.Removed != gone || res.Demoted != kept {
		t.Fatalf("control remove %s through the leader %s (exit %d), want %s demoted:\n%s", gone, leader, r.Code, kept, r.Combined())
	}
	if code := byID[gone].Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed node exited %d, want 6", code)
	}
	voters := func() []string {
		var out []string
		for id, v := range controlView(t, byID[leader]) {
			if v.Raft == api.RaftLeader || v.Raft == api.RaftVoter {
				out = append(out, id)
			}
		}
		return out
	}
	if v := voters(); len(v) != 1 || v[0] != leader {
		t.Fatalf("voters after the removal: %v, want only %s", v, leader)
	}
	if v := controlView(t, byID[leader])[kept]; v.Raft != api.RaftNonvoter {
		t.Fatalf("%s after the removal: %+v, want a nonvoter", kept, v)
	}

	// The demoted node stopped: the leader alone is the quorum, and writes commit.
	byID[kept].Process().Kill()
	if r := byID[leader].Ctl("token", "--node", "web-1"); r.Code != 0 {
		t.Fatalf("a token with the demoted node stopped (exit %d): %s", r.Code, r.Combined())
	}
	// Back, it stays a nonvoter (two voters would be even) until another node serves.
	byID[kept].Serve()
	time.Sleep(3 * time.Second) // the autopilot runs every 2 s
	if v := voters(); len(v) != 1 {
		t.Fatalf("voters with the demoted node back alone: %v, want one", v)
	}
	joinControl(t, cp1, "cp-4") // waits for the voters to settle: all three
	if v := voters(); len(v) != 3 || slices.Contains(v, gone) {
		t.Fatalf("voters after cp-4 joined: %v, want three without %s", v, gone)
	}
}

// TestRemovalWithAVoterDown: three voters, one stopped (maintenance, a rolling
// restart), another removed through the leader. The configuration left, the leader
// and the stopped voter, needed the stopped one to commit: the leader stepped down
// as it took the node out, no leader could be elected (the removed node shut out for
// good), and the command said "leadership lost …; run the same command again to
// finish" (exit 3), which only waited. The leader now demotes the stopped voter
// first, which commits with the two serving voters, then removes: the command exits
// 0 and says so, the leader leads alone, writes commit, and the stopped node comes
// back as a nonvoter. The built binaries.
func TestRemovalWithAVoterDown(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "down")
	cp1.Serve()
	byID := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": joinControl(t, cp1, "cp-2"), "cp-3": joinControl(t, cp1, "cp-3")}
	leader := ""
	harness.Eventually(t, 15*time.Second, "three voters, all alive", func() bool {
		voters := 0
		leader = ""
		for id, v := range controlView(t, cp1) {
			if (v.Raft == api.RaftVoter || v.Raft == api.RaftLeader) && v.State == api.StateAlive {
				voters++
			}
			if v.Raft == api.RaftLeader {
				leader = id
			}
		}
		return voters == 3 && leader != ""
	})
	var others []string
	for _, id := range []string{"cp-1", "cp-2", "cp-3"} {
		if id != leader {
			others = append(others, id)
		}
	}
	down, gone := others[0], others[1]

	byID[down].Process().Signal(syscall.SIGTERM)
	if code := byID[down].Process().Wait(20 * time.Second); code != 0 {
		t.Fatalf("%s: serve exited %d on SIGTERM", down, code)
	}
	harness.Eventually(t, 10*time.Second, down+" shown offline by the leader", func() bool {
		return controlView(t, byID[leader])[down].State == api.StateOffline
	})

	r := byID[leader].Ctl("control", "remove", gone, "--json")
	var res struct {
		Removed    string `json:"removed"`
		Demoted    string `json:"demoted"`
		NotServing bool   `json:"demoted_not_serving"`
		SigningKey bool   `json:"held_signing_key"`
	}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil || res.Removed != gone || res.Demoted != down || !res.NotServing || !res.SigningKey {
		t.Fatalf("control remove %s through the leader %s with %s stopped (exit %d), want exit 0 and %s demoted as not serving, the signing key held:\n%s",
			gone, leader, down, r.Code, down, r.Combined())
	}
	if code := byID[gone].Process().Wait(30 * time.Second); code != 6 {
		t.Fatalf("the removed node exited %d, want 6", code)
	}
	// A leader remains, alone a voter, and writes commit.
	if r := byID[leader].Ctl("control", "status"); r.Code != 0 {
		t.Fatalf("control status after the removal (exit %d), want a leader:\n%s", r.Code, r.Combined())
	}
	if r := byID[leader].Ctl("token", "--node", "web-1"); r.Code != 0 {
		t.Fatalf("a token after the removal (exit %d): %s", r.Code, r.Combined())
	}
	view := controlView(t, byID[leader])
	if view[leader].Raft != api.RaftLeader || view[down].Raft != api.RaftNonvoter || view[gone].Raft != api.RaftRemoved {
		t.Fatalf("after the removal: %s %s, %s %s, %s %s; want leader, nonvoter, removed",
			leader, view[leader].Raft, down, view[down].Raft, gone, view[gone].Raft)
	}
	// The stopped node comes back, a nonvoter that serves (one voter and one
	// nonvoter: two voters would be even), and the text says what was done.
	byID[down].Serve()
	harness.Eventually(t, 15*time.Second, down+" serves again", func() bool {
		v := controlView(t, byID[leader])[down]
		return v.State == api.StateAlive && v.Raft == api.RaftNonvoter
	})
}

// TestControlRemoveBeforeAdmissionCancelsTheToken (audit of commands run twice,
// interrupted and concurrent, finding 5): an operator giving up on a control node's
// join runs `meshctl control remove NODE`, as this document says. When the join had
// not reached its admission (not started, or being retried), the command said "no
// control node cp-p was ever admitted" (exit 4), and the token went on able to admit a
// control node, which is handed the signing key, for up to an hour. Now it cancels the
// node's pending control token and says so (exit 0, never_admitted and
// cancelled_tokens with --json, as operations.md lists them); the join with that token
// is refused; run again, nothing is pending, and it exits 4 pointing at token list.
func TestControlRemoveBeforeAdmissionCancelsTheToken(t *testing.T) {
	t.Parallel()
	cp1 := harness.NewControlPlane(t, bin, "neveradmitted")
	cp1.Serve()
	tok, cpp := cp1.ControlToken("cp-p")
	r := cp1.Ctl("control", "remove", "cp-p", "--json")
	if r.Code != 0 {
		t.Fatalf("control remove of cp-p, whose token is pending (exit %d): %s", r.Code, r.Combined())
	}
	var res struct {
		Removed         string          `json:"removed"`
		NeverAdmitted   bool            `json:"never_admitted"`
		CancelledTokens []api.TokenView `json:"cancelled_tokens"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || !res.NeverAdmitted || len(res.CancelledTokens) != 1 ||
		res.CancelledTokens[0].Role != "control" || res.CancelledTokens[0].State != "cancelled" {
		t.Fatalf("control remove --json: %v\n%s", err, r.Stdout)
	}
	keys, _ := oneObject(r.Stdout)
	doc := documentedJSON(t)["meshctl control remove"]
	for _, k := range keys {
		if !doc[k] {
			t.Errorf("control remove --json prints %q, which operations.md does not list", k)
		}
	}
	if l := cp1.Ctl("token", "list", "--node", "cp-p"); l.Code != 0 || !strings.Contains(l.Stdout, res.CancelledTokens[0].ID) || !strings.Contains(l.Stdout, "cancelled") {
		t.Fatalf("token list after the removal: %s", l.Combined())
	}
	if j := cpp.Join(tok); j.Code == 0 || !strings.Contains(j.Combined(), "token_cancelled") {
		t.Fatalf("join with the token of a node removed before its admission (exit %d): %s", j.Code, j.Combined())
	}
	again := cp1.Ctl("control", "remove", "cp-p")
	if again.Code != 4 || !strings.Contains(again.Stderr, "no control token for it is pending") || !strings.Contains(again.Stderr, "meshctl token list --node cp-p") {
		t.Fatalf("control remove of cp-p run again (exit %d): %s", again.Code, again.Combined())
	}
	// Said in words, too.
	cp1.ControlToken("cp-q")
	if r := cp1.Ctl("control", "remove", "cp-q"); r.Code != 0 || !strings.Contains(r.Stdout, "control node cp-q was never admitted: cancelled its pending control token") {
		t.Fatalf("control remove of cp-q (exit %d): %s", r.Code, r.Combined())
	}
}

// TestAControlTokenMintedWithoutTheCAKeyNamesItsHolder (audit of the control
// plane's weeks, finding 3): minting a control token on a node without the CA key
// named the holder its mesh.json recorded at its join, which may be a machine lost
// and removed since. It names the running node whose heartbeats say it holds the
// keys.
func TestAControlTokenMintedWithoutTheCAKeyNamesItsHolder(t *testing.T) {
	t.Parallel() // mostly waits: see TestMain
	cp1 := harness.NewControlPlane(t, bin, "caholder")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	free := harness.FreePorts(t, 1)
	harness.Eventually(t, 20*time.Second, "cp-1 marked as the CA holder", func() bool {
		c, ok := controlView(t, cp2)["cp-1"]
		return ok && c.CAHolder
	})
	r := cp2.Ctl("token", "--role", "control", "--node", "cp-3", "--addr", fmt.Sprintf("127.0.0.1:%d", free[0]))
	if r.Code != 4 || !strings.Contains(r.Stderr, "cp-1 holds it now, as its heartbeats say") {
		t.Fatalf("a control token minted on cp-2: exit %d, want 4 naming cp-1 as the holder now:\n%s", r.Code, r.Combined())
	}
}
