package join

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
	"mesh/tokenfmt"
)

func TestControlAddresses(t *testing.T) {
	got, err := ControlAddresses("10.0.0.2:7300", "", "")
	if err != nil || got.Broker != "10.0.0.2:7300" || got.Raft != "10.0.0.2:7301" || got.Cluster != "10.0.0.2:7302" {
		t.Fatalf("defaults: %+v, %v", got, err)
	}
	got, err = ControlAddresses("10.0.0.2:7300", "10.0.1.2:9000", "10.0.1.2:9001")
	if err != nil || got.Raft != "10.0.1.2:9000" || got.Cluster != "10.0.1.2:9001" {
		t.Fatalf("explicit: %+v, %v", got, err)
	}
	for _, c := range []struct{ broker, raft, cluster, want string }{
		{"", "", "", "--addr"},
		{"cp-2:7300", "", "", "--addr"},                       // a name: the certificate carries IPs
		{"0.0.0.0:7300", "", "", "--addr"},                    // hosts cannot dial "anywhere"
		{"10.0.0.2:0", "", "", "--addr"},                      // no port
		{"10.0.0.2:65535", "", "", "--addr"},                  // +1 and +2 would overflow
		{"10.0.0.2:7300", "raft", "", "--raft-addr"},          // not ip:port
		{"10.0.0.2:7300", "[::]:7301", "", "--raft-addr"},     // unspecified
		{"10.0.0.2:7300", "", "10.0.0.2:0", "--cluster-addr"}, // no port
		{"10.0.0.2:7300", "10.0.0.2:7300", "", "must differ"}, // the broker's own port
		{"10.0.0.2:7300", "", "10.0.0.2:7301", "must differ"}, // the default Raft port
		{"10.0.0.2:7300", strings.Repeat("9", 300), "", "--raft-addr"},
	} {
		if _, err := ControlAddresses(c.broker, c.raft, c.cluster); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ControlAddresses(%q, %q, %q) = %v, want an error naming %s", c.broker, c.raft, c.cluster, err, c.want)
		}
	}
}

// controlToken mints a control token for node cp-2 of mesh "m" whose broker is addr
// and whose pin is pin.
func controlToken(t *testing.T, addr string, pin [32]byte, role tokenfmt.Role, now time.Time) string {
	t.Helper()
	return controlTokenFor(t, []string{addr}, pin, role, now)
}

// controlTokenFor is controlToken naming the brokers addrs, in this order.
func controlTokenFor(t *testing.T, addrs []string, pin [32]byte, role tokenfmt.Role, now time.Time) string {
	t.Helper()
	var brokers []netip.AddrPort
	for _, a := range addrs {
		brokers = append(brokers, netip.MustParseAddrPort(a))
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	tok, err := tokenfmt.Mint(tokenfmt.MintOptions{
		Mesh: "m", Brokers: brokers, CAPin: pin, SigningKey: pub,
		Node: "cp-2", Role: role, TTL: 15 * time.Minute, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode()
}

func TestJoinRefusesUnusableTokens(t *testing.T) {
	pin := [32]byte{1}
	now := time.Now()
	for name, c := range map[string]struct {
		token, want string
	}{
		"empty":            {"", "empty"},
		"garbage":          {"not a token at all", "not a mesh join token"},
		"truncated":        {controlToken(t, "127.0.0.1:7300", pin, tokenfmt.RoleControl, now)[:40], "truncated"},
		"worker token":     {controlToken(t, "127.0.0.1:7300", pin, tokenfmt.RoleWorker, now), "workers enrol with meshhost enrol"},
		"expired long ago": {controlToken(t, "127.0.0.1:7300", pin, tokenfmt.RoleControl, now.Add(-time.Hour)), "expired"},
		"oversized":        {strings.Repeat("A", 1<<20), "more than the 4096"},
		"blank":            {"  \n", "empty"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cp-2")
			err := Join(t.Context(), Options{Dir: datadir.Dir(dir), Token: c.token})
			if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want ErrToken naming %q, got %v", c.want, err)
			}
			if _, statErr := os.Stat(dir); !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("a refused token created %s", dir)
			}
		})
	}
}

