package bootstrap

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/integration/freeport"
)

func options(t *testing.T, dir string) (Options, *bytes.Buffer) {
	t.Helper()
	addrs := freeport.Addrs(t, 3)
	out := &bytes.Buffer{}
	return Options{
		Mesh:          "demo",
		Node:          "cp-1",
		Listen:        addrs[0],
		RaftListen:    addrs[1],
		ClusterListen: addrs[2],
		Dir:           datadir.Dir(dir),
		Out:           out,
		Now:           time.Now,
	}, out
}

var secretFiles = []string{datadir.CAKeyFile, datadir.TLSKeyFile, datadir.SigningKeyFile, datadir.AdminCredsFile, datadir.AccountKeyFile}
var publicFiles = []string{datadir.ConfigFile, datadir.CACertFile, datadir.TLSCertFile}

// snapshotDir reads every regular file under dir (raft excluded: bolt rewrites it;
// the lock file too: it names whoever holds the lock, a dry run included).
func snapshotDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || e.Name() == datadir.LockFile {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func caPin(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, datadir.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := pki.ParseCertificatePEM(b)
	if err != nil {
		t.Fatal(err)
	}
	p := pki.PinOf(c)
	return hex.EncodeToString(p[:])
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	// The lock file is the lock bootstrap held, not something it made.
	entries = slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == datadir.LockFile })
	if len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s holds %v; nothing should have been written", dir, names)
	}
}

func TestDryRunPrintsThePlanAndChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o, out := options(t, dir)
	o.DryRun = true
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"plan:", "check", "config", "ca", "tls", "signing", "operator", "raft", "dry run: nothing was changed", o.Listen, o.RaftListen, o.ClusterListen} {
		if !strings.Contains(text, want) {
			t.Errorf("plan does not mention %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "running:") {
		t.Error("a dry run ran steps")
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a dry run created the data directory: %v", err)
	}
}

func TestFullRun(t *testing.T) {
	dir := t.TempDir()
	o, out := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, name := range secretFiles {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if info.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", name, info.Mode().Perm())
		}
	}
	for _, name := range publicFiles {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if info.Mode().Perm() != 0o644 {
			t.Errorf("%s has mode %v, want 0644", name, info.Mode().Perm())
		}
	}
	if info, err := os.Stat(filepath.Join(dir, datadir.RaftDir)); err != nil || !info.IsDir() {
		t.Fatalf("no raft directory: %v", err)
	}

	d := datadir.Dir(dir)
	cfg, err := d.LoadConfig()
	if err != nil {
		t.Fatalf("mesh.json after bootstrap: %v", err)
	}
	if cfg.Mesh != "demo" || cfg.Node != "cp-1" || cfg.Listen != o.Listen || cfg.RaftListen != o.RaftListen ||
		cfg.ClusterListen != o.ClusterListen || len(cfg.Brokers) != 1 || cfg.Brokers[0] != o.Listen {
		t.Fatalf("config = %+v", cfg)
	}
	if cfg.CAPin != caPin(t, dir) {
		t.Fatalf("recorded pin %s is not the CA's %s", cfg.CAPin, caPin(t, dir))
	}
	if !strings.Contains(out.String(), cfg.CAPin) {
		t.Error("the pin was not printed")
	}

	// The CA loads, and the TLS leaf verifies against it for both usages.
	ca, err := d.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := d.LoadLeaf()
	if err != nil {
		t.Fatal(err)
	}
	lc, err := pki.ParseCertificatePEM(leaf.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := pki.VerifyPinnedChain([]*x509.Certificate{lc, ca.Cert}, ca.Pin()); err != nil {
		t.Fatalf("leaf does not reach the pin: %v", err)
	}
	if len(lc.IPAddresses) == 0 || !lc.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Errorf("leaf IP SANs = %v", lc.IPAddresses)
	}
	if _, err := pki.MutualConfig(leaf, ca.CertPEM); err != nil {
		t.Fatalf("leaf unusable for mutual TLS: %v", err)
	}
	if _, err := d.LoadSigningKey(); err != nil {
		t.Fatal(err)
	}

	// The operator creds are issued by the recorded admin account, whose seed is the
	// account key file.
	creds, _ := d.ReadFile(datadir.AdminCredsFile)
	tok, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Issuer != cfg.AdminAccount {
		t.Fatalf("creds issued by %s, config records %s", claims.Issuer, cfg.AdminAccount)
	}
	seed, _ := d.ReadFile(datadir.AccountKeyFile)
	acct, err := nkeys.FromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	if pub, _ := acct.PublicKey(); pub != cfg.AdminAccount {
		t.Fatalf("account key file holds %s, config records %s", pub, cfg.AdminAccount)
	}
	// No secret is printed.
	for _, name := range []string{datadir.CAKeyFile, datadir.SigningKeyFile, datadir.AccountKeyFile} {
		b, _ := d.ReadFile(name)
		if bytes.Contains(out.Bytes(), bytes.TrimSpace(b)) {
			t.Errorf("%s was printed", name)
		}
	}
	if bytes.Contains(out.Bytes(), seed) {
		t.Error("the account seed was printed")
	}
}

