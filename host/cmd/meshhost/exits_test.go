package main

import (
	"bytes"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestHelpListsEveryExit: each command's --help lists every exit code the command
// can return, each once, in order, and no other. enrol's listed 3, 4, 5, 7 and 8,
// not 2 (a usage error) nor 9 (interrupted), which it returns too. The codes
// below are what exitCode makes of the errors each command can meet: enrol alone
// reads a token (3) and meets a broker that is not the mesh (4) or unreachable
// (7); run and status alone read a revocation (6); run and enrol alone hold the
// state directory's lock (8); enrol and hooks retry alone wait on something a
// signal interrupts with 9 (run stops on one, and exits 0). version listed 0 and 2,
// and exits 1 when its output cannot be written (TestAnUnwrittenOutputIsAnExitTheHelpLists).
func TestHelpListsEveryExit(t *testing.T) {
	want := map[string][]int{
		"enrol":       {0, 1, 2, 3, 4, 5, 7, 8, 9},
		"run":         {0, 1, 2, 5, 6, 8},
		"status":      {0, 1, 2, 5, 6},
		"hooks retry": {0, 1, 2, 5, 9},
		"version":     {0, 1, 2},
	}
	line := regexp.MustCompile(`^  (\d)  \S`)
	for name, codes := range want {
		code, stdout, stderr := runCLI("", nil, append(strings.Fields(name), "--help")...)
		if code != exitOK {
			t.Fatalf("%s --help: exit %d: %s", name, code, stderr)
		}
		_, list, ok := strings.Cut(stdout, "\nexit codes:\n")
		if !ok {
			t.Errorf("%s --help lists no exit codes:\n%s", name, stdout)
			continue
		}
		var got []int
		for _, l := range strings.Split(strings.TrimSuffix(list, "\n"), "\n") {
			if m := line.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				got = append(got, n)
			} else if !strings.HasPrefix(l, "     ") {
				t.Errorf("%s --help: %q in the exit codes is neither a code nor its continuation", name, l)
			}
		}
		if !slices.Equal(got, codes) {
			t.Errorf("%s --help lists exits %v, want %v:\n%s", name, got, codes, list)
		}
	}
}

// failingWriter is a stdout that cannot be written, as /dev/full is.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestAnUnwrittenOutputIsAnExitTheHelpLists: `meshhost version > /dev/full` exits 1,
// saying the output could not be written, and version --help lists that exit (it
// listed 0 and 2 only).
func TestAnUnwrittenOutputIsAnExitTheHelpLists(t *testing.T) {
	_, help, _ := runCLI("", nil, "version", "--help")
	_, list, _ := strings.Cut(help, "\nexit codes:\n")
	dir, _ := enrolled(t)
	for _, args := range [][]string{{"version"}, {"version", "--json"}, {"status", "--state", dir}, {"status", "--state", dir, "--json"}} {
		var errb bytes.Buffer
		code := run(args, &cliIO{stdin: strings.NewReader(""), stdout: failingWriter{}, stderr: &errb, getenv: func(string) string { return "" }})
		if code != exitFailure || !strings.Contains(errb.String(), "the output could not be written") {
			t.Errorf("%q to a full disk: exit %d, %q; want %d saying the output could not be written", args, code, errb.String(), exitFailure)
		}
		if args[0] == "version" && !regexp.MustCompile(`(?m)^  `+strconv.Itoa(code)+`  the output could not be written`).MatchString(list) {
			t.Errorf("%q exits %d when its output cannot be written, which version --help does not list:\n%s", args, code, list)
		}
	}
}
