package tokenfmt

import (
	"strings"
	"testing"
)

func TestHideTokens(t *testing.T) {
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_web-1_worker_1900000000_" + strings.Repeat("5e", 32) + "_deadbeef"
	for _, c := range []struct{ in, want string }{
		{`unexpected argument "` + tok + `"`, `unexpected argument "<a token: not shown>"`},
		{"unknown command " + tok + " for meshctl", "unknown command <a token: not shown> for meshctl"},
		{tok, "<a token: not shown>"},
		{"a: " + tok + "\n b: mesh2_" + tok[6:], "a: <a token: not shown>\n b: <a token: not shown>"},
		{"a join token starts with mesh1_", "a join token starts with mesh1_"},
		{"meshhost enrol: the mesh refused", "meshhost enrol: the mesh refused"},
		{"mesh1_short_cut", "mesh1_short_cut"},
		{"mesh_no_version_here_at_all_really", "mesh_no_version_here_at_all_really"},
		{"ends in mesh", "ends in mesh"},
		{"ends in mesh12", "ends in mesh12"},
		{"", ""},
		// The end of a token without its head: what a parser quotes of the text after
		// the token's first ':' (net/netip's "invalid port"), or after a ','.
		{`invalid port "` + tok[strings.Index(tok, ":")+1:] + `" parsing`, `invalid port "<a token: not shown>" parsing`},
		{"(" + tok[strings.LastIndex(tok, "_")-65:] + ")\n", "<a token: not shown>\n"},
		{tok[strings.Index(tok, ":")+1 : len(tok)-3], "<a token: not shown>"},
		// Public keys and pins alone, as messages name them, are not a token's end.
		{"pin " + strings.Repeat("ab", 32) + " and key_" + strings.Repeat("cd", 32) + "_web-1", "pin " + strings.Repeat("ab", 32) + " and key_" + strings.Repeat("cd", 32) + "_web-1"},
		{"x_" + strings.Repeat("ab", 32) + "_deadbeef0", "x_" + strings.Repeat("ab", 32) + "_deadbeef0"},
	} {
		if got := HideTokens(c.in); got != c.want {
			t.Errorf("HideTokens(%.60q) = %q, want %q", c.in, got, c.want)
		}
		if strings.Contains(HideTokens(c.in), strings.Repeat("5e", 32)) {
			t.Errorf("the secret survived in %q", HideTokens(c.in))
		}
	}
}

func FuzzHideTokens(f *testing.F) {
	f.Add("unexpected argument \"mesh1_demo_127.0.0.1:7300_abcdefabcdefabcdef\"")
	f.Add("mesh1_")
	f.Add("invalid port \"7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("5e", 32) + "_deadbeef\"")
	f.Fuzz(func(t *testing.T, s string) {
		out := HideTokens(s)
		if !strings.Contains(s, Prefix) && !strings.Contains(s, "_") && out != s {
			t.Fatalf("changed a text without %q or '_': %q -> %q", Prefix, s, out)
		}
		if HoldsToken(s) != (out != s) {
			t.Fatalf("HoldsToken(%q) = %v, but HideTokens gives %q", s, HoldsToken(s), out)
		}
		if HideTokens(out) != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, out, HideTokens(out))
		}
	})
}
