package integration

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHostImportsNothingOfTheControlPlane enforces the layout rule of the design: the
// host agent depends on the standard library, nats.go, nkeys and the declarations
// package, and on nothing else of this module. Two other libraries are allowed, each
// for one job: go-systemd's daemon package (sd_notify readiness for meshhost run;
// docs/decisions/0007-the-command-line.md) and the Prometheus client with its own
// dependencies (the agent's /metrics; docs/decisions/0009-metrics.md).
func TestHostImportsNothingOfTheControlPlane(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "mesh/host/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowedExternal := []string{"github.com/nats-io/nats.go", "github.com/nats-io/nkeys", "github.com/nats-io/nuid", "golang.org/x/crypto", "golang.org/x/sys", "github.com/klauspost/compress",
		"github.com/coreos/go-systemd/v22/daemon",
		// The Prometheus client and what it needs.
		"github.com/prometheus/client_golang", "github.com/prometheus/client_model", "github.com/prometheus/common", "github.com/prometheus/procfs",
		"github.com/beorn7/perks", "github.com/cespare/xxhash", "github.com/munnerz/goautoneg", "google.golang.org/protobuf"}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "mesh/declarations", strings.HasPrefix(pkg, "mesh/host/"):
		case strings.HasPrefix(pkg, "mesh/"):
			t.Errorf("the host imports %s: the host may import nothing of this module but declarations", pkg)
		default:
			ok := false
			for _, a := range allowedExternal {
				if pkg == a || strings.HasPrefix(pkg, a+"/") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("the host imports %s, which is not nats.go, nkeys, go-systemd's daemon package, the Prometheus client or their own dependencies", pkg)
			}
		}
	}
}

// TestDeclarationsIsStdlibOnly: the host imports declarations, so it must bring nothing.
func TestDeclarationsIsStdlibOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "mesh/declarations").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != "mesh/declarations" {
			t.Errorf("declarations imports %s; it must use the standard library only", pkg)
		}
	}
}
