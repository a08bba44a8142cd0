package api

import (
	"strings"
	"testing"
	"unicode/utf8"

	"mesh/host/buildinfo"
)

func TestValidStatusCode(t *testing.T) {
	for _, c := range []string{"apply_failed", "hook_failed", "wrong_audience", "e2", strings.Repeat("a", MaxStatusCodeLen)} {
		if !ValidStatusCode(c) {
			t.Errorf("%q refused", c)
		}
	}
	for _, c := range []string{"", "Apply", "a-b", "a b", "x\x1b[2J", "é", strings.Repeat("a", MaxStatusCodeLen+1)} {
		if ValidStatusCode(c) {
			t.Errorf("%q accepted", c)
		}
	}
}

func TestCleanText(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"write /srv/app.conf: no space left on device", 512, "write /srv/app.conf: no space left on device"},
		{"two\nlines\tand\r", 512, "two lines and "},
		{"\x1b]0;pwned\x07\x1b[2J", 512, `\x1b]0;pwned\a\x1b[2J`},
		{"evil\u202egnp.exe\u2028x", 512, `evil\u202egnp.exe\u2028x`},
		{"bad \xff utf-8", 512, `bad \ufffd utf-8`},
		// The invisible ones too, as meshctl's TerminalText and meshhost write them:
		// zero-width space, word joiner, byte order mark, soft hyphen, and the tag
		// characters that carry a hidden text ("ig" here) in an innocent one.
		{"apply ok\u200b\u2060\ufeff\u00ad\U000e0069\U000e0067", 512, `apply ok\u200b\u2060\ufeff\u00ad\U000e0069\U000e0067`},
		{"\x7f\u0085", 512, `\x7f\u0085`},
		{"keeps é, 日本 and \ufffd", 512, "keeps é, 日本 and \ufffd"},
		{"abcdef", 4, "abcd"},
		{"ab日本", 4, "ab"},    // never half a character
		{"a\x1b[2J", 4, "a"}, // never half an escape
		{strings.Repeat("x", 600), 512, strings.Repeat("x", 512)},
	} {
		if got := CleanText(c.in, c.max); got != c.want {
			t.Errorf("CleanText(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

func FuzzCleanText(f *testing.F) {
	f.Add("\x1b]0;t\x07 line\r\n\u202e\xff", 40)
	f.Add("plain", 3)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 0 || max > 4096 {
			return
		}
		out := CleanText(s, max)
		if len(out) > max || !utf8.ValidString(out) {
			t.Fatalf("CleanText(%q, %d) = %q: too long or not UTF-8", s, max, out)
		}
		for _, r := range out {
			if hidden(r) {
				t.Fatalf("CleanText(%q, %d) = %q keeps %U", s, max, out, r)
			}
		}
		if CleanText(out, max) != out {
			t.Fatalf("not stable: %q -> %q -> %q", s, out, CleanText(out, max))
		}
		shown := TerminalText(s)
		if !utf8.ValidString(shown) || TerminalText(shown) != shown {
			t.Fatalf("TerminalText(%q) = %q: not UTF-8, or not stable", s, shown)
		}
		for _, r := range shown {
			if terminalHidden(r) {
				t.Fatalf("TerminalText(%q) = %q keeps %U", s, shown, r)
			}
		}
	})
}

func TestValidAgent(t *testing.T) {
	for _, a := range []string{"meshhost/0.1.0", "meshhost/0.1.0+git20261203145709.7132ef2931ef.dirty", "a/b",
		"meshhost/" + strings.Repeat("9", MaxAgentLen-len("meshhost/"))} {
		if !ValidAgent(a) {
			t.Errorf("%q refused", a)
		}
	}
	for _, a := range []string{"", "meshhost", "/0.1.0", "meshhost/", "meshhost/0.1.0/x", "meshctl join", "meshhost/0.1.0\n",
		"meshhost/0.1.0\x1b[2J", "meshhost/0.1.0\u202e", "meshhost/é", "meshhost/0.1.0 (evil)", `meshhost/"x"`,
		"meshhost/" + strings.Repeat("9", MaxAgentLen-len("meshhost/")+1)} {
		if ValidAgent(a) {
			t.Errorf("%q accepted", a)
		}
	}
	valid := false
	if n := testing.AllocsPerRun(100, func() { valid = ValidAgent("meshhost/0.1.0+git20261203145709.7132ef2931ef") }); n != 0 || !valid {
		t.Errorf("ValidAgent allocates %v times a call (and says %v of a stamped agent); it runs for every status report", n, valid)
	}
}

// TestEveryStampedBuildIsAValidAgent: what an agent names itself ("meshhost/" and
// its build's version, buildinfo.Stamped) is kept, at its longest (a release of
// two-digit parts, a commit's time and revision, a modified tree) and for a
// tagged release: an upgraded fleet is never shown as unknown for its versions'
// form.
func TestEveryStampedBuildIsAValidAgent(t *testing.T) {
	rev := strings.Repeat("f", 40)
	for _, v := range []string{
		buildinfo.Stamped("99.99.99", "(devel)", rev, "2026-12-03T14:57:09Z", true),
		buildinfo.Stamped("0.1.0", "(devel)", rev, "2026-12-03T14:57:09Z", false),
		buildinfo.Stamped("0.1.0", "v0.2.0", rev, "2026-12-03T14:57:09Z", false),
		buildinfo.Stamped("0.1.0", "", "", "", false),
	} {
		if agent := "meshhost/" + v; !ValidAgent(agent) {
			t.Errorf("the agent of a build stamped %q, %q, is not kept", v, agent)
		}
	}
}

// TestTerminalText: what would act on a terminal is written out, line breaks and
// tabs are kept, and clean text is returned as it is.
func TestTerminalText(t *testing.T) {
	for in, want := range map[string]string{
		"no mesh configuration in ./cp":  "no mesh configuration in ./cp",
		"two\nlines\tand a tab":          "two\nlines\tand a tab",
		"in \x1b[31mRED\x1b[0m: run":     `in \x1b[31mRED\x1b[0m: run`,
		"over\rwritten":                  `over\rwritten`,
		"abc\u202edcba":                  `abc\u202edcba`,
		"bad \xff byte":                  `bad \ufffd byte`,
		"zero\u200bwidth\ufeff\u00ad":    `zero\u200bwidth\ufeff\u00ad`,
		"ünïcödé is shown as it is: 日本語": "ünïcödé is shown as it is: 日本語",
	} {
		if got := TerminalText(in); got != want {
			t.Errorf("TerminalText(%q) = %q, want %q", in, got, want)
		}
	}
}
