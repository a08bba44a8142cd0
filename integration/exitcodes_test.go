package integration

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// exitMeaning is what every document must say of an exit code: one of these
// words, in the text that code is listed with.
var exitMeaning = map[string]map[string][]string{
	"meshctl": {
		"exitOK": {"ok", "success"}, "exitFailure": {"failure"}, "exitUsage": {"usage"},
		"exitUnreachable": {"unreachable", "could not be reached"}, "exitRefused": {"refused"},
		"exitNotConverged": {"not converged"}, "exitRemoved": {"removed"},
		"exitDataDir": {"data directory"}, "exitInUse": {"in use"}, "exitInterrupted": {"interrupted"},
	},
	"meshhost": {
		"exitOK": {"ok", "success"}, "exitFailure": {"failure"}, "exitUsage": {"usage"},
		"exitToken": {"token"}, "exitSubstituted": {"not the mesh"},
		"exitIdentity": {"identity file"}, "exitRevoked": {"revoked"},
		"exitUnreachable": {"unreachable", "could not be reached"}, "exitInUse": {"in use"}, "exitInterrupted": {"interrupted"},
	},
}

// exitConstants reads the exit codes a command's main.go declares (the constants
// named exit*), and the file's package comment, from its source: the test cannot
// import a main package, and a copy of the values here could drift too.
func exitConstants(t *testing.T, path string) (map[int]string, string) {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	codes := map[int]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if !strings.HasPrefix(n.Name, "exit") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.INT {
					t.Fatalf("%s: %s is not an integer literal", path, n.Name)
				}
				v, _ := strconv.Atoi(lit.Value)
				if other, dup := codes[v]; dup {
					t.Fatalf("%s: %s and %s are both %d", path, other, n.Name, v)
				}
				codes[v] = n.Name
			}
		}
	}
	if len(codes) == 0 {
		t.Fatalf("%s declares no exit codes", path)
	}
	return codes, f.Doc.Text()
}

// listedCodes splits a list such as "0 ok, 1 failure, 2 usage (also ...), ..." (or
// "0 success; 1 failure; ...") into each code and the text that follows it.
func listedCodes(text string) map[int]string {
	text = strings.Join(strings.Fields(text), " ")
	re := regexp.MustCompile(`(?:^|[:;,] )(\d+) `)
	idx := re.FindAllStringSubmatchIndex(text, -1)
	out := map[int]string{}
	for i, m := range idx {
		end := len(text)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		code, _ := strconv.Atoi(text[m[2]:m[3]])
		if _, seen := out[code]; !seen {
			out[code] = text[m[1]:end]
		}
	}
	return out
}

// section is the text of a markdown file from the line that starts with start to
// the next line that starts with stop (or the end).
func section(t *testing.T, text, start, stop string) string {
	t.Helper()
	i := strings.Index(text, "\n"+start)
	if i < 0 {
		t.Fatalf("no %q", start)
	}
	rest := text[i+1:]
	if j := strings.Index(rest[len(start):], "\n"+stop); j >= 0 {
		return rest[:len(start)+j]
	}
	return rest
}

// checkList checks that a document's list of a program's exit codes names exactly
// the codes it declares, each with its meaning.
func checkList(t *testing.T, where, program string, codes map[int]string, listed map[int]string) {
	t.Helper()
	for code, name := range codes {
		text, ok := listed[code]
		if !ok {
			t.Errorf("%s: %s's exit %d (%s) is not listed", where, program, code, name)
			continue
		}
		if !mentionsAny(text, exitMeaning[program][name]) {
			t.Errorf("%s: %s's exit %d (%s) is listed as %q, which says none of %q", where, program, code, name, text, exitMeaning[program][name])
		}
	}
	for code, text := range listed {
		if _, ok := codes[code]; !ok {
			t.Errorf("%s: %s's exit %d (%q) is listed, but %s has no such code", where, program, code, text, program)
		}
	}
}

func mentionsAny(text string, words []string) bool {
	for _, w := range words {
		if strings.Contains(strings.ToLower(text), w) {
			return true
		}
	}
	return false
}

