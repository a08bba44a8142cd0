package main

import (
	"bytes"
	"errors"
	"mesh/controlplane/datadir"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
		{[]string{"serve", "--data", dir, "--raft-heartbeat", "10h"}, "too long (at most 1m"},
		{[]string{"join", "--data", dir, "--raft-heartbeat", "0s"}, "too short"},
		{[]string{"join", "--data", dir, "--raft-heartbeat", "2m"}, "too long (at most 1m"},
		{[]string{"serve", "--data", dir, "--max-hosts", "-1"}, "--max-hosts must not be negative"},
		{[]string{"serve", "--data", dir, "--raft-snapshot-interval", "10ms"}, "--raft-snapshot-interval 10ms: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--raft-snapshot-interval", "1000h"}, "--raft-snapshot-interval 1000h0m0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--raft-snapshot-threshold", "0"}, "--raft-snapshot-threshold 0: must be between 1 and 1000000"},
		{[]string{"serve", "--data", dir, "--raft-snapshot-threshold", "99999999999"}, "--raft-snapshot-threshold 99999999999: must be between 1 and 1000000"},
		{[]string{"serve", "--data", dir, "--reconcile", "-1s"}, "--reconcile -1s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--reconcile", "0"}, "--reconcile 0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--reconcile", "10000h"}, "--reconcile 10000h0m0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--offline-after", "0"}, "--offline-after 0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--offline-after", "10000h"}, "--offline-after 10000h0m0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--offline-after", "-45s"}, "--offline-after -45s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--shared-key-grace", "0"}, "--shared-key-grace 0s: must be between 1s and 1h0m0s (the default is 2m0s)"},
		{[]string{"serve", "--data", dir, "--shared-key-grace", "2h"}, "--shared-key-grace 2h0m0s: must be between 1s and 1h0m0s"},
		{[]string{"serve", "--data", dir, "--max-hosts", "many"}, `--max-hosts "many": not a whole number (such as 5000; --help names the range it takes)`},
		{[]string{"serve", "--data", dir, "--max-hosts", "1e9"}, `--max-hosts "1e9": not a whole number`},
		{[]string{"serve", "--data", dir, "--raft-snapshot-threshold", "-1"}, `--raft-snapshot-threshold "-1": not a whole number of 0 or more (such as 5000; --help names the range it takes)`},
		{[]string{"serve", "--data", dir, "--metrics-listen", "nonsense"}, `--metrics-listen "nonsense": give ip:port`},
		{[]string{"serve", "--data", dir, "--metrics-listen", "127.0.0.1:99999"}, `--metrics-listen "127.0.0.1:99999": the port is not a number from 1 to 65535`},
		{[]string{"serve", "--data", dir, "--log-level", "loud"}, "--log-level"},
		// The backups' flags, refused before the backup directory is made (dir/b
		// would be left in dir).
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "raft", "b")}, "--backup-dir " + filepath.Join(dir, "raft", "b") + ": not a place for backups: it is inside the data directory's raft/"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "raft")}, "it is inside the data directory's raft/"},
		{[]string{"serve", "--data", dir, "--backup-dir", dir}, "--backup-dir " + dir + ": not a place for backups: it is the data directory"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-every", "30s"}, "--backup-every 30s: must be between 1m0s and 168h0m0s (the default is 1h0m0s)"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-every", "0"}, "--backup-every 0s: must be between 1m0s and 168h0m0s"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-every", "1000h"}, "--backup-every 1000h0m0s: must be between 1m0s and 168h0m0s"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-every", "1m0.5s"}, "--backup-every 1m0.5s: give whole seconds"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-keep", "0"}, "--backup-keep 0: keep at least 1 backup (the default is 24)"},
		{[]string{"serve", "--data", dir, "--backup-dir", filepath.Join(dir, "b"), "--backup-keep", "-3"}, "--backup-keep -3: keep at least 1 backup"},
		{[]string{"serve", "--data", dir, "--backup-keep", "5"}, "--backup-keep takes effect only with --backup-dir"},
		{[]string{"serve", "--data", dir, "--backup-every", "2h"}, "--backup-every takes effect only with --backup-dir"},
		{[]string{"token", "--data", dir}, "--node is required"},
		{[]string{"token", "--data", dir, "--node", "WEB_1"}, "--node"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--ttl", "2h"}, "at most 1h"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--ttl", "100ms"}, "at least 1s"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--role", "king"}, `--role: must be "worker" or "control"`},
		{[]string{"token", "--data", dir, "--node", "web-1", "--label", "novalue"}, "key=value"},
		{[]string{"declare", "--data", dir, "--file", "x.json"}, "say which nodes"},
		{[]string{"declare", "--data", dir, "--node", "web-1"}, "--file is required"},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--all", "--label", "tier=web"}, "--all targets every node"},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--all", "--node", "web-1"}, "--all targets every node"},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--all", "--role", "worker"}, "--all targets every node"},
		{[]string{"revoke", "--data", dir}, "name the node(s) to revoke"},
		{[]string{"revoke", "--data", dir, "web-1", "Web_2"}, `node "Web_2"`},
		{[]string{"label", "--data", dir, "web-1"}, "at least one k=v"},
		// A key given twice with two values, or text no label can hold, is a
		// mistake of the command line: before, the last value was kept, and a
		// malformed id or label met "matches no node" or "token field node".
		{[]string{"label", "--data", dir, "web-1", "tier=web", "tier=db"}, "label tier is given twice, =web and =db: a node has one value for a key; give the key once"},
		{[]string{"label", "--data", dir, "Web_1", "tier=web"}, `node "Web_1": the node id has a character other than a-z`},
		{[]string{"label", "--data", dir, "web-1", "bad key=x"}, `label "bad key"="x": keys are 1 to 63 characters of letters`},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--label", "tier=web", "--label", "tier=db"}, "every label given must hold; give the key once (run the command once per value"},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--node", "Web_1"}, `node "Web_1": the node id has a character`},
		// Several nodes in one --node, as --servers takes them, and a node
		// named as revoke takes one: said what declare takes (a walkthrough).
		{[]string{"declare", "--data", dir, "--file", "x.json", "--node", "web-1,web-2"}, "name several nodes with --node each (--node web-1 --node ...)"},
		{[]string{"declare", "--data", dir, "--file", "x.json", "web-1"}, `unexpected argument "web-1": declare names its nodes with --node (--node web-1)`},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--role", "nosuch"}, `--role "nosuch": a node's role is worker or control`},
		{[]string{"declare", "--data", dir, "--file", "x.json", "--label", "tier=w b"}, `keys are 1 to 63 characters`},
		// Labels set (label, a token's) are not a selector: one value a key, said
		// so, without the selector's advice (a docs walkthrough).
		{[]string{"token", "--data", dir, "--node", "web-8", "--label", "tier=web", "--label", "tier=db"}, "a node has one value for a key; give the key once"},
		{[]string{"nodes", "--data", dir, "--label", "tier=web", "--label", "tier=db"}, "every label given must hold; give the key once (run the command once per value"},
		{[]string{"status", "--data", dir, "--role", "nosuch"}, `--role "nosuch"`},
		{[]string{"status", "--data", dir, "web_1"}, `node "web_1"`},
		{[]string{"nodes", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"nodes", "--data", dir, "web-1", "--role", "worker"}, "name the nodes, or select them"},
		{[]string{"status", "--data", dir, "web-1", "--state", "alive"}, "name the nodes, or select them"},
		{[]string{"nodes", "--data", dir, "--state", "asleep"}, `"asleep" is not a node state: give alive, offline, revoked`},
		{[]string{"status", "--data", dir, "--state", "alive,"}, `"" is not a node state`},
		{[]string{"nodes", "--data", dir, "--label", "rack"}, "key=value"},
		{[]string{"nodes"}, "say which control plane"},
		{[]string{"nodes", "--data", dir, "--creds", "x.creds"}, "either --data or --creds"},
		{[]string{"nodes", "--creds", "x.creds"}, "missing: --servers (MESH_SERVERS), --ca (MESH_CA)"},
		{[]string{"nodes", "--servers", "10.0.0.1", "--creds", "x.creds", "--ca", "ca.pem"}, "not host:port"},
		{[]string{"token", "--node", "cp-2", "--role", "control", "--addr", "127.0.0.1:7300", "--creds", "x.creds"}, "data directory of the control node that holds the CA key"},
		{[]string{"serve", "--data", dir, "--log-format", "xml"}, "--log-format"},
		{[]string{"serve", "--data", dir, "--log-json", "--log-format", "text"}, "disagree"},
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait=soon"}, "give a duration from 1s to 1h0m0s"},
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "30s"}, `unexpected argument "30s": --wait takes a positive duration`},
		// A number after --wait is left apart (a duration has a unit): said so.
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait", "30"}, `unexpected argument "30": --wait takes a duration with its unit, such as --wait 30s (1s to 1h); nothing was declared`},
		{[]string{"version", "extra"}, "unexpected argument"},
		{[]string{"--version", "extra"}, `unexpected argument "extra" after --version`},
		{[]string{"-v", "--json", "extra"}, `unexpected argument "--json" after -v`},
		{[]string{"bootstrap", "--mesh", "m", "--listen", "127.0.0.1:7300", "--data", dir, "--dry-run", "--json"}, "give one of them"},
		{[]string{"completion"}, "name the shell"},
		{[]string{"completion", "bash", "zsh"}, `unexpected argument "zsh"`},
		{[]string{"completion", "tcsh"}, "no completion for"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control"}, "needs --addr"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "0.0.0.0:7300"}, "--addr"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "127.0.0.1:7300", "--raft-addr", "127.0.0.1:7300"}, "must differ"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--addr", "127.0.0.1:7300"}, "are for --role control"},
		{[]string{"nodes", "--data", dir, "--leader-wait", "soon"}, `--leader-wait "soon": not a duration`},
		{[]string{"nodes", "--data", dir, "--leader-wait", "-1s"}, "--leader-wait -1s: must be between 0s and 10m0s"},
		{[]string{"nodes", "--data", dir, "--leader-wait", "1000h"}, "--leader-wait 1000h0m0s: must be between 0s and 10m0s"},
		{[]string{"nodes", "--data", dir, "--timeout", "1ns"}, "--timeout 1ns: must be between 1s and 10m0s"},
		{[]string{"nodes", "--data", dir, "--timeout", "100000h"}, "--timeout 100000h0m0s: must be between 1s and 10m0s"},
		{[]string{"nodes", "--data", dir, "--timeout", "15"}, `--timeout "15": not a duration: give a number and its unit, such as 30s`},
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait", "1000h"}, "--wait=1000h: give a duration from 1s to 1h0m0s"},
		// A negative or zero duration after --wait is --wait's, refused as such: it
		// was read as the shorthand flags -1 and -s ("unknown shorthand flag").
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait", "-1s"}, "--wait=-1s: give a duration from 1s to 1h0m0s"},
		// A wait too short to hear any node (a review: 1ns was taken).
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait", "1ns"}, "--wait=1ns: give a duration from 1s"},
		{[]string{"control", "status", "--data", dir, "--wait", "1ns"}, "--wait 1ns: must be between 100ms and 30s (the default is 2s)"},
		{[]string{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--wait", "0s"}, "--wait=0s: give a duration from 1s"},
		{[]string{"signing-key", "rotat", "--data", dir}, `unknown signing-key action "rotat"`},
		{[]string{"signing-key", "rotat", "--servers", "127.0.0.1:1", "--creds", "x.creds", "--ca", "ca.pem"}, `unknown signing-key action "rotat"`},
		{[]string{"signing-key", "status", "x", "--data", dir}, `unexpected argument "x"`},
		{[]string{"help", "frobnicate"}, `no command "frobnicate"`},
		{[]string{"nodes", "--data", dir, "--timeout", "0s"}, "--timeout 0s: must be between 1s and 10m0s"},
		{[]string{"token", "--data", dir, "--node", "web-1", "--timeout", "-5s"}, "--timeout -5s: must be between 1s and 10m0s"},
		{[]string{"nodes", "--data", dir, "--timeout", "soon"}, `--timeout "soon": not a duration`},
		{[]string{"revoke", "--data", dir, "--leader-wait", "-1s", "web-1"}, "--leader-wait -1s: must be between 0s and 10m0s"},
		{[]string{"token", "--data", dir, "--node", "cp-2", "--role", "control", "--addr", "127.0.0.1:7300", "--leader-wait", "-1s"}, "--leader-wait -1s: must be between 0s and 10m0s"},
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
	for _, args := range [][]string{{"--help"}, {"help"}, {"token", "--help"}, {"bootstrap", "-h"}, {"help", "declare"}} {
		code, stdout, stderr := runCLI(args...)
		if code != exitOK || !strings.Contains(stdout, "usage") || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// A command's help shows its flags.
	if _, stdout, _ := runCLI("declare", "--help"); !strings.Contains(stdout, "--wait") || !strings.Contains(stdout, "--servers") {
		t.Errorf("declare --help lacks its flags:\n%s", stdout)
	}
	if code, stdout, stderr := runCLI(); code != exitUsage || stdout != "" || !strings.Contains(stderr, "usage: meshctl <command>") {
		t.Errorf("no arguments: exit %d, stdout %q, stderr %q; want %d and the usage on stderr only", code, stdout, stderr, exitUsage)
	}
}

// TestHelpOfEveryCommand: `meshctl X --help`, `-h` and `meshctl help X` print the
// same help for every command, on stdout, exit 0, and name each of its flags; help
// about a command that does not exist is a usage error, not the overview and exit 0.
func TestHelpOfEveryCommand(t *testing.T) {
	root := newRoot(&cliIO{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }})
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			continue
		}
		var helps []string
		for _, args := range [][]string{{c.Name(), "--help"}, {c.Name(), "-h"}, {"help", c.Name()}} {
			code, stdout, stderr := runCLI(args...)
			if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: meshctl "+c.Name()) {
				t.Errorf("%v: exit %d, stdout %.80q, stderr %q", args, code, stdout, stderr)
			}
			helps = append(helps, stdout)
		}
		if helps[0] != helps[1] || helps[0] != helps[2] {
			t.Errorf("%s: --help, -h and help %s differ", c.Name(), c.Name())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !strings.Contains(helps[0], "--"+f.Name+" ") {
				t.Errorf("%s --help does not name --%s", c.Name(), f.Name)
			}
			// A duration is bounded, and its help says how.
			if f.Value.Type() == "duration" && !strings.Contains(f.Usage, "at most") && !regexp.MustCompile(`\d[a-z]* to \d`).MatchString(f.Usage) {
				t.Errorf("%s --%s: its help names no bound: %q", c.Name(), f.Name, f.Usage)
			}
		})
	}
	if code, stdout, _ := runCLI("help", "help"); code != exitOK || !strings.Contains(stdout, "usage: meshctl help [COMMAND]\n\nPrint a command's help") {
		t.Errorf("help help: exit %d, %q", code, stdout)
	}
	for _, args := range [][]string{{"help", "frobnicate"}, {"help", "token", "--bogus"}} {
		code, stdout, stderr := runCLI(args...)
		if code != exitUsage || stdout != "" || stderr == "" {
			t.Errorf("%v: exit %d, stdout %.80q, stderr %q; want %d, an error on stderr and nothing on stdout", args, code, stdout, stderr, exitUsage)
		}
	}
}

