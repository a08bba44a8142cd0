package integration

import (
	"crypto/ed25519"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/fstest"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// controlTokenText mints a well-formed control token for node cp-2 of mesh x that no
// mesh knows: join reads it, then stops at the data directory, before any broker.
func controlTokenText(t *testing.T) string {
	t.Helper()
	pub, _, _ := ed25519.GenerateKey(nil)
	tok, err := tokenfmt.Mint(tokenfmt.MintOptions{
		Mesh: "x", Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300")}, CAPin: [32]byte{1}, SigningKey: pub,
		Node: "cp-2", Role: tokenfmt.RoleControl, TTL: 15 * time.Minute, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Encode()
}

// TestCtlDataThatIsNotADirectory, with the built meshctl: a --data that is a
// device, a regular file, a FIFO, or a path below a file, is refused by an
// operator's command, serve, bootstrap (dry run too) and join as not a directory,
// exit 7, naming what is there. /dev/zero was told "chmod 644 /dev/zero" (which, as
// root, breaks the machine); the others got a bare "open X/mesh.json: not a
// directory" or "open the lock of X", exit 1. Nothing is changed.
func TestCtlDataThatIsNotADirectory(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	file := filepath.Join(base, "afile")
	writeFile(t, file, "notes\n")
	fifo := filepath.Join(base, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	kinds := []struct{ dir, says string }{
		{file, "is not a directory: it is a regular file"},
		{fifo, "is not a directory: it is a named pipe (FIFO)"},
		{filepath.Join(file, "cp"), file + ", on the way to it, is not a directory: it is a regular file"},
	}
	if fi, err := os.Stat("/dev/zero"); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		kinds = append(kinds, struct{ dir, says string }{"/dev/zero", "is not a directory: it is a character device"})
	}
	token := controlTokenText(t)
	for _, k := range kinds {
		for _, cmd := range [][]string{
			{"nodes"},
			{"status"},
			{"serve", "--raft-heartbeat", "300ms"},
			{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27650"},
			{"bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27650", "--dry-run"},
			{"join"},
		} {
			r := harness.Run(t, "", []string{"MESH_TOKEN=" + token}, bin.Meshctl, append(cmd, "--data", k.dir)...)
			if r.Code != ctlExitDataDir || !strings.Contains(r.Stderr, k.says) || strings.Contains(r.Stderr, "chmod") || strings.Contains(r.Stderr, "open ") {
				t.Errorf("%s --data %s: exit %d, want %d saying %q (and no chmod):\n%s", cmd[0], k.dir, r.Code, ctlExitDataDir, k.says, r.Combined())
			}
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "notes\n" {
		t.Errorf("the file given as --data was changed: %q, %v", b, err)
	}
	if fi, err := os.Stat("/dev/zero"); err == nil && fi.Mode().Perm() != 0o666 {
		t.Errorf("/dev/zero has mode %v", fi.Mode())
	}
}

// TestBootstrapOnAReadOnlyFileSystem, with the built meshctl: a bootstrap whose
// new data directory would be on a read-only file system says so, exit 7, as it says
// of one that exists there; it was a bare "mkdir X: read-only file system", exit 1.
func TestBootstrapOnAReadOnlyFileSystem(t *testing.T) {
	t.Parallel()
	ro := filepath.Join(t.TempDir(), "ro")
	fstest.SmallAt(t, ro, fstest.Options{ReadOnly: true, Mode: 0o700})
	for _, dir := range []string{filepath.Join(ro, "new"), filepath.Join(ro, "new", "cp")} {
		r := harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--mesh", "x", "--listen", "127.0.0.1:27660", "--data", dir)
		want := fmt.Sprintf("data directory %s is on a read-only file system", dir)
		if r.Code != ctlExitDataDir || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "mount it read-write") {
			t.Errorf("bootstrap --data %s: exit %d, want %d saying %q:\n%s", dir, r.Code, ctlExitDataDir, want, r.Combined())
		}
	}
}

// TestServeStartsOnAFullDisk, with the built meshctl: a control node whose disk is
// full when it first starts (bootstrap done, the mesh state not initialised yet)
// stops saying so and where to free space, exit 7, which systemd does not restart;
// it was "initialise the mesh state: commit init: write …: no space left on
// device", exit 1. With room again it starts.
func TestServeStartsOnAFullDisk(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "fs")
	mountSmallFS(t, mnt, "2m", "datadir's TestWriteFailed covers the wording")
	cp := harness.NewControlPlaneIn(t, bin, "fullstart", filepath.Join(mnt, "cp"))
	filler := filepath.Join(mnt, "filler")
	fillDisk(t, filler)
	serve := cp.StartServe()
	code := serve.Wait(60 * time.Second)
	out := serve.Output()
	if code != ctlExitDataDir || !strings.Contains(out, "free space") || !strings.Contains(out, cp.Dir) {
		t.Fatalf("serve on a full disk: exit %d, want %d saying where to free space:\n%s", code, ctlExitDataDir, out)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	cp.Serve()
	if r := cp.Ctl("nodes"); r.Code != 0 {
		t.Fatalf("nodes once there is room: exit %d:\n%s", r.Code, r.Combined())
	}
}

// TestOperatorFilesExitAlike, with the built meshctl: an operator's --creds or --ca
// that cannot be used exits 7, as the same fault in a data directory does (an empty
// admin.creds under --data); a missing or empty --creds exited 1. A CA certificate
// given as --creds (the flags swapped) is called a certificate that --ca takes, not
// "an operator's login" to chmod 600.
func TestOperatorFilesExitAlike(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "opfiles")
	creds, ca := filepath.Join(cp.Dir, "admin.creds"), filepath.Join(cp.Dir, "ca.pem")
	base := t.TempDir()
	empty := filepath.Join(base, "empty.creds")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(base, "nosuch.creds")
	for _, c := range []struct {
		name, creds, ca, says string
	}{
		{"--creds missing", missing, ca, "(--creds) does not exist"},
		{"--creds empty", empty, ca, "(--creds) is empty"},
		{"--creds a certificate", ca, creds, "is a certificate: --ca takes it"},
		{"--ca missing", creds, missing, "(--ca) does not exist"},
		{"--ca empty", creds, empty, "(--ca) is empty"},
	} {
		r := harness.Run(t, "", nil, bin.Meshctl, "nodes", "--servers", "127.0.0.1:1", "--creds", c.creds, "--ca", c.ca)
		if r.Code != ctlExitDataDir || !strings.Contains(r.Stderr, c.says) || strings.Contains(r.Stderr, "chmod") {
			t.Errorf("%s: exit %d, want %d saying %q:\n%s", c.name, r.Code, ctlExitDataDir, c.says, r.Combined())
		}
	}
	if err := os.WriteFile(creds, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cp.Ctl("nodes"); r.Code != ctlExitDataDir {
		t.Errorf("an empty admin.creds under --data: exit %d, want %d:\n%s", r.Code, ctlExitDataDir, r.Combined())
	}
}