// TestAnExpiredTokenOfAnAdmittedJoinSaysRemoveFirst: a join the mesh admitted
// (mesh.json records it, unfinished) run again after its token expired was told
// "mint a new one with meshctl token", which the mesh refuses while the node is
// admitted (node_exists). It says now that the join resumes only while its token is
// valid, and that the node must be removed first; a directory that holds no
// admitted join of this node is told what it was.
func TestAnExpiredTokenOfAnAdmittedJoinSaysRemoveFirst(t *testing.T) {
	pin := [32]byte{1}
	tok := controlToken(t, "127.0.0.1:7300", pin, tokenfmt.RoleControl, time.Now().Add(-time.Hour))
	d := datadir.Dir(t.TempDir())
	save(t, d, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.1:7300", Brokers: []string{"127.0.0.1:7300"}, Joining: true, Joined: true})
	err := Join(t.Context(), Options{Dir: d, Token: tok})
	if !errors.Is(err, ErrToken) || !errors.Is(err, tokenfmt.ErrExpired) || !strings.Contains(err.Error(), "meshctl control remove cp-2") ||
		!strings.Contains(err.Error(), "only while the token is valid") {
		t.Fatalf("an admitted join's expired token: %v", err)
	}
	other := datadir.Dir(t.TempDir())
	save(t, other, datadir.Config{Mesh: "m", Node: "cp-3", Listen: "127.0.0.1:7300", Brokers: []string{"127.0.0.1:7300"}, Joining: true, Joined: true})
	if err := Join(t.Context(), Options{Dir: other, Token: tok}); !errors.Is(err, ErrToken) || strings.Contains(err.Error(), "control remove") {
		t.Fatalf("another node's directory: %v", err)
	}
}

// TestAJoinRunAgainWithItsExpiredTokenIsANoOp: run again on a node its token
// joined, long after the token expired (a provisioning script's second run), join
// said the token expired, exit 4, "mint a new one", which the mesh then refused
// (node_exists; a docs walkthrough); it is "already joined", as within the token's
// life. Another node's directory is still refused for the token.
func TestAJoinRunAgainWithItsExpiredTokenIsANoOp(t *testing.T) {
	pin := [32]byte{1}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tok := controlToken(t, "127.0.0.1:1", pin, tokenfmt.RoleControl, now.Add(-2*time.Hour))
	d := datadir.Dir(t.TempDir())
	save(t, d, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, CAPin: "00"})
	before := listing(t, d)
	err := Join(t.Context(), Options{Dir: d, Token: tok, Now: func() time.Time { return now }})
	if !errors.Is(err, ErrAlreadyJoined) {
		t.Fatalf("a joined node's expired token: %v, want already joined", err)
	}
	if after := listing(t, d); after != before {
		t.Fatalf("the join run again changed the directory: %s -> %s", before, after)
	}
	other := datadir.Dir(t.TempDir())
	save(t, other, datadir.Config{Mesh: "m", Node: "cp-7", Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, CAPin: "00"})
	if err := Join(t.Context(), Options{Dir: other, Token: tok, Now: func() time.Time { return now }}); !errors.Is(err, ErrToken) {
		t.Fatalf("another node's directory, an expired token: %v, want the token refused", err)
	}
}

