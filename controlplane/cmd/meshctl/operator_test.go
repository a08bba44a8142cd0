package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
)

// TestOperatorCommandLine: every malformed `meshctl operator` line is a usage error
// (exit 2) saying what is wrong, before anything is issued or sent; a well-formed
// one reaches the data directory (here empty: exit 7).
func TestOperatorCommandLine(t *testing.T) {
	dir := t.TempDir()
	taken := filepath.Join(dir, "taken.creds")
	writeTestFile(t, taken, "someone's")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"operator"}, "say add, list or revoke"},
		{[]string{"operator", "grant", "alice"}, "unknown operator action"},
		{[]string{"operator", "add"}, "one NAME"},
		{[]string{"operator", "add", "alice", "bob"}, "one NAME"},
		{[]string{"operator", "add", "al/ice", "--data", dir}, "letters, digits"},
		{[]string{"operator", "add", "-alice", "--data", dir}, "unknown shorthand"},
		{[]string{"operator", "add", strings.Repeat("a", 65), "--data", dir}, "1 to 64"},
		{[]string{"operator", "add", "alice", "--data", dir, "--ttl", "30m"}, "between"},
		{[]string{"operator", "add", "alice", "--data", dir, "--ttl", "800d"}, "between"},
		{[]string{"operator", "add", "alice", "--data", dir, "--ttl", "soon"}, "days"},
		{[]string{"operator", "add", "alice", "--creds", "x.creds", "--ca", "ca.pem"}, "--data DIR"},
		{[]string{"operator", "add", "alice", "--data", dir, "--out", taken}, "exists"},
		{[]string{"operator", "add", "alice", "--data", dir, "--out", filepath.Join(dir, "nodir", "alice.creds")}, "does not exist"},
		{[]string{"operator", "list", "alice", "--data", dir}, "takes none"},
		{[]string{"operator", "list", "--data", dir, "--ttl", "1d"}, "apply to operator add"},
		{[]string{"operator", "revoke", "--data", dir}, "NAMEs to revoke"},
		{[]string{"operator", "revoke", "a b", "--data", dir}, "letters, digits"},
		{[]string{"operator", "list", "--data", dir, "--renew"}, "apply to operator add"},
		{[]string{"operator", "revoke", "alice", "--data", dir, "--renew"}, "apply to operator add"},
		{[]string{"operator", "revoke", "alice", "bob", "--data", dir, "--key", "UABCDEFGHIJKL"}, "one NAME"},
		{[]string{"operator", "add", "alice", "--data", dir, "--key", "UABCDEFGHIJKL"}, "one NAME"},
		{[]string{"operator", "list", "--data", dir, "--key", "UABCDEFGHIJKL"}, "one NAME"},
		{[]string{"operator", "revoke", "alice", "--data", dir, "--key", "UAB…"}, "12 characters or more"},
		{[]string{"operator", "revoke", "alice", "--data", dir, "--key", ""}, "12 characters or more"},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, want 2 saying %q\n%s", c.args, code, c.want, stderr)
		}
	}
	if got, _ := os.ReadFile(taken); string(got) != "someone's" {
		t.Fatal("the file that exists was changed")
	}
	code, _, stderr := runCLI("operator", "add", "alice", "--data", dir, "--ttl", "30d", "--out", filepath.Join(dir, "alice.creds"))
	if code != exitDataDir {
		t.Fatalf("a well-formed add on an empty directory: exit %d, want 7\n%s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("files left behind: %v", entries)
	}
}

func TestDayDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "36h": 36 * time.Hour, "0d": 0, "2y": 730 * 24 * time.Hour, "1y": 365 * 24 * time.Hour} {
		var d dayDuration
		if err := d.Set(in); err != nil || time.Duration(d) != want {
			t.Errorf("%q: %v, %v; want %v", in, time.Duration(d), err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "1.5d", "90 d", "99999999d", "1w", "y", "1.5y", "101y", "-2y", "2yd", "5508753709683126373y"} {
		var d dayDuration
		if err := d.Set(in); err == nil {
			t.Errorf("%q accepted as %v", in, time.Duration(d))
		}
	}
	d := dayDuration(90 * 24 * time.Hour)
	if d.String() != "90d" {
		t.Errorf("90 days shown as %q", d.String())
	}
}

// TestOperatorListingsEscapeWhatTheAnswerSays (a review): names and keys in
// operator list come from the control plane's answer, which a broker that passes
// the CA pin writes: printed raw, its escape sequences reached the terminal.
func TestOperatorListingsEscapeWhatTheAnswerSays(t *testing.T) {
	var out strings.Builder
	printOperators(&out, []api.OperatorView{{Name: "a\x1b[2J\nmeshctl: run this", Key: "U\x1b]0;x\x07AAAAAAAAAAAAAAAA", State: "valid\x1b[5m", IssuedBy: "cp-1\x1b[1m"}})
	if strings.ContainsRune(out.String(), 0x1b) || strings.ContainsRune(out.String(), 0x07) {
		t.Fatalf("the listing holds control bytes: %q", out.String())
	}
	// A line break made a line of its own (a review): one line a record.
	if strings.Contains(out.String(), "\nmeshctl: run this") {
		t.Fatalf("a line break in the answer printed a line of its own: %q", out.String())
	}
	if k := keyPrefix("U\x1b[2JAAAAAAAAAAAAAAAA"); strings.ContainsRune(k, 0x1b) {
		t.Fatalf("keyPrefix keeps an escape: %q", k)
	}
}
