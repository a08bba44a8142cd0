package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedCommandLines: every meshctl and meshhost command line the documents
// show (in a code block, or quoted inline) names a command the binary has, and only
// flags that command's --help lists, so that a flag renamed or removed cannot leave
// a document telling operators to type it.
func TestDocumentedCommandLines(t *testing.T) {
	root := moduleDir(t)
	docs := []string{"README.md", "docs/getting-started.md", "docs/operations.md", "docs/declarations.md", "docs/security.md"}
	// A command line: indented as a code block, or between backquotes; what follows
	// a comment, a pipe, a redirection or a second command is not its.
	line := regexp.MustCompile("(?:^    |`)(?:sudo |runuser -u \\w+ -- )?(meshctl|meshhost) ([a-z][a-z-]*)([^`#|&;<>]*)")
	flagRe := regexp.MustCompile(`(?:^|\s|\[)(--[a-z][a-z-]*)`)
	// Words that follow the program's name in prose ("meshctl is the operator's tool").
	prose := map[string]bool{"is": true, "and": true, "or": true, "the": true, "as": true, "with": true, "on": true,
		"from": true, "to": true, "a": true, "at": true, "in": true, "of": true, "that": true, "binary": true,
		"user": true, "package": true, "packages": true, "service": true}
	helps := map[string]string{}
	help := func(program, command string) (string, bool) {
		key := program + " " + command
		if h, ok := helps[key]; ok {
			return h, h != ""
		}
		path := map[string]string{"meshctl": bin.Meshctl, "meshhost": bin.Meshhost}[program]
		out, err := exec.Command(path, append(strings.Fields(command), "--help")...).Output()
		h := string(out)
		if err != nil || !strings.HasPrefix(h, "usage") {
			h = ""
		}
		helps[key] = h
		return h, h != ""
	}
	seen := 0
	for _, doc := range docs {
		data, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for n, text := range strings.Split(string(data), "\n") {
			for _, m := range line.FindAllStringSubmatch(text, -1) {
				program, command, rest := m[1], m[2], m[3]
				if prose[command] {
					continue
				}
				if program == "meshhost" && command == "hooks" {
					command = "hooks retry"
				}
				seen++
				h, ok := help(program, command)
				if !ok {
					t.Errorf("%s:%d: `%s %s`: the binary has no such command (its --help fails)", doc, n+1, program, command)
					continue
				}
				for _, f := range flagRe.FindAllStringSubmatch(rest, -1) {
					name := f[1]
					if name == "--help" || name == "--version" {
						continue
					}
					if !regexp.MustCompile(regexp.QuoteMeta(name) + `[ =\[\n]`).MatchString(h) {
						t.Errorf("%s:%d: `%s %s %s`: its --help lists no %s", doc, n+1, program, command, strings.TrimSpace(rest), name)
					}
				}
			}
		}
	}
	if seen < 50 {
		t.Errorf("found %d command lines in the documents; the pattern no longer finds them", seen)
	}
}