// TestAnExpiredTokenNamesThisClock (clock audit, finding 6): a token expired by
// this machine's clock was refused as "the token expired 7m ago … mint a new one",
// naming no clock, where meshhost enrol names its own; one expired by less than
// the tolerance, passed on for the mesh's clock to decide, was printed as "expires
// in -3m0s".
func TestAnExpiredTokenNamesThisClock(t *testing.T) {
	pin := [32]byte{1}
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	// Minted 22 minutes ago for 15: expired 7 minutes ago by this clock.
	err := Join(t.Context(), Options{Dir: datadir.Dir(t.TempDir()), Now: clock,
		Token: controlToken(t, "127.0.0.1:1", pin, tokenfmt.RoleControl, now.Add(-22*time.Minute))})
	if !errors.Is(err, ErrToken) || !errors.Is(err, tokenfmt.ErrExpired) ||
		!strings.Contains(err.Error(), "by this machine's clock, which reads 2026-12-06T12:00:00Z; the mesh's clock decides") {
		t.Fatalf("a token expired 7m ago by this clock: %v", err)
	}

	// Expired 3 minutes ago: passed on. The data directory in the way stops the
	// join after its first step.
	d := datadir.Dir(t.TempDir())
	write(t, d.Path("notes.txt"), "mine")
	var out strings.Builder
	err = Join(t.Context(), Options{Dir: d, Now: clock, Out: &out,
		Token: controlToken(t, "127.0.0.1:1", pin, tokenfmt.RoleControl, now.Add(-18*time.Minute))})
	if !errors.Is(err, ErrDataDir) {
		t.Fatalf("want the directory refused after the token step, got %v", err)
	}
	if !strings.Contains(out.String(), "expired 3m0s ago by this machine's clock; the mesh's clock decides") || strings.Contains(out.String(), "expires in -") {
		t.Fatalf("the token step of a token expired within the tolerance:\n%s", out.String())
	}
}

func TestJoinDataDirectoryInTheWay(t *testing.T) {
	pin := [32]byte{1}
	tok := controlToken(t, "127.0.0.1:1", pin, tokenfmt.RoleControl, time.Now())
	for name, c := range map[string]struct {
		prepare func(d datadir.Dir)
		target  error
		want    string
	}{
		"not empty": {func(d datadir.Dir) { write(t, d.Path("notes.txt"), "mine") }, ErrDataDir, "not empty"},
		"another mesh's node": {func(d datadir.Dir) {
			save(t, d, datadir.Config{Mesh: "other", Node: "cp-2", Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, CAPin: "00"})
		}, ErrDataDir, "use another --data directory"},
		"another node of this mesh": {func(d datadir.Dir) {
			save(t, d, datadir.Config{Mesh: "m", Node: "cp-7", Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, CAPin: "00"})
		}, ErrDataDir, "cp-7"},
		"already joined": {func(d datadir.Dir) {
			save(t, d, datadir.Config{Mesh: "m", Node: "cp-2", Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, CAPin: "00"})
		}, ErrAlreadyJoined, "as its files say; nothing to do (start it with meshctl serve --data"},
		"corrupt mesh.json":  {func(d datadir.Dir) { write(t, d.Path(datadir.ConfigFile), `{"mesh":`) }, datadir.ErrTruncated, "cut short"},
		"mesh.json not JSON": {func(d datadir.Dir) { write(t, d.Path(datadir.ConfigFile), `mesh = m`) }, datadir.ErrCorrupt, "mesh.json"},
	} {
		t.Run(name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			c.prepare(d)
			before := listing(t, d)
			err := Join(t.Context(), Options{Dir: d, Token: tok})
			if !errors.Is(err, c.target) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want %v naming %q, got %v", c.target, c.want, err)
			}
			if after := listing(t, d); after != before {
				t.Fatalf("the refused join changed the directory: %s -> %s", before, after)
			}
		})
	}
}

