package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func unitValues(t *testing.T, path, key string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			out = append(out, strings.Fields(v)...)
		}
	}
	return out
}

func unitPath(name string) string { return filepath.Join("..", "..", "..", "dist", "systemd", name) }

// TestUnitMatchesExitCodes: meshhost.service must not restart the agent after the
// exits that mean a person must act (this program's constants), and must after any
// other failure.
func TestUnitMatchesExitCodes(t *testing.T) {
	unit := unitPath("meshhost.service")
	var want []string
	for _, c := range []int{exitSubstituted, exitIdentity, exitRevoked} {
		want = append(want, strconv.Itoa(c))
	}
	if got := unitValues(t, unit, "RestartPreventExitStatus"); !slices.Equal(got, want) {
		t.Errorf("RestartPreventExitStatus=%v, want %v (not the mesh, identity, revoked)", got, want)
	}
	for key, want := range map[string]string{
		"Type": "notify", "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
	} {
		if got := unitValues(t, unit, key); !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	// The state directory and the managed root are the only places it writes;
	// the root, missing, is made before the sandbox needs it (a ReadWritePaths=
	// path that does not exist failed the start), and not the directories above.
	if got := unitValues(t, unit, "ReadWritePaths"); !slices.Equal(got, []string{"/var/lib/meshhost", "-/srv/mesh"}) {
		t.Errorf("ReadWritePaths=%v", got)
	}
	if got := strings.Join(unitValues(t, unit, "ExecStartPre"), " "); got != "-+/bin/sh -c 'test -d /srv/mesh || exec /bin/mkdir -m 0755 /srv/mesh'" {
		t.Errorf("ExecStartPre=%v, want the managed root made, and no directory above it", got)
	}
	if exec := strings.Join(unitValues(t, unit, "ExecStart"), " "); !strings.Contains(exec, "--state /var/lib/meshhost --root /srv/mesh") {
		t.Errorf("ExecStart=%s", exec)
	}
}

// TestEnrolUnitUsesTheCredential: the enrolment unit hands the token over as the
// credential enrol reads, never on the command line.
func TestEnrolUnitUsesTheCredential(t *testing.T) {
	unit := unitPath("meshhost-enrol.service")
	if got := unitValues(t, unit, "LoadCredential"); len(got) != 1 || !strings.HasPrefix(got[0], credentialName+":") {
		t.Errorf("LoadCredential=%v, want %s:FILE", got, credentialName)
	}
	if exec := strings.Join(unitValues(t, unit, "ExecStart"), " "); exec != "/usr/bin/meshhost enrol --state /var/lib/meshhost" {
		t.Errorf("ExecStart=%s", exec)
	}
}

// crashEnv makes the test binary crash as a Go program does (TestUnitRestartsACrash).
const crashEnv = "MESHHOST_TEST_CRASH"

func init() {
	if os.Getenv(crashEnv) == "1" {
		go func() { panic("a bug") }()
		select {}
	}
}

// TestUnitRestartsACrash: a Go program that crashes (a panic in any goroutine, the
// runtime out of memory) exits with a status the runtime chooses, 2 today, which is
// also this program's usage error; the unit must restart after it, or one crash
// leaves the service down for good. The status is observed, not assumed. The start
// limit stops the restarts of a failure that comes back at every start.
func TestUnitRestartsACrash(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"=1")
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() <= 0 {
		t.Fatalf("the crashing program ended with %v, want an exit status", err)
	}
	unit := unitPath("meshhost.service")
	if got := unitValues(t, unit, "RestartPreventExitStatus"); slices.Contains(got, strconv.Itoa(ee.ExitCode())) {
		t.Errorf("RestartPreventExitStatus=%v holds %d, the status of a crash: the unit would not restart after one", got, ee.ExitCode())
	}
	if got := unitValues(t, unit, "StartLimitBurst"); len(got) != 1 {
		t.Errorf("StartLimitBurst=%v: a failure at every start (a usage error) is restarted for good", got)
	}
}
