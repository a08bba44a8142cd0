package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestServeRefusesDamagedFiles, with the built meshctl: each file serve reads at
// start (ca.pem, tls.pem, tls-key.pem, signing-key.pem, control-curve.nk,
// admin.creds), missing, empty, cut short or garbage, and the TLS files of another
// node or mesh, make serve exit 7 (which meshctl.service does not restart) with a
// message naming the file and the backup to restore it from. Before, the TLS files
// failed in tls.X509KeyPair naming neither file ("TLS key pair: tls: failed to find
// any PEM data in key input"; an empty tls.pem blamed the key) with exit 1, and
// every missing file exited 1, though docs/operations.md promises 7 for a file of
// the data directory corrupt or cut short. On a node that had served before,
// admin.creds was not read at start at all, and every meshctl command on the node
// then exited 1 (3 for a directory, "is serve running?"): both now exit 7.
func TestServeRefusesDamagedFiles(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "files")
	// Served once: a node's state is initialised at its first start, and what is
	// read only then (admin.creds was) must be checked at every start.
	first := cp.Serve()
	first.Signal(syscall.SIGTERM)
	if code := first.Wait(20 * time.Second); code != 0 {
		t.Fatalf("the first serve exited %d:\n%s", code, first.Output())
	}
	other := harness.NewControlPlane(t, bin, "otherfiles")
	garbage := []byte("\x8f\x00no key, no certificate, no seed\xff\n")
	type damage struct {
		kind  string
		apply func(t *testing.T, dir, name string)
	}
	write := func(t *testing.T, path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	damages := []damage{
		{"missing", func(t *testing.T, dir, name string) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, dir, name string) { write(t, filepath.Join(dir, name), nil) }},
		{"cut short", func(t *testing.T, dir, name string) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, name), b[:len(b)/2])
		}},
		{"garbage", func(t *testing.T, dir, name string) { write(t, filepath.Join(dir, name), garbage) }},
		{"a directory", func(t *testing.T, dir, name string) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(dir, name), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	}
	type run struct {
		name   string
		blamed string
		apply  func(t *testing.T, dir string)
	}
	var runs []run
	for _, name := range []string{datadir.CACertFile, datadir.TLSCertFile, datadir.TLSKeyFile, datadir.SigningKeyFile, datadir.CurveKeyFile, datadir.AdminCredsFile} {
		for _, d := range damages {
			runs = append(runs, run{name + " " + d.kind, name, func(t *testing.T, dir string) { d.apply(t, dir, name) }})
		}
	}
	from := func(names ...string) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			for _, n := range names {
				b, err := os.ReadFile(filepath.Join(other.Dir, n))
				if err != nil {
					t.Fatal(err)
				}
				write(t, filepath.Join(dir, n), b)
			}
		}
	}
	runs = append(runs,
		run{"tls-key.pem of another node", datadir.TLSKeyFile, from(datadir.TLSKeyFile)},
		run{"tls.pem of another node", datadir.TLSKeyFile, from(datadir.TLSCertFile)},
		run{"TLS pair of another mesh", datadir.TLSCertFile, from(datadir.TLSCertFile, datadir.TLSKeyFile)},
		run{"ca.pem of another mesh", datadir.CACertFile, from(datadir.CACertFile)},
	)
	for _, r := range runs {
		dir := filepath.Join(t.TempDir(), "cp")
		if out, err := exec.Command("cp", "-a", cp.Dir, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v %s", err, out)
		}
		r.apply(t, dir)
		p := harness.Start(t, nil, bin.Meshctl, "serve", "--data", dir)
		code := p.Wait(20 * time.Second)
		out := p.Output()
		if code == -1 {
			p.Kill()
			t.Errorf("%s: serve started:\n%s", r.name, out)
			continue
		}
		file := filepath.Join(dir, r.blamed)
		// A directory where the file should be is not read: the message says
		// what is there, not to restore what may be fine underneath.
		advice := `docs/operations.md, "Backing up"`
		if strings.HasSuffix(r.name, "a directory") {
			advice = "is a directory, not a regular file"
		}
		if code != ctlExitDataDir || !strings.Contains(out, file) || !strings.Contains(out, advice) {
			t.Errorf("%s: exit %d, want %d naming %s and %q:\n%s", r.name, code, ctlExitDataDir, file, advice, out)
		}
		if r.blamed == datadir.AdminCredsFile {
			// meshctl on the node logs in with it: a damaged data directory,
			// not a control plane out of reach (exit 3) or a failure (1).
			res := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--data", dir)
			if res.Code != ctlExitDataDir || !strings.Contains(res.Stderr, file) || strings.Contains(res.Stderr, "running?") {
				t.Errorf("%s: meshctl nodes exit %d, want %d naming %s:\n%s", r.name, res.Code, ctlExitDataDir, file, res.Combined())
			}
		}
	}
}