// TestJoinRefusesAnImpostorBeforeTheSecret: a TLS server under another CA at the
// token's broker address gets a handshake and not one application byte, so the
// secret never leaves; nothing is written but the join's own pending keys.
func TestJoinRefusesAnImpostorBeforeTheSecret(t *testing.T) {
	now := time.Now()
	other, _, err := pki.NewCA("impostor", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := other.IssueLeaf("impostor", []net.IP{net.IPv4(127, 0, 0, 1)}, now)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerConfig(leaf, other.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	var received, dialled atomic.Int64
	ln := impostor(t, cfg, &dialled, &received)

	realCA, _, err := pki.NewCA("m", now)
	if err != nil {
		t.Fatal(err)
	}
	tok := controlToken(t, ln.Addr().String(), realCA.Pin(), tokenfmt.RoleControl, now)
	d := datadir.Dir(filepath.Join(t.TempDir(), "cp-2"))
	err = Join(t.Context(), Options{Dir: d, Token: tok})
	if !errors.Is(err, pki.ErrPinMismatch) {
		t.Fatalf("want the pin mismatch, got %v", err)
	}
	ln.Close()
	time.Sleep(100 * time.Millisecond)
	if n := received.Load(); n != 0 {
		t.Fatalf("the impostor received %d application bytes", n)
	}
	if d.Exists(datadir.ConfigFile) {
		t.Fatal("a refused join wrote mesh.json")
	}

	// A broker given beside the token (--broker: the token's only broker, the
	// bootstrap machine's, is gone; a docs walkthrough was stuck there) is tried
	// after it, and its pin checked as the token's: the impostor is refused there.
	dialled.Store(0)
	ln2 := impostor(t, cfg, &dialled, &received)
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close()
	tok = controlToken(t, goneAddr, realCA.Pin(), tokenfmt.RoleControl, now)
	d = datadir.Dir(filepath.Join(t.TempDir(), "cp-2"))
	err = Join(t.Context(), Options{Dir: d, Token: tok, Brokers: []netip.AddrPort{netip.MustParseAddrPort(ln2.Addr().String())}})
	if err == nil || dialled.Load() == 0 || !strings.Contains(err.Error(), ln2.Addr().String()+": the server's certificate does not chain to the pinned mesh CA") {
		t.Fatalf("a broker given beside the token: %v (dialled %d times), want it tried and its pin refused", err, dialled.Load())
	}
	ln2.Close()
	time.Sleep(100 * time.Millisecond)
	if n := received.Load(); n != 0 {
		t.Fatalf("the impostor given beside the token received %d application bytes", n)
	}
}

func TestJoinUnreachableSaysRetry(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	pin := [32]byte{1}
	d := datadir.Dir(filepath.Join(t.TempDir(), "cp-2"))
	err = Join(t.Context(), Options{Dir: d, Token: controlToken(t, addr, pin, tokenfmt.RoleControl, time.Now())})
	if err == nil || !strings.Contains(err.Error(), "run it again once one runs") || !strings.Contains(err.Error(), "meshctl join --broker IP:PORT") {
		t.Fatalf("want an unreachable mesh that says to run it again, or give --broker, got %v", err)
	}
	if d.Exists(datadir.ConfigFile) {
		t.Fatal("an unreachable mesh left mesh.json")
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func save(t *testing.T, d datadir.Dir, c datadir.Config) {
	t.Helper()
	if err := d.SaveConfig(c); err != nil {
		t.Fatal(err)
	}
}

func listing(t *testing.T, d datadir.Dir) string {
	t.Helper()
	entries, err := os.ReadDir(string(d))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		info, _ := e.Info()
		names = append(names, e.Name()+":"+info.ModTime().String())
	}
	return strings.Join(names, ",")
}

// TestJoinResumesAfterKeysSavedInPart: a run that failed while saving the keys it
// was handed (a disk error), before mesh.json, left them beside its pending file.
// The token is spent on that join, and only this directory's pending keys can
// finish it; the next run was refused as "not empty and holds no join". Now it
// resumes (here, as far as the unreachable broker lets it). Those files without the
// pending file, or another file beside them, are still refused.
func TestJoinResumesAfterKeysSavedInPart(t *testing.T) {
	tok, pendingOf, hash := unreachableJoin(t)
	pendingJSON := pendingOf(hash)
	partial := func(d datadir.Dir) {
		write(t, d.Path(datadir.CACertFile), "ca")
		write(t, d.Path(datadir.TLSKeyFile), "key")
		write(t, d.Path("."+datadir.AdminCredsFile+".tmp-123"), "creds, in part")
	}
	for name, c := range map[string]struct {
		prepare func(d datadir.Dir)
		refused bool
	}{
		"keys in part beside the pending file": {func(d datadir.Dir) { write(t, d.Path(pendingFile), string(pendingJSON)); partial(d) }, false},
		"keys in part alone":                   {partial, true},
		"and another file": {func(d datadir.Dir) {
			write(t, d.Path(pendingFile), string(pendingJSON))
			partial(d)
			write(t, d.Path("notes.txt"), "mine")
		}, true},
		// Killed while it wrote mesh.json: the temporary file of that write is
		// removed under the lock the killed run left (it was "not empty").
		"killed writing mesh.json": {func(d datadir.Dir) {
			write(t, d.Path(datadir.LockFile), `{"pid":1,"command":"meshctl join"}`)
			write(t, d.Path(pendingFile), string(pendingJSON))
			partial(d)
			write(t, d.Path("."+datadir.ConfigFile+".tmp-456"), `{"format":1,"mesh":`)
		}, false},
	} {
		t.Run(name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			c.prepare(d)
			var out strings.Builder
			err := Join(t.Context(), Options{Dir: d, Token: tok, Out: &out})
			if c.refused {
				if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), "not empty") {
					t.Fatalf("want ErrDataDir (not empty), got %v", err)
				}
				return
			}
			if errors.Is(err, ErrDataDir) || !strings.Contains(out.String(), "unfinished join, saved in part: resuming") {
				t.Fatalf("not resumed: %v\n%s", err, out.String())
			}
		})
	}
}

