package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &cliIO{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
	return code, out.String(), errb.String()
}

// TestUsageErrors: every malformed command line exits 2 with a message naming the
// problem, and changes nothing.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"bootstrap", "--data", dir}, "--mesh, --listen and --data are required"},
		{[]string{"bootstrap", "--mesh", "Bad_Mesh", "--listen", "127.0.0.1:7300", "--data", dir}, "--mesh"},
		{[]string{"bootstrap", "--mesh", "m", "--listen", "localhost:7300", "--data", dir}, "not ip:port"},
		{[]string{"bootstrap", "--mesh", "m", "--listen", "0.0.0.0:7300", "--data", dir}, "--advertise"},
		{[]string{"bootstrap", "--mesh", "m", "--listen", "127.0.0.1:7300", "--data", dir, "extra"}, "unexpected argument"},
		{[]string{"serve"}, "--data is required"},
		{[]string{"serve", "--data", dir, "--raft-heartbeat", "1ms"}, "too short"},
		{[]string{"serve", "--data", dir, "--log-level", "loud"}, "--log-level"},
		{[]string{"token", "--data", dir}, "--data and --node are required"},
		{[]string{"token", "--data", dir, "--node", "WEB_1"}, "--node"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--ttl", "2h"}, "at most 1h"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--ttl", "100ms"}, "at least 1s"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--role", "king"}, "--role"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--label", "novalue"}, "key=value"},
		{[]string{"declare", "--data", dir, "--file", "x.json"}, "say which nodes"},
		{[]string{"declare", "--data", dir, "--node", "web-1"}, "--data and --file are required"},
		{[]string{"revoke", "--data", dir}, "exactly one node"},
		{[]string{"revoke", "--data", dir, "a", "b"}, "exactly one node"},
		{[]string{"label", "--data", dir, "web-1"}, "at least one k=v"},
		{[]string{"nodes", "--bogus"}, "flag provided but not defined"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control"}, "needs --addr"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "0.0.0.0:7300"}, "--addr"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "127.0.0.1:7300", "--raft-addr", "127.0.0.1:7300"}, "must differ"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--addr", "127.0.0.1:7300"}, "are for --role control"},
		{[]string{"nodes", "--data", dir, "--leader-wait", "soon"}, "invalid value"},
		{[]string{"nodes", "--data", dir, "--leader-wait", "-1s"}, "must not be negative"},
		{[]string{"revoke", "--data", dir, "--leader-wait", "-1s", "web-1"}, "must not be negative"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "127.0.0.1:7300", "--leader-wait", "-1s"}, "must not be negative"},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr)
		}
		if !strings.Contains(stderr, c.want) {
			t.Errorf("%v: stderr lacks %q:\n%s", c.args, c.want, stderr)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*")); len(entries) != 0 {
		t.Errorf("a refused command line wrote files: %v", entries)
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"help"}, {"token", "--help"}, {"bootstrap", "-h"}} {
		code, stdout, _ := runCLI(args...)
		if code != exitOK || !strings.Contains(stdout, "usage") {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
	}
	if code, _, _ := runCLI(); code != exitUsage {
		t.Errorf("no arguments: exit %d, want %d", code, exitUsage)
	}
}

// TestNoControlPlane: operator commands against a directory without a mesh say so.
func TestNoControlPlane(t *testing.T) {
	code, _, stderr := runCLI("nodes", "--data", t.TempDir())
	if code != exitFailure || !strings.Contains(stderr, "bootstrap") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestDeclareRefusesBadBodies(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	bad := filepath.Join(dir, "bad.json")
	escape := filepath.Join(dir, "escape.json")
	writeTestFile(t, big, strings.Repeat("x", 2<<20))
	writeTestFile(t, bad, `{"files":[`)
	writeTestFile(t, escape, `{"files":[{"path":"../etc/passwd","content":"x"}]}`)
	for file, want := range map[string]string{big: "larger than", bad: "bad.json", escape: "escape.json"} {
		code, _, stderr := runCLI("declare", "--data", dir, "--node", "web-1", "--file", file)
		if code == exitOK || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, stderr %q", file, code, stderr)
		}
	}
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
