package main

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
)

// dirState is every path under dir with its size, mode, modification time and, for
// the lock file, its content (the holder's record).
func dirState(t *testing.T, dir datadir.Dir) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(string(dir), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %d %v %d", p, fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		if filepath.Base(p) == datadir.LockFile {
			data, _ := os.ReadFile(p)
			line += " " + string(data)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// checkLine is the report's line of a check, "" if it has none.
func checkLine(stdout, name string) string {
	for _, l := range strings.Split(stdout, "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(l, "  "+f[0])), name+":") {
			return l
		}
	}
	return ""
}

// TestCheckAGoodDirectory: a bootstrapped node's data directory passes every check,
// exit 0, the report naming the Raft index serve would start at; the --json report
// says the same; and nothing in the directory changed, the lock file's record
// included.
func TestCheckAGoodDirectory(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	before := dirState(t, dir)
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitOK || stderr != "" {
		t.Fatalf("check of a bootstrapped directory: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	if strings.Contains(stdout, "FAILED") || strings.Contains(stdout, "skipped") {
		t.Errorf("a check failed or was skipped:\n%s", stdout)
	}
	for _, want := range []string{"control node cp-1 of mesh chk (CA ", "raft store: last index 1 (term 1)", "members cp-1", "serve would start on this data directory, at Raft index 1"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runCLI("check", "--data", string(dir), "--json")
	var rep checkJSON
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitOK {
		t.Fatalf("check --json: exit %d, %v\n%s", code, err, stdout)
	}
	if !rep.WouldStart || rep.Exit != 0 || rep.Mesh != "chk" || rep.Raft == nil || rep.Raft.LastIndex != 1 || len(rep.Raft.Members) != 1 || rep.State == nil || rep.State.Initialised {
		t.Errorf("check --json: %+v (raft %+v, state %+v)", rep, rep.Raft, rep.State)
	}
	if after := dirState(t, dir); !slices.Equal(before, after) {
		t.Errorf("check changed the data directory:\nbefore %v\nafter  %v", before, after)
	}
}

// TestCheckAKeyOthersMayRead: a key made group-readable (a copy restored without its
// modes) fails the owners-and-modes check with the chmod that mends it, exit 7 as
// serve's refusal; the other checks are still made, the Raft store's included.
func TestCheckAKeyOthersMayRead(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	if err := os.Chmod(dir.Path(datadir.TLSKeyFile), 0o640); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitDataDir {
		t.Fatalf("check with tls-key.pem group-readable: exit %d, want %d\n%s%s", code, exitDataDir, stdout, stderr)
	}
	line := checkLine(stdout, "owners and modes")
	if !strings.Contains(line, "FAILED") || !strings.Contains(line, "chmod 600 "+dir.Path(datadir.TLSKeyFile)) {
		t.Errorf("owners and modes: %q, want FAILED naming chmod 600 of tls-key.pem\n%s", line, stdout)
	}
	if l := checkLine(stdout, "raft store"); !strings.Contains(l, "ok") || !strings.Contains(l, "last index 1") {
		t.Errorf("the Raft store was not checked after the failure: %q\n%s", l, stdout)
	}
	if !strings.Contains(stderr, "serve would not start on this data directory: 1 check(s) failed") {
		t.Errorf("stderr: %q", stderr)
	}
	code, stdout, _ = runCLI("check", "--data", string(dir), "--json")
	var rep checkJSON
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitDataDir || rep.WouldStart || rep.Exit != exitDataDir {
		t.Errorf("check --json: exit %d, %v: %+v", code, err, rep)
	}
}

// TestCheckADamagedRaftStore: raft.db cut short after its first two pages fails the
// Raft store check naming the file, exit 7 as serve's refusal; the state it would
// hold is not checked.
func TestCheckADamagedRaftStore(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	db := filepath.Join(dir.Path(datadir.RaftDir), "raft.db")
	if err := os.Truncate(db, 8192); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitDataDir {
		t.Fatalf("check with raft.db cut short: exit %d, want %d\n%s%s", code, exitDataDir, stdout, stderr)
	}
	if l := checkLine(stdout, "raft store"); !strings.Contains(l, "FAILED") || !strings.Contains(l, db) || !strings.Contains(l, "damaged") {
		t.Errorf("raft store: %q, want FAILED naming %s\n%s", l, db, stdout)
	}
	if l := checkLine(stdout, "replicated state"); !strings.Contains(l, "skipped") {
		t.Errorf("replicated state: %q, want skipped", l)
	}
	if l := checkLine(stdout, "mesh.json"); !strings.Contains(l, "ok") {
		t.Errorf("mesh.json: %q, want ok", l)
	}
}

// TestCheckAnExpiredCertificate: tls.pem re-issued over its own key with dates in the
// past fails the certificate dates check, saying it expired and how to renew it,
// exit 7 as serve's refusal.
func TestCheckAnExpiredCertificate(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	reissueExpired(t, dir)
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitDataDir {
		t.Fatalf("check with tls.pem expired: exit %d, want %d\n%s%s", code, exitDataDir, stdout, stderr)
	}
	l := checkLine(stdout, "certificate dates")
	if !strings.Contains(l, "FAILED") || !strings.Contains(l, "expired") || !strings.Contains(l, datadir.RenewCommand) {
		t.Errorf("certificate dates: %q, want FAILED, expired, with the renewal\n%s", l, stdout)
	}
	if l := checkLine(stdout, "CA and TLS identity"); !strings.Contains(l, "ok") {
		t.Errorf("the identity (the same key) should pass: %q", l)
	}
}

// reissueExpired replaces dir's tls.pem with a certificate over the same key from its
// CA, expired an hour ago.
func reissueExpired(t *testing.T, dir datadir.Dir) {
	t.Helper()
	ca, err := dir.LoadCA()
	if err != nil {
		t.Fatal(err)
	}
	cur := readCert(t, dir.Path(datadir.TLSCertFile))
	tmpl := *cur
	tmpl.SerialNumber = big.NewInt(99)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca.Cert, cur.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir.Path(datadir.TLSCertFile), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckARemovedNode: a directory recording its node's removal is what serve
// refuses with exit 6, and so does check.
func TestCheckARemovedNode(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	if err := dir.MarkRemoved("cp-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitRemoved || !strings.Contains(checkLine(stdout, "removal"), "FAILED") {
		t.Errorf("check of a removed node: exit %d, want %d\n%s%s", code, exitRemoved, stdout, stderr)
	}
}

// TestCheckADirectoryInUse: while a process holds the data directory's lock (serve),
// check refuses at once with exit 8, saying to check a copy, and reads nothing; it
// holds no lock itself, so serve takes the lock right after it.
func TestCheckADirectoryInUse(t *testing.T) {
	dir := bootstrappedDir(t, "chk")
	lock, err := dir.Lock("meshctl serve")
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI("check", "--data", string(dir))
	if code != exitInUse || stdout != "" || !strings.Contains(stderr, "(meshctl serve)") || !strings.Contains(stderr, "check a copy") {
		t.Errorf("check of a directory in use: exit %d, want %d\nstdout %q\nstderr %q", code, exitInUse, stdout, stderr)
	}
	lock.Release()
	if code, stdout, _ := runCLI("check", "--data", string(dir)); code != exitOK {
		t.Fatalf("check once free: exit %d\n%s", code, stdout)
	}
	again, err := dir.Lock("meshctl serve")
	if err != nil {
		t.Fatalf("serve's lock right after check: %v", err)
	}
	again.Release()
}

// TestCheckNeedsADataDirectory: no --data is a usage error; a directory that does not
// exist is refused as serve refuses it (no mesh.json, exit 7).
func TestCheckNeedsADataDirectory(t *testing.T) {
	if code, _, stderr := runCLI("check"); code != exitUsage || !strings.Contains(stderr, "--data is required") {
		t.Errorf("check without --data: exit %d, %q", code, stderr)
	}
	missing := filepath.Join(t.TempDir(), "nothing")
	if code, stdout, stderr := runCLI("check", "--data", missing); code != exitDataDir || stdout != "" || !strings.Contains(stderr, "meshctl bootstrap") {
		t.Errorf("check of a missing directory: exit %d\n%s%s", code, stdout, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("check made the directory")
	}
}
