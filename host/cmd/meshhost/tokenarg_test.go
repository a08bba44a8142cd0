package main

import (
	"fmt"
	"hash/crc32"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// realToken is a token that parses, with its secret's hex.
func realToken(t *testing.T) (tok, secret string) {
	t.Helper()
	secret = strings.Repeat("5e", 31) + "a7"
	signed := "mesh1_demo_10.0.0.1:7300,[fd00::2]:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-2_worker_1900000000_" + secret
	return fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli))), secret
}

// commandFlags is every flag a command's --help lists, and whether it takes a value.
func commandFlags(t *testing.T, command ...string) map[string]bool {
	t.Helper()
	code, out, stderr := runCLI("", nil, append(command, "--help")...)
	if code != exitOK {
		t.Fatalf("%s --help: exit %d: %s", command, code, stderr)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)( \S+)?$`).FindAllStringSubmatch(out, -1) {
		flags[m[1]] = m[2] != ""
	}
	if len(flags) == 0 {
		t.Fatalf("%s --help lists no flag:\n%s", command, out)
	}
	return flags
}

// TestNoFlagEchoesATokensSecret: a token, or what follows its first ':' (the text
// net/netip quoted for --broker, which no longer starts as a token does, so that the
// secret reached stderr and the journal), given to any flag of any command, in
// either form (--flag V, --flag=V), or as an argument or a flag's name, is refused as
// a usage error (exit 2) that says which argument it is and never shows the secret.
func TestNoFlagEchoesATokensSecret(t *testing.T) {
	tok, secret := realToken(t)
	tails := map[string]string{
		"a token":                   tok,
		"its end after the first :": tok[strings.Index(tok, ":")+1:],
		"its end after the last :":  tok[strings.LastIndex(tok, ":")+1:],
	}
	dir := t.TempDir()
	root := filepath.Join(t.TempDir(), "managed")
	commands := map[string][]string{
		"enrol":       {"enrol", "--state", dir},
		"run":         {"run", "--state", dir, "--root", root},
		"status":      {"status", "--state", dir},
		"hooks retry": {"hooks", "retry", "--state", dir},
		"version":     {"version"},
	}
	check := func(name string, args []string, wantWhat string) {
		t.Helper()
		code, stdout, stderr := refusedAtOnce(t, args...)
		if strings.Contains(stdout+stderr, secret) || strings.Contains(stdout+stderr, secret[:16]) {
			t.Errorf("%s: the token's secret was printed (exit %d):\n%s%s", name, code, stdout, stderr)
			return
		}
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d (usage):\n%s", name, code, exitUsage, stderr)
		}
		if wantWhat != "" && (!strings.Contains(stderr, wantWhat) || !strings.Contains(stderr, "holds a join token")) {
			t.Errorf("%s: the refusal does not say %q holds a token:\n%s", name, wantWhat, stderr)
		}
	}
	for what, v := range tails {
		for cmd, base := range commands {
			base := base[:len(base):len(base)]
			for flag, takesValue := range commandFlags(t, strings.Fields(cmd)...) {
				if flag == "help" {
					continue
				}
				if takesValue {
					check(fmt.Sprintf("%s, %s to --%s", cmd, what, flag), append(base, "--"+flag, v), "the value of --"+flag)
				}
				check(fmt.Sprintf("%s, %s to --%s=", cmd, what, flag), append(base, "--"+flag+"="+v), "the value of --"+flag)
			}
			check(fmt.Sprintf("%s, %s as an argument", cmd, what), append(base, v), "argument")
			check(fmt.Sprintf("%s, %s as a flag", cmd, what), append(base, "--"+v), "argument")
		}
		for _, args := range [][]string{{v}, {"help", v}, {"--version", v}, {"hooks", v}} {
			check(fmt.Sprintf("meshhost %q", args[0]), args, "")
		}
	}
}

// TestBrokerFlagTakesWhatATokenTakes: --broker refuses, as a usage error, the
// addresses a token refuses (a zone, an unspecified address, port 0, ...), which it
// once took and then failed to dial for as long as the agent ran; a form netip reads
// is taken and written canonical.
func TestBrokerFlagTakesWhatATokenTakes(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ addr, want string }{
		{"[fe80::1%eth0]:80", "has an IPv6 zone"},
		{"0.0.0.0:7300", "is an unspecified address"},
		{"[::]:7300", "is an unspecified address"},
		{"10.0.0.1:0", "has port 0"},
		{"224.0.0.1:7300", "is a multicast address"},
		{"[::ffff:10.0.0.1]:7300", "is an IPv4-mapped IPv6 address"},
		{"cp-1.example:7300", "is not ip:port"},
		{"10.0.0.1", "is not ip:port"},
	} {
		code, _, stderr := runCLI("", nil, "run", "--state", dir, "--root", filepath.Join(dir, "managed"), "--broker", c.addr)
		if code != exitUsage || !strings.Contains(stderr, "for flag --broker: the broker address "+c.want) {
			t.Errorf("--broker %s: exit %d, want %d and %q:\n%s", c.addr, code, exitUsage, c.want, stderr)
		}
	}
}