func TestSecondRunDoesNothing(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, dir)
	out := &bytes.Buffer{}
	o.Out = out
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nothing to do") {
		t.Fatalf("second run output:\n%s", out)
	}
	if strings.Count(out.String(), "already done: skipped") != 6 {
		t.Errorf("the plan does not mark the six done steps:\n%s", out)
	}
	after := snapshotDir(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files changed: %d before, %d after", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s changed on a second run", name)
		}
	}
	// It does not even need the addresses: a running control node holds them.
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := Run(o); err != nil {
		t.Fatalf("a complete bootstrap re-run while the node serves: %v", err)
	}
}

func TestInterruptedRunResumesWithTheSameCA(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	pin := caPin(t, dir)
	caPEM, _ := os.ReadFile(filepath.Join(dir, datadir.CACertFile))
	caKey, _ := os.ReadFile(filepath.Join(dir, datadir.CAKeyFile))
	oldLeaf, _ := os.ReadFile(filepath.Join(dir, datadir.TLSCertFile))

	// Everything after the CA step is lost.
	for _, name := range []string{datadir.RaftDir, datadir.TLSCertFile, datadir.TLSKeyFile, datadir.SigningKeyFile, datadir.AdminCredsFile} {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	out := &bytes.Buffer{}
	o.Out = out
	if err := Run(o); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := caPin(t, dir); got != pin {
		t.Fatalf("resume made a new CA: pin %s, was %s", got, pin)
	}
	nowPEM, _ := os.ReadFile(filepath.Join(dir, datadir.CACertFile))
	nowKey, _ := os.ReadFile(filepath.Join(dir, datadir.CAKeyFile))
	if !bytes.Equal(nowPEM, caPEM) || !bytes.Equal(nowKey, caKey) {
		t.Fatal("resume rewrote the CA")
	}
	if !strings.Contains(out.String(), "already done") {
		t.Errorf("resume output does not say what was skipped:\n%s", out)
	}
	newLeaf, err := os.ReadFile(filepath.Join(dir, datadir.TLSCertFile))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(newLeaf, oldLeaf) {
		t.Fatal("the lost leaf was not reissued")
	}
	d := datadir.Dir(dir)
	ca, _ := d.LoadCA()
	lc, _ := pki.ParseCertificatePEM(newLeaf)
	if err := pki.VerifyPinnedChain([]*x509.Certificate{lc, ca.Cert}, ca.Pin()); err != nil {
		t.Fatalf("reissued leaf: %v", err)
	}
	cfg, err := d.LoadConfig()
	if err != nil || cfg.CAPin != pin {
		t.Fatalf("config after resume: %+v, %v", cfg, err)
	}
}

// A run that stopped after writing the CA files but before recording the pin in
// mesh.json must adopt that CA, not make another.
func TestInterruptedBeforeThePinWasRecorded(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	pin := caPin(t, dir)
	d := datadir.Dir(dir)
	cfg, _ := d.LoadConfig()
	cfg.CAPin, cfg.AdminAccount = "", ""
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(d.Path(datadir.ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{datadir.RaftDir, datadir.TLSCertFile, datadir.TLSKeyFile, datadir.SigningKeyFile, datadir.AdminCredsFile, datadir.AccountKeyFile} {
		os.RemoveAll(d.Path(name))
	}
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	cfg, err := d.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.CAPin != pin || caPin(t, dir) != pin {
		t.Fatalf("pin %s after resume, was %s", cfg.CAPin, pin)
	}
	if cfg.AdminAccount == "" {
		t.Fatal("admin account not recorded on resume")
	}
}

// The operator step keeps an existing account key: creds already issued stay valid.
func TestResumeKeepsTheAdminAccount(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	d := datadir.Dir(dir)
	cfg, _ := d.LoadConfig()
	account := cfg.AdminAccount
	os.RemoveAll(d.Path(datadir.RaftDir))
	os.Remove(d.Path(datadir.AdminCredsFile))
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	cfg, _ = d.LoadConfig()
	if cfg.AdminAccount != account {
		t.Fatalf("admin account changed from %s to %s", account, cfg.AdminAccount)
	}
}

func TestConflicts(t *testing.T) {
	t.Run("another mesh", func(t *testing.T) {
		dir := t.TempDir()
		o, _ := options(t, dir)
		if err := Run(o); err != nil {
			t.Fatal(err)
		}
		before := snapshotDir(t, dir)
		o.Mesh = "other"
		err := Run(o)
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"demo"`) {
			t.Fatalf("err = %v, want ErrConflict naming demo", err)
		}
		assertUnchanged(t, dir, before)
	})
	t.Run("another node or listen address", func(t *testing.T) {
		dir := t.TempDir()
		o, _ := options(t, dir)
		if err := Run(o); err != nil {
			t.Fatal(err)
		}
		o2 := o
		o2.Node = "cp-2"
		if err := Run(o2); !errors.Is(err, ErrConflict) {
			t.Fatalf("another node: err = %v, want ErrConflict", err)
		}
		o3 := o
		o3.Listen = freeport.Addrs(t, 1)[0]
		if err := Run(o3); !errors.Is(err, ErrConflict) {
			t.Fatalf("another listen address: err = %v, want ErrConflict", err)
		}
		// Given other Raft or cluster addresses, or another --advertise (the address
		// every token carries, and in the TLS certificate), a finished bootstrap
		// used to say "nothing to do" and keep the recorded ones.
		before := snapshotDir(t, dir)
		for _, flag := range []string{"--raft-listen", "--cluster-listen", "--advertise"} {
			o4 := o
			other := freeport.Addrs(t, 1)[0]
			switch flag {
			case "--raft-listen":
				o4.RaftListen = other
			case "--cluster-listen":
				o4.ClusterListen = other
			default:
				o4.Advertise = other
			}
			err := Run(o4)
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), flag+" ") || !strings.Contains(err.Error(), "bootstrapped already") || strings.Contains(err.Error(), "to resume,") {
				t.Fatalf("another %s: err = %v, want ErrConflict naming the recorded %s", flag, err, flag)
			}
		}
		assertUnchanged(t, dir, before)
		if err := Run(o); err != nil {
			t.Fatalf("the same flags again: %v", err)
		}
		// Stopped before its Raft step, the bootstrap is one to resume, and the
		// refusal says so.
		if err := os.RemoveAll(filepath.Join(dir, datadir.RaftDir)); err != nil {
			t.Fatal(err)
		}
		if err := Run(o3); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "run it again with the same flags to resume") || strings.Contains(err.Error(), "bootstrapped already") {
			t.Fatalf("another listen address on an unfinished bootstrap: %v, want the flags to resume with", err)
		}
	})
	t.Run("unrelated non-empty directory", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644)
		o, _ := options(t, dir)
		before := snapshotDir(t, dir)
		if err := Run(o); !errors.Is(err, ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
		assertUnchanged(t, dir, before)
	})
	t.Run("unrelated non-empty directory, dry run", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, "sub"), 0o700)
		o, _ := options(t, dir)
		o.DryRun = true
		if err := Run(o); !errors.Is(err, ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
	})
	t.Run("corrupt mesh.json", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, datadir.ConfigFile), []byte("{"), 0o644)
		o, _ := options(t, dir)
		if err := Run(o); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("err = %v, want ErrConflict saying corrupt", err)
		}
	})
	// A resumed bootstrap reads mesh.json as LoadConfig does: a member twice,
	// which encoding/json alone reads as the last one, is corrupt here too.
	t.Run("mesh.json with a member twice", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, datadir.ConfigFile), []byte(`{"format":1,"mesh":"other","node":"cp-9","mesh":"demo"}`), 0o644)
		o, _ := options(t, dir)
		if err := Run(o); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `"mesh" appears twice`) {
			t.Fatalf("err = %v, want ErrConflict saying the member appears twice", err)
		}
	})
	for _, keep := range []string{datadir.CACertFile, datadir.CAKeyFile} {
		t.Run("only "+keep, func(t *testing.T) {
			dir := t.TempDir()
			o, _ := options(t, dir)
			if err := Run(o); err != nil {
				t.Fatal(err)
			}
			pem, _ := os.ReadFile(filepath.Join(dir, keep))
			other := datadir.CACertFile
			if keep == other {
				other = datadir.CAKeyFile
			}
			// Lose the other half and everything after, so the CA step must run.
			for _, name := range []string{other, datadir.RaftDir, datadir.TLSCertFile, datadir.TLSKeyFile} {
				os.RemoveAll(filepath.Join(dir, name))
			}
			err := Run(o)
			if !errors.Is(err, ErrConflict) {
				t.Fatalf("err = %v, want ErrConflict", err)
			}
			if !strings.Contains(err.Error(), "run bootstrap again") && !strings.Contains(err.Error(), "restore") {
				t.Errorf("the error does not say what to do: %v", err)
			}
			if _, serr := os.Stat(filepath.Join(dir, other)); !errors.Is(serr, fs.ErrNotExist) {
				t.Fatalf("bootstrap recreated %s: a second CA", other)
			}
			if got, _ := os.ReadFile(filepath.Join(dir, keep)); !bytes.Equal(got, pem) {
				t.Fatalf("%s was rewritten", keep)
			}
			if _, serr := os.Stat(filepath.Join(dir, datadir.TLSCertFile)); !errors.Is(serr, fs.ErrNotExist) {
				t.Fatal("steps after the failed CA step ran")
			}
		})
	}
}

func assertUnchanged(t *testing.T, dir string, before map[string][]byte) {
	t.Helper()
	after := snapshotDir(t, dir)
	if len(after) != len(before) {
		t.Fatalf("files changed: %d before, %d after", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("%s changed", name)
		}
	}
}

func TestAddressInUseFailsBeforeAnyFile(t *testing.T) {
	for i, which := range []string{"listen", "raft", "cluster"} {
		t.Run(which, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o, out := options(t, dir)
			addr := []string{o.Listen, o.RaftListen, o.ClusterListen}[i]
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			err = Run(o)
			if err == nil || !strings.Contains(err.Error(), addr) {
				t.Fatalf("err = %v, want it to name %s", err, addr)
			}
			if !strings.Contains(out.String(), "FAILED") || !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("output does not show the failed step, or says to resume what never began:\n%s\n%v", out, err)
			}
			assertMadeNothing(t, dir)
		})
	}
	// A directory given empty stays, without the lock file the run made in it.
	dir := t.TempDir()
	o, _ := options(t, dir)
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := Run(o); err == nil {
		t.Fatal("bootstrap with its address in use succeeded")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Fatalf("the empty directory given holds %v (%v) after the failed check", entries, err)
	}
}

// assertMadeNothing: a directory that did not exist before a bootstrap whose check
// failed does not exist after it, its lock file and all ("nothing is created if one
// fails", docs/getting-started.md).
func assertMadeNothing(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("%s is there after a failed check (%v), holding %v", dir, err, entries)
	}
}

func TestInsaneClockFailsBeforeAnyFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o, _ := options(t, dir)
	o.Now = func() time.Time { return time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC) }
	if err := Run(o); err == nil || !strings.Contains(err.Error(), "clock") {
		t.Fatalf("err = %v, want a clock complaint", err)
	}
	assertMadeNothing(t, dir)
}

func TestOptionErrors(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Options)
		mention string
	}{
		{"wildcard listen without advertise", func(o *Options) { o.Listen = "0.0.0.0:7300" }, "--advertise"},
		{"IPv6 wildcard without advertise", func(o *Options) { o.Listen = "[::]:7300" }, "--advertise"},
		{"wildcard advertise", func(o *Options) { o.Listen = "0.0.0.0:7300"; o.Advertise = "0.0.0.0:7300" }, "--advertise"},
		{"advertise not ip:port", func(o *Options) { o.Advertise = "mesh.example:7300" }, "--advertise"},
		{"listen is a name", func(o *Options) { o.Listen = "localhost:7300" }, "--listen"},
		{"listen without port", func(o *Options) { o.Listen = "127.0.0.1" }, "--listen"},
		{"no mesh", func(o *Options) { o.Mesh = "" }, "--mesh"},
		{"mesh with underscore", func(o *Options) { o.Mesh = "my_mesh" }, "--mesh"},
		{"mesh with dot", func(o *Options) { o.Mesh = "a.b" }, "--mesh"},
		{"mesh upper case", func(o *Options) { o.Mesh = "Demo" }, "--mesh"},
		{"mesh too long", func(o *Options) { o.Mesh = strings.Repeat("a", 64) }, "--mesh"},
		{"mesh ends with dash", func(o *Options) { o.Mesh = "demo-" }, "--mesh"},
		{"node with wildcard", func(o *Options) { o.Node = "cp>" }, "--node"},
		{"no data dir", func(o *Options) { o.Dir = "" }, "--data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o, _ := options(t, dir)
			tt.edit(&o)
			err := Run(o)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("err = %v, want it to mention %s", err, tt.mention)
			}
			assertEmpty(t, dir)
		})
	}
}

// TestWildcardListenWithAdvertise: the broker may listen on a wildcard address when
// hosts dial --advertise; the Raft and cluster addresses, which the other control
// nodes dial, cannot default from it (they were 0.0.0.0 with the next two ports,
// recorded in the Raft configuration), and are given.
func TestWildcardListenWithAdvertise(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	o, out := options(t, dir)
	raft, cluster := o.RaftListen, o.ClusterListen
	o.Listen = "0.0.0.0:" + strings.Split(o.Listen, ":")[1]
	o.RaftListen, o.ClusterListen = "", ""
	o.Advertise = "192.0.2.10:7300"
	o.DryRun = true
	err := Run(o)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Flag != "--listen" || !strings.Contains(err.Error(), "give --raft-listen and --cluster-listen") {
		t.Fatalf("wildcard --listen without Raft and cluster addresses: %v, want a refusal naming both", err)
	}
	assertNotCreated(t, dir)
	o.RaftListen, o.ClusterListen = raft, cluster
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("broker %s, raft %s, cluster %s", o.Listen, raft, cluster); !strings.Contains(out.String(), want) {
		t.Errorf("plan does not show %s:\n%s", want, out)
	}
}

func TestOperatorCreds(t *testing.T) {
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accountPub, _ := account.PublicKey()
	creds, err := OperatorCreds(account, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Issuer != accountPub || claims.Name != "alice" {
		t.Fatalf("issuer %s name %q; want %s alice", claims.Issuer, claims.Name, accountPub)
	}
	user, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		t.Fatal(err)
	}
	userPub, _ := user.PublicKey()
	if userPub != claims.Subject {
		t.Fatalf("seed is for %s, JWT for %s", userPub, claims.Subject)
	}
	// The user key can answer a nonce the way the broker checks it.
	sig, err := user.Sign([]byte("nonce"))
	if err != nil {
		t.Fatal(err)
	}
	verifier, _ := nkeys.FromPublicKey(claims.Subject)
	if err := verifier.Verify([]byte("nonce"), sig); err != nil {
		t.Fatal(err)
	}
	// Each call makes a new user.
	again, _ := OperatorCreds(account, "alice")
	if bytes.Equal(again, creds) {
		t.Fatal("two creds files are identical")
	}
	// An account key is required: a user key cannot issue.
	if _, err := OperatorCreds(user, "x"); err == nil {
		t.Fatal("a user key issued operator creds")
	}
}

func TestDryRunOfAnUnfinishedBootstrapChangesNothing(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(dir, datadir.RaftDir))
	os.Remove(filepath.Join(dir, datadir.TLSKeyFile))
	before := snapshotDir(t, dir)
	out := &bytes.Buffer{}
	o.Out, o.DryRun = out, true
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	assertUnchanged(t, dir, before)
	if _, err := os.Stat(filepath.Join(dir, datadir.RaftDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a dry run bootstrapped Raft")
	}
	// The plan tells what is left: the CA is done, the TLS identity and Raft are not.
	want := map[string]bool{"config": true, "ca": true, "tls": false, "signing": true, "operator": true, "raft": false}
	got := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		var n int
		var kind string
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "%d. %s", &n, &kind); err != nil || kind == "check" {
			continue
		}
		got[kind] = strings.Contains(l, "already done")
	}
	if !maps.Equal(got, want) {
		t.Fatalf("steps marked done: %v, want %v\n%s", got, want, out)
	}
}

// TestABootstrapStoppedInItsRaftStepIsFinished: hashicorp/raft records the first
// term before the configuration entry; a bootstrap whose write or flush of the
// entry failed left a term alone. Run again, it said "already bootstrapped; nothing
// to do" (a term counted as state), while serve refused the store as lost (no
// entry) and told the operator to run bootstrap again: stuck. Now the run finishes
// the Raft step.
func TestABootstrapStoppedInItsRaftStepIsFinished(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	raftDir := filepath.Join(dir, datadir.RaftDir)
	if err := os.RemoveAll(raftDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(raftDir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(raftDir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatal(err)
	}
	store.Close()
	if ok, err := replication.HasState(raftDir); ok || err != nil {
		t.Fatalf("a store holding a term alone counts as state: %v, %v", ok, err)
	}
	var out bytes.Buffer
	o.Out = &out
	if err := Run(o); err != nil {
		t.Fatalf("the stopped bootstrap was not finished: %v\n%s", err, out.String())
	}
	if strings.Contains(out.String(), "nothing to do") || strings.Contains(out.String(), "raft      already done") {
		t.Fatalf("the run took the stopped Raft step for done:\n%s", out.String())
	}
	if ok, err := replication.HasState(raftDir); !ok || err != nil {
		t.Fatalf("after the run the store holds no entry: %v, %v", ok, err)
	}
}

// TestKilledWritingItsFirstFileResumes: a bootstrap killed while it wrote mesh.json
// the first time left its lock and the write's temporary file; run again, it
// resumes (the temporary file is removed under the lock), where it refused the
// directory as "not empty" and serve sent the operator back to bootstrap.
func TestKilledWritingItsFirstFileResumes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{datadir.LockFile: `{"pid":1,"command":"meshctl bootstrap"}`, ".mesh.json.tmp-123": `{"format":1,"mes`, ".admin.creds.tmp-456": "creds of a run killed"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatalf("the run after the kill: %v", err)
	}
	for _, stray := range []string{".mesh.json.tmp-123", ".admin.creds.tmp-456"} {
		if _, err := os.Lstat(filepath.Join(dir, stray)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v): a copy of credentials nothing removes", stray, err)
		}
	}
}

// TestABootstrapRefusesANodeThatServedWithItsRaftStateLost: run again on a
// directory whose node served (mesh.json records it) after raft/ was lost,
// bootstrap made a new one-voter cluster, exit 0, "mesh ... is bootstrapped": a new,
// empty mesh with the old CA, every host and token forgotten. It now refuses
// (ErrServed, an ErrConflict: exit 7), its dry run too, with the ways out, and
// creates nothing; a raft.db emptied is not written either. A node that never served
// (a bootstrap stopped before its raft step) still resumes.
func TestABootstrapRefusesANodeThatServedWithItsRaftStateLost(t *testing.T) {
	dir := t.TempDir()
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	d := datadir.Dir(dir)
	raftDir := d.Path(datadir.RaftDir)
	cfg, err := d.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Served = true
	if err := d.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	for _, lose := range []struct {
		name string
		do   func()
	}{
		{"raft/ removed", func() { os.RemoveAll(raftDir) }},
		{"raft.db emptied", func() {
			os.MkdirAll(raftDir, 0o700)
			os.WriteFile(filepath.Join(raftDir, "raft.db"), nil, 0o600)
		}},
	} {
		lose.do()
		for _, dry := range []bool{false, true} {
			o.DryRun = dry
			var out bytes.Buffer
			o.Out = &out
			err := Run(o)
			if !errors.Is(err, ErrServed) || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "meshctl control remove cp-1") ||
				!strings.Contains(err.Error(), "Recovering from lost quorum") || !strings.Contains(err.Error(), datadir.CAKeyFile) {
				t.Fatalf("%s, dry run %v: %v, want ErrServed with the ways out\n%s", lose.name, dry, err, out.String())
			}
			if ok, err := replication.HasState(raftDir); ok || err != nil {
				t.Fatalf("%s, dry run %v: the refusal made Raft state: %v %v", lose.name, dry, ok, err)
			}
		}
		if fi, err := os.Stat(filepath.Join(raftDir, "raft.db")); err == nil && fi.Size() != 0 {
			t.Fatalf("%s: the refusal wrote raft.db (%d bytes)", lose.name, fi.Size())
		}
	}
	// Never served: the same directory resumes, the raft step run again.
	cfg.Served = false
	if err := d.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(raftDir)
	o.DryRun = false
	var out bytes.Buffer
	o.Out = &out
	if err := Run(o); err != nil || !strings.Contains(out.String(), "is bootstrapped") {
		t.Fatalf("a node that never served did not resume: %v\n%s", err, out.String())
	}
}