// TestAJoinRunAgainSaysItPresentsTheSameKeys (a walkthrough): a join run again
// after one that stopped before the mesh's answer said its data directory "is
// new", as it presented the keys the mesh may have admitted. Now it says it holds
// an earlier run's keys and presents them again, or that another token's keys are
// replaced.
func TestAJoinRunAgainSaysItPresentsTheSameKeys(t *testing.T) {
	tok, pendingOf, hash := unreachableJoin(t)
	for name, c := range map[string]struct {
		hash string
		says string
	}{
		"this token's keys":    {hash, "presenting again the keys an earlier run of this join presented"},
		"another token's keys": {hexOf(make([]byte, 32)), "held the keys of a join of this node with another token: new keys replace them"},
	} {
		t.Run(name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			write(t, d.Path(pendingFile), string(pendingOf(c.hash)))
			var out strings.Builder
			if err := Join(t.Context(), Options{Dir: d, Token: tok, Out: &out}); err == nil {
				t.Fatal("joined through an unreachable broker")
			}
			steps := out.String()
			if strings.Contains(steps, "is new") || !strings.Contains(steps, "holds the keys an earlier run of a join presented") || !strings.Contains(steps, c.says) {
				t.Fatalf("the steps do not say what the directory holds and what is presented:\n%s", steps)
			}
		})
	}
}

