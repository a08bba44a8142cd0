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

	"mesh/controlplane/api"
)

// unitValues reads every value of key in a systemd unit file, with the values of a
// space-separated list split.
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

// TestUnitMatchesExitCodes: the unit must not restart meshctl serve after the exits
// that mean a person must act, and must restart it after any other failure. The
// codes are this program's constants, not copies.
func TestUnitMatchesExitCodes(t *testing.T) {
	unit := filepath.Join("..", "..", "..", "dist", "systemd", "meshctl.service")
	var want []string
	for _, c := range []int{exitRemoved, exitDataDir} {
		want = append(want, strconv.Itoa(c))
	}
	if got := unitValues(t, unit, "RestartPreventExitStatus"); !slices.Equal(got, want) {
		t.Errorf("RestartPreventExitStatus=%v, want %v (removed, data directory)", got, want)
	}
	for key, want := range map[string]string{
		"Type": "notify", "Restart": "on-failure", "User": "meshctl", "NoNewPrivileges": "yes",
		"ProtectSystem": "strict", "PrivateTmp": "yes", "StateDirectory": "meshctl", "ReadWritePaths": "/var/lib/meshctl",
	} {
		if got := unitValues(t, unit, key); !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	if exec := strings.Join(unitValues(t, unit, "ExecStart"), " "); !strings.HasPrefix(exec, "/usr/bin/meshctl serve --data /var/lib/meshctl") {
		t.Errorf("ExecStart=%s", exec)
	}
}

// TestRemovalSaysWhatItDoesNotTakeBack: operations.md says a removal does not take
// back the signing key the node held, "and the command says so". Before, the advice
// to rotate it was printed only when pending tokens listed the node's broker, so a
// removal with none said nothing about the key.
func TestRemovalSaysWhatItDoesNotTakeBack(t *testing.T) {
	var b strings.Builder
	printRemoval(&b, "cp-3", api.ControlRemoveResult{})
	if !strings.Contains(b.String(), "removed control node cp-3") || !strings.Contains(b.String(), "meshctl signing-key rotate") {
		t.Errorf("a removal without pending tokens does not advise rotating the signing key:\n%s", b.String())
	}
	b.Reset()
	printRemoval(&b, "cp-3", api.ControlRemoveResult{PendingTokens: []string{"web-7"}})
	if !strings.Contains(b.String(), "(nodes: web-7)") || !strings.Contains(b.String(), "meshctl signing-key rotate") {
		t.Errorf("a removal with pending tokens:\n%s", b.String())
	}
	b.Reset()
	// Run again, or by a second operator at once, who did not see the first's
	// advice: it is said again (it was not).
	printRemoval(&b, "cp-3", api.ControlRemoveResult{AlreadyRemoved: true, PendingTokens: []string{"web-7"}})
	if !strings.Contains(b.String(), "already removed") || !strings.Contains(b.String(), "(nodes: web-7)") || !strings.Contains(b.String(), "meshctl signing-key rotate") {
		t.Errorf("a removal run again:\n%s", b.String())
	}
	b.Reset()
	// A voter that did not serve, demoted first so that the voters left are a
	// quorum that serves: named as such, not as the odd-voters demotion.
	printRemoval(&b, "cp-2", api.ControlRemoveResult{Demoted: "cp-3", DemotedNotServing: true})
	if !strings.Contains(b.String(), "cp-3 does not serve: it was made a nonvoter before cp-2 was taken out") || strings.Contains(b.String(), "stay an odd number") {
		t.Errorf("a removal that demoted a voter not serving:\n%s", b.String())
	}
}

// crashEnv makes the test binary crash as a Go program does (TestUnitRestartsACrash).
const crashEnv = "MESHCTL_TEST_CRASH"

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
	unit := filepath.Join("..", "..", "..", "dist", "systemd", "meshctl.service")
	if got := unitValues(t, unit, "RestartPreventExitStatus"); slices.Contains(got, strconv.Itoa(ee.ExitCode())) {
		t.Errorf("RestartPreventExitStatus=%v holds %d, the status of a crash: the unit would not restart after one", got, ee.ExitCode())
	}
	if got := unitValues(t, unit, "StartLimitBurst"); len(got) != 1 {
		t.Errorf("StartLimitBurst=%v: a failure at every start (a usage error) is restarted for good", got)
	}
}