// TestNoControlPlane: operator commands against a directory without a mesh say so,
// with the exit code of a data directory that is not a control node's.
func TestNoControlPlane(t *testing.T) {
	for _, cmd := range []string{"nodes", "serve"} {
		code, _, stderr := runCLI(cmd, "--data", t.TempDir())
		if code != exitDataDir || !strings.Contains(stderr, "bootstrap") {
			t.Fatalf("%s: exit %d: %s", cmd, code, stderr)
		}
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
	empty := filepath.Join(dir, "empty.json")
	writeTestFile(t, empty, " \n")
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{big: "larger than", bad: "bad.json", escape: "escape.json",
		empty: empty + " is empty: a declaration body is a JSON object", sub: "meshctl declare: " + sub + " is a directory, not a regular file"} {
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

// TestTokenArgumentsNotEchoed: a token pasted where a command takes none (a control
// token given to join as an argument, a worker's to any command) is refused without
// its text: its secret reaches neither the terminal's scrollback nor a journal.
func TestTokenArgumentsNotEchoed(t *testing.T) {
	dir := t.TempDir()
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_cp-2_control_1900000000_" + secret + "_0badc0de"
	for _, args := range [][]string{
		{"join", "--data", dir, tok},
		{tok},
		{"nodes", "--data", dir, "--timeout", tok},
		{"token", "--data", dir, "--node", tok},
		{"version", tok},
		// A flag's value used as a path: join made a directory named after the
		// token and printed it in its steps (a walkthrough).
		{"join", "--data=" + filepath.Join(dir, tok)},
		{"join", "--data", tok},
		{"check", "--data=" + tok, "--json"},
		// Its end alone, as a parser that cut it at a ':' quotes it.
		{"nodes", "--data", "x_" + secret + "_0badc0de"},
		// Wrapped and given quoted, upper-cased, its end followed by a letter
		// (a review).
		{"nodes", "--data", tok[:76] + "\n" + tok[76:152] + "\n" + tok[152:]},
		{"nodes", "--data", strings.ToUpper(tok)},
		{"nodes", "--data", "x_" + secret + "_0badc0dex"},
		// Quoted in a mail reply, and wrapped and pasted unquoted (a second
		// review).
		{"nodes", "--data", "> " + tok[:70] + "\n> " + tok[70:140] + "\n> " + tok[140:]},
		{"nodes", "--data", tok[:70], tok[70:140], tok[140:]},
	} {
		code, stdout, stderr := runCLI(args...)
		if code != exitUsage || !strings.Contains(stderr, "holds a join token, or the end of one with its secret; it is not shown") {
			t.Errorf("%.40q: exit %d, want %d refusing the argument:\n%s", args, code, exitUsage, stderr)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("%.40q: the token's secret was printed:\n%s", args, stderr)
		}
		if strings.Contains(stdout+stderr, tok[:40]) {
			t.Errorf("%.40q: the token was printed:\n%s", args, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a refused command made %v", entries)
	}
	// What only begins as a token does is an operator's path, name or label (a
	// review: they were refused).
	for _, arg := range []string{"/srv/mesh1_controlplane/data", "~/.nkeys/mesh1_operator-alice.creds", "mesh1_eu-west-production",
		"team=mesh1_platform-networking", "/tmp/mesh1_demo-walkthrough", "/srv/backup_" + strings.Repeat("ab", 16) + "_x",
		"/srv/mesh1_prod/blobs/" + strings.Repeat("ab", 32), "/srv/mesh1_prod/" + strings.Repeat("cd", 32) + ".tar"} {
		if holdsToken(arg) {
			t.Errorf("%q taken for a token", arg)
		}
	}
	if _, err := os.Stat(tok); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory named after the token was made: %v", err)
		os.RemoveAll(tok)
	}
}

// TestCommandSummariesAreSentences: the list of commands in meshctl --help shows each
// command's first line, which must be a whole sentence (revoke's once ended "its").
func TestCommandSummariesAreSentences(t *testing.T) {
	for _, c := range commands() {
		if first := firstLine(c.summary); !strings.HasSuffix(first, ".") {
			t.Errorf("%s: the first line of its summary is not a sentence: %q", c.name, first)
		}
	}
}

// TestDemoRefusesADirectoryInUse: the demo removes its directory afterwards, so a
// --dir that holds anything is refused before anything runs. Before, `meshctl demo
// --dir DIR` ran in a directory with files in it and then removed it, files and all.
func TestDemoRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	precious := filepath.Join(dir, "keep-me")
	writeTestFile(t, precious, "not the demo's")
	code, _, stderr := runCLI("demo", "--dir", dir)
	if code != exitUsage || !strings.Contains(stderr, "is not empty") {
		t.Errorf("demo --dir on a directory with a file: exit %d, want %d and why:\n%s", code, exitUsage, stderr)
	}
	if _, err := os.Stat(precious); err != nil {
		t.Fatalf("the demo removed a file it did not write: %v", err)
	}
}

// TestErrorsDoNotDriveTheTerminal: an error quoting what an operator typed (a
// --data path holding an escape sequence, pasted by mistake) wrote it raw to the
// terminal, which acted on it (a CLI audit); it is written out as Go escapes.
func TestErrorsDoNotDriveTheTerminal(t *testing.T) {
	code, _, stderr := runCLI("nodes", "--data", t.TempDir()+"/\x1b[31mRED\x1b]0;title\x07")
	if code == exitOK || strings.ContainsAny(stderr, "\x1b\x07") || !strings.Contains(stderr, `\x1b[31mRED`) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}

// TestControlRemoveOfTheNodesOwnDirectoryIsRefused (audit of the control plane's
// weeks, finding 5): `control remove X --data <X's own data directory>` lost its
// answer every time (the removal revokes those credentials and closes their
// connections first), exit 3 after seconds, the removal done and a voter's demotion
// unsaid. It is refused before anything is sent (exit 2), naming what to use.
func TestControlRemoveOfTheNodesOwnDirectoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := datadir.Dir(dir).SaveConfig(datadir.Config{Mesh: "m", Node: "cp-3", Listen: "127.0.0.1:7300", Brokers: []string{"127.0.0.1:7300"}, CAPin: strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("control", "remove", "cp-3", "--data", dir)
	if code != exitUsage || !strings.Contains(stderr, "cp-3's own data directory") || !strings.Contains(stderr, "another control node's --data") {
		t.Fatalf("control remove of the node's own directory: exit %d\n%s", code, stderr)
	}
}