// TestAnAdmittedJoinsKeysAreNotReplaced (a review): the keys of another node's
// join the mesh admitted (its identity saved in part) were replaced by new ones
// when join ran with this node's token, and only they could finish that join: it
// is refused, the keys kept byte for byte, naming that node. Another token of this
// node's replaces them (a second review): the mesh mints one only once the node
// is removed, or no token of it was used, when the old keys finish nothing; unless
// the keys are of its join into another mesh (that mesh's CA saved), whose
// admission stands.
func TestAnAdmittedJoinsKeysAreNotReplaced(t *testing.T) {
	tok, pendingOf, _ := unreachableJoin(t)
	parsed, err := tokenfmt.Parse(tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var other map[string]string
	if err := json.Unmarshal(pendingOf(hexOf(make([]byte, 32))), &other); err != nil {
		t.Fatal(err)
	}
	other["node"] = "cp-9"
	otherNodes, _ := json.Marshal(other)
	d := datadir.Dir(t.TempDir())
	write(t, d.Path(datadir.CACertFile), "ca")
	write(t, d.Path("."+datadir.TLSKeyFile+".tmp-1"), "key, in part")
	write(t, d.Path(pendingFile), string(otherNodes))
	var out strings.Builder
	err = Join(t.Context(), Options{Dir: d, Token: tok, Out: &out})
	if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), "a join of cp-9 that the mesh admitted") || !strings.Contains(err.Error(), "meshctl control remove cp-9") {
		t.Fatalf("another node's admitted join: %v, want ErrDataDir naming cp-9\n%s", err, out.String())
	}
	if got, _ := os.ReadFile(d.Path(pendingFile)); string(got) != string(otherNodes) {
		t.Fatalf("the admitted join's keys were changed: %s", got)
	}

	// Another node's keys, nothing saved (its answer perhaps lost after the mesh
	// admitted it): replaced, saying how to tell and what then stays to do.
	d = datadir.Dir(t.TempDir())
	write(t, d.Path(pendingFile), string(otherNodes))
	out.Reset()
	if err := Join(t.Context(), Options{Dir: d, Token: tok, Out: &out}); errors.Is(err, ErrDataDir) ||
		!strings.Contains(out.String(), "held the keys of a join of cp-9, which saved nothing here: new keys replace them") ||
		!strings.Contains(out.String(), "meshctl control remove cp-9") {
		t.Fatalf("another node's keys, nothing saved: %v\n%s", err, out.String())
	}

	// This node's join into another mesh, admitted there (that mesh's CA saved):
	// the other mesh's admission of the id stands, and only these keys finish it.
	otherCA, _, err := pki.NewCA("elsewhere", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d = datadir.Dir(t.TempDir())
	write(t, d.Path(datadir.CACertFile), string(otherCA.CertPEM))
	otherMesh := pendingOf(hexOf(make([]byte, 32)))
	write(t, d.Path(pendingFile), string(otherMesh))
	out.Reset()
	err = Join(t.Context(), Options{Dir: d, Token: tok, Out: &out})
	if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), "a join of "+parsed.Node+" into mesh elsewhere that the mesh admitted") ||
		!strings.Contains(err.Error(), "meshctl control remove "+parsed.Node+", in mesh elsewhere") {
		t.Fatalf("this node's admitted join into another mesh: %v, want ErrDataDir naming that mesh\n%s", err, out.String())
	}
	if got, _ := os.ReadFile(d.Path(pendingFile)); string(got) != string(otherMesh) {
		t.Fatalf("the other mesh's admitted join's keys were changed: %s", got)
	}

	// This node's, another token of this mesh (its CA saved in part): replaced,
	// saying so.
	thisCA, _, err := pki.NewCA(parsed.Mesh, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d = datadir.Dir(t.TempDir())
	save(t, d, datadir.Config{Mesh: parsed.Mesh, Node: parsed.Node, Listen: "127.0.0.1:1", Brokers: []string{"127.0.0.1:1"}, Joining: true, Joined: true})
	write(t, d.Path(datadir.CACertFile), string(thisCA.CertPEM))
	write(t, d.Path(pendingFile), string(pendingOf(hexOf(make([]byte, 32)))))
	out.Reset()
	if err := Join(t.Context(), Options{Dir: d, Token: tok, Out: &out}); errors.Is(err, ErrDataDir) || !strings.Contains(out.String(), "new keys replace them") {
		t.Fatalf("this node's join with another token: %v, want its keys replaced\n%s", err, out.String())
	}
}

// TestAnAdmissionThatFailedIsRetried: the mesh's `internal` (it failed to answer)
// is not a refusal of the token: like `unavailable` and `disk_full`, the join says
// to run it again (exit 3), where it exited 4 as if the token were refused. Other
// codes refuse; only those that use the token up, or find its node or key taken,
// drop the join's keys saying no join can finish with it: an older control node's
// refusal says the token is not used, and the same token joins once it is upgraded
// (a review: the keys were dropped, and the line said the opposite). The mesh's
// error stays in the chain, for errors.As.
func TestAnAdmissionThatFailedIsRetried(t *testing.T) {
	for code, want := range map[string]struct {
		err   error
		spent bool
	}{
		api.CodeUnavailable:      {ErrUnavailable, false},
		api.CodeInternal:         {ErrUnavailable, false},
		api.CodeDiskFull:         {ErrUnavailable, false},
		api.CodeTokenUsed:        {ErrRefused, true},
		api.CodeNodeExists:       {ErrRefused, true},
		api.CodeTokenUnknown:     {ErrRefused, true},
		api.CodeTokenCancelled:   {ErrRefused, true},
		api.CodeKeyInUse:         {ErrRefused, true},
		api.CodeOlderControlNode: {ErrRefused, false},
		api.CodeBadRequest:       {ErrRefused, false},
		api.CodeNotCAHolder:      {ErrRefused, false},
	} {
		err := answerError(&api.Error{Code: code, Message: "m"})
		var ae *api.Error
		if !errors.Is(err, want.err) || !strings.Contains(err.Error(), code) || !errors.As(err, &ae) || ae.Code != code {
			t.Errorf("%s: %v, want %v with the mesh's error in its chain", code, err, want.err)
		}
		if tokenSpent(err) != want.spent {
			t.Errorf("%s: token spent %t, want %t", code, tokenSpent(err), want.spent)
		}
	}
}

