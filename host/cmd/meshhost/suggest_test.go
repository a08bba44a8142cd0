package main

import (
	"strings"
	"testing"
)

// TestMisspeltCommandSuggests: a command meshhost does not have is said in a few
// lines, exit 2, with the commands within two edits of it, or that it begins, as
// meshctl (cobra) suggests them; `meshhost stauts` printed the whole overview and no
// suggestion.
func TestMisspeltCommandSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string // suggested; none: no suggestion
	}{
		{[]string{"stauts"}, []string{"status"}},
		{[]string{"statsu", "--state", "x"}, []string{"status"}},
		{[]string{"Status"}, []string{"status"}},
		{[]string{"enrole"}, []string{"enrol"}},
		{[]string{"rn"}, []string{"run"}},
		{[]string{"ver"}, []string{"version"}},
		{[]string{"hook"}, []string{"hooks"}},
		{[]string{"h"}, []string{"hooks", "help"}},
		{[]string{"help", "stauts"}, []string{"status"}},
		{[]string{"frobnicate"}, nil},
		{[]string{"apply"}, nil},
	} {
		code, stdout, stderr := runCLI("", nil, c.args...)
		typed := c.args[0]
		if typed == "help" {
			typed = c.args[1]
		}
		if code != exitUsage || stdout != "" || !strings.HasPrefix(stderr, `meshhost: unknown command "`+typed+`"`) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and the unknown command on stderr", c.args, code, stdout, stderr, exitUsage)
		}
		if c.want != nil && !strings.Contains(stderr, "\nDid you mean this?\n\t"+strings.Join(c.want, "\n\t")+"\n\n") {
			t.Errorf("%q: %q; want %v suggested", c.args, stderr, c.want)
		}
		if c.want == nil && strings.Contains(stderr, "Did you mean") {
			t.Errorf("%q: %q; want no suggestion", c.args, stderr)
		}
		// Short: the error and where the usage is, not the overview.
		if !strings.HasSuffix(stderr, "run `meshhost --help` for usage\n") || strings.Contains(stderr, "usage:") || strings.Count(stderr, "\n") > 8 {
			t.Errorf("%q: want a few lines ending with the pointer to --help, not the overview:\n%s", c.args, stderr)
		}
	}
	code, stdout, stderr := runCLI("", nil, "hooks", "retyr", "--state", "x")
	if code != exitUsage || stdout != "" || !strings.Contains(stderr, `unknown command "hooks retyr" (did you mean hooks retry?)`) {
		t.Errorf("hooks retyr: exit %d, stdout %q, stderr %q; want %d suggesting hooks retry", code, stdout, stderr, exitUsage)
	}
}

func TestLevenshtein(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"run", "", 3}, {"", "run", 3}, {"run", "run", 0},
		{"stauts", "status", 2}, {"rn", "run", 1}, {"fun", "run", 1}, {"enroll", "enrol", 1},
		{"kitten", "sitting", 3}, {"état", "etat", 1},
	} {
		if got := levenshtein(c.a, c.b); got != c.want {
			t.Errorf("levenshtein(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
