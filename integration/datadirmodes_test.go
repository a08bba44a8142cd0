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
