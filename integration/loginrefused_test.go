package integration

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/operator"
	"mesh/integration/harness"
)

// TestRefusedOperatorLoginSaysWhy: a broker of the mesh that refuses meshctl's
// login (nats-server's "Authorization Violation") is said to, with its two causes
// and what to do about each: a control node older than this meshctl during an
// upgrade (it cannot check the login bound to the TLS session), or credentials of
// another mesh. Before, meshctl said it could not reach the control plane and asked
// whether `meshctl serve` was running, which it was. The older broker itself is not
// at hand here: credentials of another mesh get the same refusal from a current
// one (checked by hand against the revision of 2026-12-02, 9aa37eb).
func TestRefusedOperatorLoginSaysWhy(t *testing.T) {
	m := harness.StartMesh(t, "here", harness.Options{})
	other := harness.BootstrapMesh(t, "elsewhere", harness.Options{})
	e, err := operator.DirEndpoint(m.Dir, false)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := operator.DirEndpoint(other.Dir, false)
	if err != nil {
		t.Fatal(err)
	}
	e.Creds = theirs.Creds
	_, err = operator.DialEndpoint(e, operator.Options{Timeout: 5 * time.Second, LeaderWait: -1})
	if !errors.Is(err, operator.ErrLoginRefused) || !errors.Is(err, operator.ErrUnreachable) {
		t.Fatalf("dial with another mesh's credentials: %v; want ErrLoginRefused (and ErrUnreachable, exit 3)", err)
	}

	cmd := exec.Command(bin.Meshctl, "nodes", "--servers", m.Listen, "--creds", theirs.Creds,
		"--ca", filepath.Join(string(m.Dir), "ca.pem"), "--leader-wait", "0")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("meshctl nodes: %v, want exit 3\n%s", err, out)
	}
	for _, want := range []string{"Authorization Violation", "older", "Upgrading", "not this mesh's"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("meshctl nodes says nothing of %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "is `meshctl serve`") {
		t.Errorf("meshctl nodes asks whether serve runs, which it does:\n%s", out)
	}
}