// TestExitCodesDocumented: every list and table of exit codes (README.md,
// operations.md's table, getting-started.md's tables of messages, each program's
// package comment and its usage text) names exactly the codes the programs
// declare, each with what it means; so that a code added, moved or removed in
// the code cannot leave a document behind.
func TestExitCodesDocumented(t *testing.T) {
	root := moduleDir(t)
	read := func(rel string) string {
		data, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	programs := map[string]string{
		"meshctl":  "controlplane/cmd/meshctl/main.go",
		"meshhost": "host/cmd/meshhost/main.go",
	}
	consts := map[string]map[int]string{}
	for program, src := range programs {
		codes, doc := exitConstants(t, filepath.Join(root, src))
		consts[program] = codes
		for code, name := range codes {
			if _, ok := exitMeaning[program][name]; !ok {
				t.Errorf("%s declares %s = %d, which this test does not know: document it (README.md, docs/operations.md, the usage text) and add what it means here", program, name, code)
			}
		}
		_, list, ok := strings.Cut(doc, "Exit codes:")
		if !ok {
			t.Errorf("%s's package comment lists no exit codes", src)
			continue
		}
		list, _, _ = strings.Cut(list, ".\n\n")
		checkList(t, src+" package comment", program, codes, listedCodes(list))
	}

	// README.md: a paragraph per program under "## Exit codes".
	readme := section(t, read("README.md"), "## Exit codes", "## ")
	for program := range programs {
		_, para, ok := strings.Cut(readme, "`"+program+"`: ")
		if !ok {
			t.Errorf("README.md: no exit codes of %s", program)
			continue
		}
		para, _, _ = strings.Cut(para, "\n\n")
		// The sentence about the unit's restarts names codes again.
		para, _, _ = strings.Cut(para, "`"+program+".service`")
		checkList(t, "README.md", program, consts[program], listedCodes(": "+para))
	}

	// operations.md: a table of code, meshctl, meshhost.
	table := section(t, read("docs/operations.md"), "## Exit codes", "## ")
	rows := map[string]map[int]string{"meshctl": {}, "meshhost": {}}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 {
			continue
		}
		code, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			continue
		}
		for i, program := range []string{"meshctl", "meshhost"} {
			if text := strings.TrimSpace(cells[2+i]); text != "" {
				rows[program][code] = text
			}
		}
	}
	for program := range programs {
		checkList(t, "docs/operations.md", program, consts[program], rows[program])
	}

	// getting-started.md: the messages each program prints, with their exit code.
	gs := read("docs/getting-started.md")
	for program := range programs {
		header := "| message (" + program + ") | exit |"
		tbl := section(t, gs, header, "\n")
		n := 0
		for _, line := range strings.Split(tbl, "\n")[2:] {
			cells := strings.Split(line, "|")
			if len(cells) < 4 {
				break
			}
			code, err := strconv.Atoi(strings.TrimSpace(cells[2]))
			if err != nil {
				t.Errorf("getting-started.md: %s row %q: exit %q is no number", program, line, cells[2])
				continue
			}
			if _, ok := consts[program][code]; !ok {
				t.Errorf("getting-started.md: %s row %q: %s has no exit %d", program, strings.TrimSpace(cells[1]), program, code)
			}
			n++
		}
		if n == 0 {
			t.Errorf("getting-started.md: the table of %s's messages has no rows", program)
		}
	}

	// The usage each program prints lists them too.
	for program, path := range map[string]string{"meshctl": bin.Meshctl, "meshhost": bin.Meshhost} {
		out, err := exec.Command(path, "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", program, err)
		}
		_, list, ok := strings.Cut(string(out), "exit codes: ")
		if !ok {
			t.Errorf("%s --help lists no exit codes:\n%s", program, out)
			continue
		}
		checkList(t, program+" --help", program, consts[program], listedCodes(": "+list))
	}

	// Decision 0007: cobra's own refusals are usage errors.
	for code, name := range consts["meshctl"] {
		d := strings.Join(strings.Fields(read("docs/decisions/0007-the-command-line.md")), " ")
		if name == "exitUsage" && !strings.Contains(d, "are exit "+strconv.Itoa(code)) {
			t.Errorf("decision 0007 does not say that a command line cobra refuses exits %d", code)
		}
	}
}
