package main

import (
	"strings"
	"testing"

	"mesh/controlplane/api"
)

// TestAnEmptyLabelValueIsAUsageError: --label k= selected every node without k
// (a node lacking the key reads as k=""), so `declare --label tier=$TIER` with
// TIER unset replaced the files of every node without a tier, and `status
// --label tier=$TIER` exited 0 about them. Every --label that selects nodes, and
// a token's, now refuses an empty value with exit 2 before anything is sent,
// naming the label and the unset variable it most likely is; `meshctl label
// NODE k=` still removes k.
func TestAnEmptyLabelValueIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"declare", "--data", dir, "--file", "x.json", "--label", "tier="},
		{"declare", "--data", dir, "--file", "x.json", "--label", "env=prod", "--label", "tier=", "--dry-run"},
		{"declare", "--data", dir, "--file", "x.json", "--role", "worker", "--label", "tier="},
		{"nodes", "--data", dir, "--label", "tier="},
		{"status", "--data", dir, "--label", "tier="},
		{"status", "--data", dir, "--json", "--label=tier="},
		{"token", "--data", dir, "--node", "web-1", "--label", "tier="},
	} {
		code, stdout, stderr := runCLI(args...)
		if code != exitUsage || stdout != "" {
			t.Errorf("%v: exit %d, want %d (usage); stdout %q", args, code, exitUsage, stdout)
		}
		for _, want := range []string{"--label tier= has an empty value", "--label tier=VALUE", "unset", `"tier=${VAR:?}"`} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, stderr)
			}
		}
		if (args[0] == "token") != strings.Contains(stderr, "nothing was minted") {
			t.Errorf("%v: the refusal says what was not done wrongly:\n%s", args, stderr)
		}
	}
	// Removing a label is what k= means to `label`: not refused as a usage error
	// (the empty data directory stops it next, exit 7).
	if code, _, stderr := runCLI("label", "--data", dir, "web-1", "tier="); code == exitUsage || strings.Contains(stderr, "empty value") {
		t.Errorf("label web-1 tier=: exit %d: %s", code, stderr)
	}

	// The roster's own filter matches nothing by an empty value, should one get
	// past the flag.
	sel := rosterSelection{labels: labelFlag{"tier": ""}}
	if sel.keep(api.NodeView{ID: "web-9"}) || sel.keep(api.NodeView{ID: "web-8", Labels: map[string]string{"rack": "a"}}) {
		t.Error("an empty selector value matched a node without the label")
	}
}
