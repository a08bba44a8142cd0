package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/integration/harness"
)

// TestServeRefusesADataDirectoryOthersCanRead: a data directory copied back from a
// backup without its modes (every file 0644, the Raft directory 0755) left the CA
// key, the signing key and the operators' credentials readable by every local
// user, and serve ran on it. It now refuses it before anything starts (exit 7),
// naming the first file at fault and the chmod that mends it, and runs once mended.
// The built binaries.
func TestServeRefusesADataDirectoryOthersCanRead(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "modes")
	restoredCarelessly := []string{datadir.CAKeyFile, datadir.TLSKeyFile, datadir.SigningKeyFile, datadir.AdminCredsFile, datadir.RaftDir}
	for _, name := range restoredCarelessly {
		mode := os.FileMode(0o644)
		if name == datadir.RaftDir {
			mode = 0o755
		}
		if err := os.Chmod(filepath.Join(cp.Dir, name), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range restoredCarelessly {
		start := time.Now()
		r := harness.Run(t, "", nil, bin.Meshctl, "serve", "--data", cp.Dir)
		path := filepath.Join(cp.Dir, name)
		if r.Code != 7 || !strings.Contains(r.Stderr, path+" has mode") || !strings.Contains(r.Stderr, "may read it") {
			t.Fatalf("serve with %s readable by others (exit %d, want 7 naming it):\n%s", name, r.Code, r.Combined())
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("serve took %v to refuse", took)
		}
		// The fix the message gives, as an operator would run it.
		fix := r.Stderr[strings.LastIndex(r.Stderr, "then: ")+len("then: "):]
		fix = strings.TrimSpace(fix)
		if want := "chmod 600 " + path; name == datadir.RaftDir {
			if fix != "chmod 700 "+path {
				t.Fatalf("the fix given for the Raft directory: %q", fix)
			}
		} else if fix != want {
			t.Fatalf("the fix given: %q, want %q", fix, want)
		}
		args := strings.Fields(fix)
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", fix, err, out)
		}
	}
	cp.Serve()

	// Minting a control token reads the CA key and the operator account key:
	// refused while others may read either, whoever runs it.
	if err := os.Chmod(filepath.Join(cp.Dir, datadir.CAKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	r := cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", "127.0.0.1:17400")
	if r.Code != 7 || !strings.Contains(r.Stderr, datadir.CAKeyFile+" has mode") || !strings.Contains(r.Stderr, "chmod 600") {
		t.Fatalf("control token with the CA key readable by others (exit %d, want 7):\n%s", r.Code, r.Combined())
	}
	if err := os.Chmod(filepath.Join(cp.Dir, datadir.CAKeyFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cp.ControlToken("cp-2")
}

// TestADataDirectoryAnotherUserCouldSwapIsRefused, with the built binaries: a local
// audit had another user, who owned the directory above a control node's data
// directory, swap it for an older copy while serve was stopped (a revocation undone:
// the node came back offline, not revoked), and had root bootstrap into a directory
// that user owned, then put their own mesh's files there: root minted a host token
// pinning that user's CA. serve refuses the first (exit 7) before anything starts;
// bootstrap refuses the second before writing anything; an operator's command
// refuses a data directory others may write.
func TestADataDirectoryAnotherUserCouldSwapIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("acting as another user (chown to 65534) needs root")
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	cp := harness.NewControlPlaneIn(t, bin, "swapped", filepath.Join(shared, "cp"))
	if err := os.Chown(shared, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	serve := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cp.Dir)
	if code := serve.Wait(20 * time.Second); code != 7 || !strings.Contains(serve.Output(), "who may replace the data directory below it") {
		t.Fatalf("serve under another user's directory: exit %d, want 7 naming it:\n%s", code, serve.Output())
	}
	if r := cp.Ctl("nodes"); r.Code != 7 {
		t.Errorf("an operator's command on that data directory: exit %d, want 7:\n%s", r.Code, r.Combined())
	}

	theirs := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(theirs, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(theirs, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	r := harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--mesh", "theirs", "--listen", "127.0.0.1:1", "--data", theirs)
	if entries, _ := os.ReadDir(theirs); r.Code != 7 || len(entries) != 0 || !strings.Contains(r.Stderr, "belongs to") {
		t.Fatalf("bootstrap into another user's directory: exit %d, %d entries written:\n%s", r.Code, len(entries), r.Combined())
	}
}

// TestServeKeepsItsFilesPrivateWhateverTheUmask: serve started by hand under umask
// 000 (meshctl.service sets 0077, a shell may not) wrote hashicorp/raft's snapshot
// files 0666, every declaration body in them, secrets declared to hosts among
// them: a local audit read one from a copy of raft/snapshots. Every file and
// directory serve makes under raft/ is now private to its user.
func TestServeKeepsItsFilesPrivateWhateverTheUmask(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "umask")
	cp.ServeWithUmask("000")
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	body := filepath.Join(t.TempDir(), "b.json")
	for i := range 10 {
		writeFile(t, body, `{"files":[{"path":"secret","content":"S3CR3T-`+strings.Repeat("x", i)+`"}]}`)
		if r := cp.Ctl("declare", "--node", "web-1", "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	snapshots := filepath.Join(cp.Dir, datadir.RaftDir, "snapshots")
	harness.Eventually(t, 20*time.Second, "a Raft snapshot taken", func() bool {
		entries, _ := os.ReadDir(snapshots)
		return len(entries) > 0
	})
	err := filepath.WalkDir(filepath.Join(cp.Dir, datadir.RaftDir), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return nil // a snapshot being replaced
		}
		fi, err := e.Info()
		if err != nil {
			return nil
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v under umask 000", p, fi.Mode().Perm())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
