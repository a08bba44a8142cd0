package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRefusesAnUnusableHooksFileWithExit5: a hooks file that cannot be used (a
// member in another case or twice, which an older agent read and decision 0024's
// reader refuses; not JSON; missing) stops `meshhost run` with exit 5, which
// meshhost.service does not restart, as an unsafe hooks file does, and without
// pointing to --help, which cannot fix the file. Before, it was a usage error
// (exit 2): after an upgrade, systemd started the agent again every 5 s with the
// same refusal.
func TestRunRefusesAnUnusableHooksFileWithExit5(t *testing.T) {
	for name, content := range map[string]string{
		"another case": `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["/bin/true"],"Timeout":"5s"}]}`,
		"twice":        `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["/bin/true"],"run":["/bin/false"]}]}`,
		"not JSON":     `hooks: reload`,
		"missing":      "",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			state, root, file := filepath.Join(dir, "state"), filepath.Join(dir, "root"), filepath.Join(dir, "hooks.json")
			if content != "" {
				if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			code, _, errs := runCLI("", nil, "run", "--state", state, "--root", root, "--hooks", file)
			if code != exitIdentity || !strings.Contains(errs, "hooks file") || strings.Contains(errs, "--help") {
				t.Fatalf("exit %d, want %d naming the hooks file, with no pointer to --help:\n%s", code, exitIdentity, errs)
			}
		})
	}
}