// TestOnlyATokenSpentDropsTheJoinsKeys: the join's keys (join-pending.json) go, with
// a line saying no join can finish with the token, only after a refusal that spent
// it; after an older control node's refusal, which says the token is not used, they
// stay and nothing says otherwise (a review: they went, and the line said so).
func TestOnlyATokenSpentDropsTheJoinsKeys(t *testing.T) {
	for code, dropped := range map[string]bool{
		api.CodeTokenUsed: true, api.CodeTokenExpired: true, api.CodeOlderControlNode: false, api.CodeBadRequest: false, api.CodeUnavailable: false,
	} {
		d := datadir.Dir(t.TempDir())
		write(t, d.Path(pendingFile), "{}")
		var out strings.Builder
		r := &run{o: Options{Dir: d, Out: &out}}
		err := r.dropSpentKeys(answerError(&api.Error{Code: code, Message: "m"}))
		_, serr := os.Stat(d.Path(pendingFile))
		if gone := errors.Is(serr, os.ErrNotExist); gone != dropped || strings.Contains(out.String(), "for good") != dropped {
			t.Errorf("%s: keys removed %t, want %t; said:\n%s", code, gone, dropped, out.String())
		}
		if !strings.Contains(err.Error(), code) {
			t.Errorf("%s: the error does not name its code: %v", code, err)
		}
	}
}

// TestARefusalAfterAnUnansweredSendingKeepsTheJoinsKeys: the join request went
// unanswered and was sent again (a leader that stopped as it came took it), and the
// second sending was refused in a way the first, perhaps being committed, can
// overtake (token_expired from a leader that had not yet applied it; unavailable).
// That refusal is not final: ErrUnavailable, the keys kept, the same token advised.
// A refusal no sending can overtake stays what it was.
func TestARefusalAfterAnUnansweredSendingKeepsTheJoinsKeys(t *testing.T) {
	for code, settles := range map[string]bool{
		api.CodeTokenExpired: false, api.CodeUnavailable: false, api.CodeInternal: false, api.CodeDiskFull: false,
		api.CodeTokenUsed: true, api.CodeTokenCancelled: true, api.CodeNodeExists: true, api.CodeOlderControlNode: true,
	} {
		data, _ := json.Marshal(api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: code, Message: "m"}})
		if admitSettles(data) != settles {
			t.Errorf("%s: settles %t, want %t", code, admitSettles(data), settles)
		}
	}
	if data, _ := json.Marshal(api.EnrolResponse{V: api.ProtocolVersion, OK: true}); !admitSettles(data) {
		t.Error("an admission does not settle")
	}
	d := datadir.Dir(t.TempDir())
	write(t, d.Path(pendingFile), "{}")
	var out strings.Builder
	r := &run{o: Options{Dir: d, Out: &out}}
	err := r.dropSpentKeys(refusalError(&api.Error{Code: api.CodeTokenExpired, Message: "m"}, true))
	var ae *api.Error
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRefused) || !errors.As(err, &ae) || ae.Code != api.CodeTokenExpired ||
		!strings.Contains(err.Error(), "run the join again with the same token") {
		t.Fatalf("got %v, want it not final, the mesh's error in its chain", err)
	}
	if _, serr := os.Stat(d.Path(pendingFile)); serr != nil || strings.Contains(out.String(), "for good") {
		t.Fatalf("the keys an earlier sending may have admitted were dropped (%v):\n%s", serr, out.String())
	}
	if err := refusalError(&api.Error{Code: api.CodeTokenExpired, Message: "m"}, false); !tokenSpent(err) {
		t.Fatalf("sent once, token_expired spends the token: %v", err)
	}
}

