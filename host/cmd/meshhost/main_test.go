package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"mesh/host/enrol"
	"mesh/host/wire"
)

func runCLI(stdin string, env map[string]string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, &cliIO{stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(dir+"/root", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/root/hooks.json", []byte(`{"hooks":[{"name":"reload","paths":["*"],"run":["true"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"enrol"}, "--state is required"},
		{[]string{"enrol", "--state", dir, "mesh1_demo_the_token_on_the_command_line"}, "never given on the command line"},
		{[]string{"run", "--state", dir}, "--state and --root are required"},
		{[]string{"run", "--state", dir, "--root", dir, "--heartbeat", "10ms"}, "--heartbeat 10ms: must be between 1s and 10m0s"},
		{[]string{"run", "--state", dir, "--root", dir, "--heartbeat", "1000h"}, "--heartbeat 1000h0m0s: must be between 1s and 10m0s"},
		{[]string{"run", "--state", dir, "--root", dir, "--heartbeat", "15"}, `invalid value "15" for flag --heartbeat: not a duration: give a number and its unit`},
		{[]string{"run", "--state", dir, "--root", dir, "--broker-ping", "500ms"}, "--broker-ping 500ms: must be between 1s and 10m0s (the default is 20s)"},
		{[]string{"run", "--state", dir, "--root", dir, "--broker-ping", "11m"}, "--broker-ping 11m0s: must be between 1s and 10m0s"},
		{[]string{"run", "--state", dir, "--root", dir, "--return-home", "500ms"}, "--return-home 500ms: must be 0 (never) or between 1s and 1h (the default is 5m0s)"},
		{[]string{"run", "--state", dir, "--root", dir, "--return-home", "2h"}, "--return-home 2h0m0s: must be 0 (never) or between 1s and 1h"},
		{[]string{"run", "--state", dir, "--root", dir, "--return-home", "-1s"}, "--return-home -1s: must be 0 (never) or between 1s and 1h"},
		{[]string{"run", "--state", dir, "--root", dir, "--check-files", "500ms"}, "--check-files 500ms: must be 0 (never) or between 1s and 24h (the default is 1m0s)"},
		{[]string{"run", "--state", dir, "--root", dir, "--check-files", "25h"}, "--check-files 25h0m0s: must be 0 (never) or between 1s and 24h (the default is 1m0s)"},
		{[]string{"run", "--state", dir, "--root", dir, "--check-files", "-1m"}, "--check-files -1m0s: must be 0 (never) or between 1s and 24h (the default is 1m0s)"},
		{[]string{"run", "--state", dir, "--root", dir, "--broker-ping", "soon"}, "invalid value"},
		{[]string{"run", "--state", dir, "--root", dir, "--broker", "cp-1.example:7300"}, "not ip:port"},
		{[]string{"run", "--state", dir, "--root", dir, "--broker", "[fe80::4:6eff:fe84:2003]:7300"}, "IPv6 link-local address"},
		{[]string{"run", "--state", dir, "--root", dir, "--log-level", "loud"}, "--log-level"},
		{[]string{"run", "--state", dir, "--root", dir, "--metrics-listen", "nonsense"}, `--metrics-listen "nonsense": give ip:port`},
		{[]string{"run", "--state", dir, "--root", dir, "--metrics-listen", "127.0.0.1:99999"}, `--metrics-listen "127.0.0.1:99999": the port is not a number from 1 to 65535`},
		{[]string{"status"}, "--state is required"},
		// Said as the usage mistake it is, not as "not enrolled" (exit 5) for a
		// directory inside the root, nor as a lock held (exit 8) for the root itself
		// while an agent runs on it.
		{[]string{"run", "--state", dir + "/state", "--root", dir}, "must not be inside the managed root"},
		{[]string{"run", "--state", dir, "--root", dir}, "must not be inside the managed root"},
		// A declaration could write it there, and choose the commands run as root
		// at the next start: said before the file is read, exit 2 as the state
		// directory inside the root (before, it was read and used).
		{[]string{"run", "--state", dir + "/state", "--root", dir + "/root", "--hooks", dir + "/root/hooks.json"}, "the hooks file must not be inside the managed root"},
		{[]string{"enrol", "--bogus"}, "unknown flag --bogus"},
		{[]string{"status", "-i"}, "unknown flag -i (meshhost's flags are words"},
		{[]string{"enrol", "--state"}, "flag needs an argument: --state"},
		{[]string{"enrol", "--state", dir, "--timeout", "0"}, "--timeout 0s: must be between 1s and 10m0s"},
		{[]string{"enrol", "--state", dir, "--timeout", "-5s"}, "--timeout -5s: must be between 1s and 10m0s"},
		{[]string{"enrol", "--state", dir, "--timeout", "1000h"}, "--timeout 1000h0m0s: must be between 1s and 10m0s"},
		{[]string{"run", "--state", dir, "--root", dir, "--log-format", "yaml"}, "--log-format"},
		{[]string{"run", "--state", dir, "--root", dir, "--log-json", "--log-format", "text"}, "disagree"},
		{[]string{"version", "extra"}, "unexpected argument"},
		{[]string{"--version", "extra"}, "unexpected argument"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI("", nil, c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
		// Said once, with where the right usage is, and nothing on stdout.
		if strings.Count(stderr, c.want) != 1 || stdout != "" {
			t.Errorf("%v: want the error once on stderr and nothing on stdout; stdout %q, stderr %q", c.args, stdout, stderr)
		}
		// (--state inside --root is no mistake of form: its message says what to do.)
		// (--version's usage is version's: its own --help is no command.)
		cmd := strings.TrimPrefix(strings.TrimPrefix(c.args[0], "--"), "-")
		if c.args[0] != "frobnicate" && !strings.HasSuffix(c.want, "must not be inside the managed root") && !strings.Contains(stderr, "run `meshhost "+cmd+" --help` for usage") && !strings.Contains(stderr, "usage:") {
			t.Errorf("%v: no hint of the right usage: %q", c.args, stderr)
		}
	}
}

// TestHelp: every way of asking for help prints it on stdout and exits 0: the
// overview, and each command's own, with every flag named as it is typed (two
// dashes) with its default. Help about a command that does not exist, or no command
// at all, is a usage error on stderr.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		code, stdout, stderr := runCLI("", nil, args...)
		if code != exitOK || !strings.Contains(stdout, "meshhost enrol") || stderr != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	flags := map[string][]string{
		"enrol":   {"--state string", "--token-file string", "--timeout duration", "(default 20s)", "--json"},
		"run":     {"--state string", "--root string", "--heartbeat duration", "(default 15s)", "--broker-ping duration", "(default 20s)", "--return-home duration", "(default 5m0s)", "--check-files duration", "(default 1m0s)", "--log-format string", `(default "text")`, "--broker ip:port", "--metrics-listen string", "--metrics-textfile string"},
		"status":  {"--state string", "--json"},
		"version": {"--json"},
	}
	for name, want := range flags {
		var helps []string
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			code, stdout, stderr := runCLI("", nil, args...)
			if code != exitOK || stderr != "" || !strings.HasPrefix(stdout, "usage: meshhost "+name) {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
			}
			helps = append(helps, stdout)
		}
		if helps[0] != helps[1] || helps[0] != helps[2] {
			t.Errorf("%s: --help, -h and help %s differ", name, name)
		}
		for _, w := range want {
			if !strings.Contains(helps[0], w) {
				t.Errorf("%s --help lacks %q:\n%s", name, w, helps[0])
			}
		}
		// A duration is bounded, and its help says how.
		for _, d := range regexp.MustCompile(`(?m)^  --[a-z-]+ duration\n.*$`).FindAllString(helps[0], -1) {
			if !regexp.MustCompile(`\d[a-z]* to \d|at most`).MatchString(d) {
				t.Errorf("%s --help: a duration names no bound: %q", name, d)
			}
		}
		if strings.Contains(helps[0], "\n  -state") || strings.Contains(helps[0], "\n  -json") {
			t.Errorf("%s --help names a flag with one dash:\n%s", name, helps[0])
		}
	}
	for _, args := range [][]string{{}, {"help", "frobnicate"}, {"help", "run", "status"}, {"help", "--state"}} {
		code, stdout, stderr := runCLI("", nil, args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "meshhost") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %d and the usage on stderr", args, code, stdout, stderr, exitUsage)
		}
	}
}

