package main

import (
	"crypto/ed25519"
	"encoding/hex"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/tokenfmt"
)

// TestNoFlagEchoesATokensSecret: a token, or what follows its first or last ':'
// (the text a parser quotes when it cuts an address at its port: net/netip's error
// of meshhost's --broker carried the secret so, since the text no longer starts as
// a token does), given to any flag of any command in either form, or as a command's
// argument, never brings the token's secret to stdout or stderr. The demo is left
// out: its one flag names a directory it would fill (TestNoOutputHoldsATokensSecret
// runs it with the binary).
func TestNoFlagEchoesATokensSecret(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	tok, err := tokenfmt.Mint(tokenfmt.MintOptions{
		Mesh: "x", Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300"), netip.MustParseAddrPort("[fd00::2]:7300")},
		CAPin: [32]byte{1}, SigningKey: pub, Node: "web-2", Role: tokenfmt.RoleWorker, TTL: 15 * time.Minute, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	text, secret := tok.Encode(), hex.EncodeToString(tok.Secret[:])
	values := map[string]string{
		"a token":                   text,
		"its end after the first :": text[strings.Index(text, ":")+1:],
		"its end after the last :":  text[strings.LastIndex(text, ":")+1:],
	}
	lines := map[string][]string{}
	for _, spec := range commands() {
		switch spec.name {
		case "demo", "completion":
			continue
		case "token":
			lines["token"], lines["token list"], lines["token cancel"] = []string{"token"}, []string{"token", "list"}, []string{"token", "cancel"}
		case "control":
			lines["control status"], lines["control remove"] = []string{"control", "status"}, []string{"control", "remove"}
		case "signing-key":
			lines["signing-key rotate"], lines["signing-key status"] = []string{"signing-key", "rotate"}, []string{"signing-key", "status"}
		default:
			lines[spec.name] = []string{spec.name}
		}
	}
	flagLine := regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z-]+) (\w+)`)
	checked := 0
	for name, base := range lines {
		code, help, _ := runCLI(append(base[:len(base):len(base)], "--help")...)
		if code != exitOK {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		var flags []string
		for _, m := range flagLine.FindAllStringSubmatch(help, -1) {
			flags = append(flags, m[1])
		}
		for what, v := range values {
			runs := [][]string{append(base[:len(base):len(base)], v)}
			for _, f := range flags {
				runs = append(runs, append(base[:len(base):len(base)], "--"+f, v), append(base[:len(base):len(base)], "--"+f+"="+v))
			}
			for _, args := range runs {
				_, stdout, stderr := runCLI(args...)
				checked++
				if strings.Contains(stdout+stderr, secret) || strings.Contains(stdout+stderr, secret[:16]) {
					t.Errorf("meshctl %s with %s: the token's secret was printed:\n%s%s", strings.Join(args[:len(args)-1], " "), what, stdout, stderr)
				}
			}
		}
	}
	if checked < 200 {
		t.Fatalf("only %d command lines checked: the flag listing is not read", checked)
	}
}