// unreachableJoin is a control token whose one broker is not there, the pending
// file of a join with keys of its own under a token hash (pendingOf), and the
// token's own hash.
func unreachableJoin(t *testing.T) (tok string, pendingOf func(hash string) []byte, hash string) {
	t.Helper()
	tok = controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	parsed, err := tokenfmt.Parse(tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	th := parsed.SecretHash()
	user, _ := nkeys.CreateUser()
	curve, _ := nkeys.CreateCurveKeys()
	userSeed, _ := user.Seed()
	curveSeed, _ := curve.Seed()
	return tok, func(hash string) []byte {
		data, _ := json.Marshal(map[string]string{"node": parsed.Node, "token_hash": hash,
			"nkey_seed": string(userSeed), "curve_seed": string(curveSeed)})
		return data
	}, hexOf(th[:])
}

// impostor listens on loopback with cfg (another CA's certificate), counting the
// connections it accepts (dialled) and the application bytes each sends after the
// handshake (received); it is closed with the test.
func impostor(t *testing.T, cfg *tls.Config, dialled, received *atomic.Int64) net.Listener {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				n, _ := io.Copy(io.Discard, c) // completes the handshake, counts what follows
				received.Add(n)
			}()
		}
	}()
	return ln
}

// TestAMintWhereTheCAFilesAreHalfRestoredNamesTheMissingOne: a control token needs
// the CA key and the operator account key; with one of them restored (losing the
// bootstrap machine, step 3), the refusal said the directory held neither and sent
// the operator looking for the file that was there (a docs walkthrough).
func TestAMintWhereTheCAFilesAreHalfRestoredNamesTheMissingOne(t *testing.T) {
	for _, c := range []struct{ present, missing string }{
		{datadir.CAKeyFile, datadir.AccountKeyFile},
		{datadir.AccountKeyFile, datadir.CAKeyFile},
	} {
		dir := datadir.Dir(t.TempDir())
		if err := dir.SaveConfig(datadir.Config{Format: datadir.ConfigFormat, Mesh: "m", Node: "cp-5", Listen: "127.0.0.1:1",
			RaftListen: "127.0.0.1:2", ClusterListen: "127.0.0.1:3", Brokers: []string{"127.0.0.1:1"}, CAPin: strings.Repeat("ab", 32), CAHolder: "cp-1", Joined: true}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dir.Path(c.present), []byte("restored"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, _, err := Mint(dir, MintOptions{Node: "cp-6", Broker: "127.0.0.1:4", Operator: operator.Options{Timeout: time.Second}})
		want := "holds " + c.present + " but not " + c.missing
		if !errors.Is(err, ErrNotCAHolder) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s restored alone: %v; want ErrNotCAHolder saying %q", c.present, err, want)
		}
	}
}

// TestAFarExpiryIsSaidAsADate (a walkthrough): a token expiring far ahead of this
// machine's clock printed "expires in 2562047h47m16.854775807s", the duration's
// overflow; it is said as a date.
func TestAFarExpiryIsSaidAsADate(t *testing.T) {
	far := time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC)
	var out strings.Builder
	err := Join(t.Context(), Options{Dir: datadir.Dir(t.TempDir() + "/cp-2"), Token: controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, far), Out: &out})
	if err == nil || !strings.Contains(out.String(), "expires at 9000-01-01T00:15:00Z, far past the hour a token lives") || strings.Contains(out.String(), "2562047h") {
		t.Fatalf("err %v, steps:\n%s", err, out.String())
	}
}

// TestARedactedTokenIsSaidAsSuch (a walkthrough): a token copied from a log, its
// secret "<redacted>", was refused as truncated, "copy the whole line again".
func TestARedactedTokenIsSaidAsSuch(t *testing.T) {
	text := "mesh1_m_127.0.0.1:1_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_cp-2_control_1796000900_<redacted>"
	// A mesh or a node whose id holds "mesh1" (a review: the check counted
	// "mesh" in the whole line).
	for _, redacted := range []string{text, strings.Replace(text, "_m_", "_meshlab_", 1), strings.Replace(text, "_cp-2_", "_mesh1_", 1)} {
		err := Join(t.Context(), Options{Dir: datadir.Dir(t.TempDir() + "/cp-2"), Token: redacted, Out: io.Discard})
		if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), "a token as a log prints it") || strings.Contains(err.Error(), "copy the whole line") {
			t.Fatalf("Join(%s) = %v", redacted, err)
		}
	}
}