// TestTokenInputs: the token's sources and what goes wrong with each, before any
// network, and before anything is made on disk: a state directory that did not
// exist still does not.
func TestTokenInputs(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, stdin string
		env         map[string]string
		args        []string
		want        string
	}{
		{"empty stdin", "", nil, nil, "no token given"},
		{"garbage", "hello world\n", nil, nil, "not"},
		{"oversized", strings.Repeat("m", 20<<10), nil, nil, "over 16384 bytes"},
		{"missing file", "", nil, []string{"--token-file", dir + "/nope"}, "--token-file " + dir + "/nope does not exist"},
		{"truncated in env", "", map[string]string{"MESH_TOKEN": "mesh1_demo_127.0.0.1:7300_ab"}, nil, "truncated"},
	}
	for _, c := range cases {
		state := filepath.Join(dir, "state")
		code, _, stderr := runCLI(c.stdin, c.env, append([]string{"enrol", "--state", state}, c.args...)...)
		if code != exitToken || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and %q", c.name, code, stderr, exitToken, c.want)
		}
		if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the refused token left the state directory behind (%v)", c.name, err)
		}
	}
}

func TestStatusWithoutIdentity(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := runCLI("", nil, "status", "--state", dir)
	if code != exitIdentity || !strings.Contains(stderr, "not enrolled") || strings.Contains(stderr, "same token") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// An enrolment that stopped half way: the same token finishes it if its last
	// attempt could be retried; a token the mesh refused needs a new one (the advice
	// was only the first, which cannot work after token_used).
	if err := os.WriteFile(filepath.Join(dir, "enrol-pending.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCLI("", nil, "status", "--state", dir)
	for _, want := range []string{"If its last attempt could be retried (exit 7", "run meshhost enrol again with the same token",
		"If the mesh refused the token (exit 3", "ask the operator for a new token"} {
		if code != exitIdentity || !strings.Contains(stderr, want) {
			t.Errorf("half enrolled: exit %d, want %d and %q: %s", code, exitIdentity, want, stderr)
		}
	}
}

// TestTokenArgumentsNotEchoed: a token pasted where the command line takes none is
// refused without its text, so that its secret reaches neither the terminal's
// scrollback nor, under systemd, the journal.
func TestTokenArgumentsNotEchoed(t *testing.T) {
	dir := t.TempDir()
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1900000000_" + secret + "_0badc0de"
	for _, args := range [][]string{
		{"enrol", "--state", dir, tok},
		{"enrol", tok},
		{tok},
		{"run", "--state", dir, "--root", dir, tok},
		{"run", "--state", dir, "--root", dir, "--broker-ping", tok},
		{"status", "--state", dir, tok},
		{"--version", tok},
		{"status", "--state=" + dir + "/" + tok},
		// Its end alone, as a parser that cut it at a ':' quotes it.
		{"status", "--state", "x_" + secret + "_0badc0de"},
		// Wrapped at 76 columns and given quoted, upper-cased, and its end
		// followed by a letter (a review: each passed, and a file-name error
		// printed the lines after the first).
		{"status", "--state", wrap(tok, 76)},
		{"status", "--state", strings.ToUpper(tok)},
		{"status", "--state", "x_" + secret + "_0badc0dex"},
		// Quoted in a mail reply, and wrapped and pasted unquoted: an argument
		// a line (a second review).
		{"status", "--state", "> " + strings.ReplaceAll(wrap(tok, 70), "\n", "\n> ")},
		append([]string{"status", "--state"}, strings.Split(wrap(tok, 70), "\n")...),
		// Quoted with '|' or '#', with zero-width spaces in it, and a
		// quoted-printable mail's soft line breaks (a third review).
		{"status", "--state", "| " + strings.ReplaceAll(wrap(tok, 70), "\n", "\n| ")},
		{"status", "--state", "# " + strings.ReplaceAll(wrap(tok, 70), "\n", "\n# ")},
		{"status", "--state", strings.ReplaceAll(tok, "_", "_\u200b")},
		{"status", "--state", strings.ReplaceAll(wrap(tok, 70), "\n", "=\n")},
	} {
		code, stdout, stderr := runCLI("", nil, args...)
		if code != exitUsage || !strings.Contains(stderr, "not shown") {
			t.Errorf("%.40q: exit %d, want %d refusing the argument:\n%s", args, code, exitUsage, stderr)
		}
		if strings.Contains(stdout+stderr, secret) {
			t.Errorf("%.40q: the token's secret was printed:\n%s", args, stderr)
		}
		if strings.Contains(stdout+stderr, tok[:40]) {
			t.Errorf("%.40q: the token was printed:\n%s", args, stderr)
		}
	}
	// What only begins as a token does is an operator's path (a review: a state
	// directory below one named mesh1_… was refused as a token on the command line).
	for _, state := range []string{"/srv/mesh1_platform-networking/web-1", "/srv/mesh1_prod/" + strings.Repeat("ab", 32)} {
		if code, _, stderr := runCLI("", nil, "status", "--state", state); code == exitUsage || strings.Contains(stderr, "join token") {
			t.Errorf("--state %s: exit %d, refused as a token:\n%s", state, code, stderr)
		}
	}
}

// wrap breaks s into lines of n bytes, as a terminal or a mail client wraps a
// token.
func wrap(s string, n int) string {
	var b strings.Builder
	for len(s) > n {
		b.WriteString(s[:n] + "\n")
		s = s[n:]
	}
	return b.String() + s
}

// TestUsagePointsToCommandHelp: the short usage names run's flags in part, and says
// where the others are.
func TestUsagePointsToCommandHelp(t *testing.T) {
	code, _, stderr := runCLI("", nil)
	if code != exitUsage || !strings.Contains(stderr, "meshhost <command> --help") || !strings.Contains(stderr, "--metrics-listen") {
		t.Fatalf("exit %d, usage lacks the pointer to a command's --help:\n%s", code, stderr)
	}
}

// TestRefusalExitCodes: a refusal that running enrol again may cure exits 7 (the
// mesh could not take it now, or failed to answer one it may have committed, which
// the same token and key are answered from the state), any other exits 3.
func TestRefusalExitCodes(t *testing.T) {
	for code, want := range map[string]int{
		wire.CodeUnavailable: exitUnreachable,
		wire.CodeInternal:    exitUnreachable,
		wire.CodeTokenUsed:   exitToken,
		wire.CodeKeyInUse:    exitToken,
		wire.CodeKeyRevoked:  exitToken,
		"some_new_code":      exitToken,
	} {
		err := fmt.Errorf("enrol: %w", &enrol.RefusedError{Code: code, Message: "refused"})
		if got := exitCode(io.Discard, "enrol", err); got != want {
			t.Errorf("refusal %s: exit %d, want %d", code, got, want)
		}
	}
}

// TestAClockFaultExitsAsWorthAnotherTry: a broker certificate or an answer out of
// its validity by this machine's clock exits 7 (retrying may help, once the clock is
// set), as meshctl join exits 3 for the same fault; it exited 1, "another failure",
// which no help listed (a review).
func TestAClockFaultExitsAsWorthAnotherTry(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("4. connect: %w: this machine's clock is wrong", enrol.ErrClock),
		fmt.Errorf("%w: this machine's clock reads 2026-12-05T00:00:00Z", enrol.ErrAnswerTime),
	} {
		if got := exitCode(io.Discard, "enrol", err); got != exitUnreachable {
			t.Errorf("%v: exit %d, want %d", err, got, exitUnreachable)
		}
	}
}

// TestAFlagOfOneValueGivenTwice: a flag that takes one value, given twice, is a
// usage error naming both values (the last one used to win silently: `run --root A
// --root B` managed B); --broker stays repeatable, and --help still names each
// flag's type.
func TestAFlagOfOneValueGivenTwice(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"run", "--state", dir, "--root", dir + "/a", "--root", dir + "/b"},
		{"run", "--state", dir, "--state=" + dir + "/x", "--root", dir + "/a"},
		{"run", "--state", dir, "--root", dir + "/a", "--heartbeat", "10s", "--heartbeat", "20s"},
		{"enrol", "--state", dir, "--token-file", "a", "--token-file", "b"},
		{"status", "--state", dir, "--state", dir + "/other"},
	} {
		code, _, stderr := runCLI("", nil, args...)
		if code != exitUsage || !strings.Contains(stderr, "given twice") {
			t.Errorf("%v: exit %d, want %d saying the flag was given twice: %s", args, code, exitUsage, stderr)
		}
	}
	code, _, stderr := runCLI("", nil, "status", "--state", dir, "--json", "--json")
	if code == exitUsage {
		t.Errorf("--json twice: a usage error: %s", stderr)
	}
	code, _, stderr = runCLI("", nil, "run", "--state", dir+"/none", "--root", dir+"/r", "--broker", "127.0.0.1:1", "--broker", "127.0.0.1:2")
	if code == exitUsage {
		t.Errorf("--broker twice: a usage error: %s", stderr)
	}
	code, stdout, _ := runCLI("", nil, "run", "--help")
	if code != exitOK || !strings.Contains(stdout, "--heartbeat duration") || !strings.Contains(stdout, "--state string") || !strings.Contains(stdout, "--broker ip:port") {
		t.Errorf("run --help (exit %d) no longer names the flags' types:\n%s", code, stdout)
	}
}

// TestRunAndStatusRefuseAControlNodesDirectory (a walkthrough): a control node's
// data directory given as --state made run and status say "not enrolled: enrol it
// first" into it, which enrol refused, and run wrote its lock record over
// meshctl's. Both refuse it, exit 5, and write nothing.
func TestRunAndStatusRefuseAControlNodesDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.json"), []byte(`{"format":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--state", dir, "--root", filepath.Join(t.TempDir(), "root")},
		{"status", "--state", dir},
		{"hooks", "retry", "--state", dir},
	} {
		code, _, stderr := runCLI("", nil, args...)
		if code != exitIdentity || !strings.Contains(stderr, "is a control node's data directory") || strings.Contains(stderr, "enrol it first") {
			t.Errorf("%v: exit %d, want %d saying it is a control node's:\n%s", args[:2], code, exitIdentity, stderr)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the control node's directory holds %d entries after the refusals, want mesh.json alone", len(entries))
	}
}
