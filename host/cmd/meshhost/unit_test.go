package main

import (
	"os"
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
	for _, c := range []int{exitUsage, exitSubstituted, exitIdentity, exitRevoked} {
		want = append(want, strconv.Itoa(c))
	}
	if got := unitValues(t, unit, "RestartPreventExitStatus"); !slices.Equal(got, want) {
		t.Errorf("RestartPreventExitStatus=%v, want %v (usage, not the mesh, identity, revoked)", got, want)
	}
	for key, want := range map[string]string{
		"Type": "notify", "Restart": "on-failure", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "PrivateTmp": "yes",
	} {
		if got := unitValues(t, unit, key); !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%v, want %s", key, got, want)
		}
	}
	// The state directory and the managed root are the only places it writes.
	if got := unitValues(t, unit, "ReadWritePaths"); !slices.Equal(got, []string{"/var/lib/meshhost", "/srv/mesh"}) {
		t.Errorf("ReadWritePaths=%v", got)
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
