package integration

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSecurityDocNamesRealTests: every test, fuzz target and benchmark
// docs/security.md names as the proof of a claim exists, in the package it names
// (`pkg/TestName`: a package directory whose path ends in pkg; a bare name: an
// integration test, as the doc says, but in the fuzzing section, whose tables name
// the package in a column of their own: any).
// A test renamed or removed would leave a claim that nothing checks any more.
func TestSecurityDocNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	// Where each test function is declared: name → package directories.
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)\(`)
	where := map[string][]string{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		for _, m := range decl.FindAllSubmatch(b, -1) {
			where[string(m[1])] = append(where[string(m[1])], dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := regexp.MustCompile("`((?:[a-z][a-z0-9]*/)*)((?:Test|Fuzz|Benchmark)[A-Za-z0-9_]+)`")
	fuzzing := strings.Index(string(doc), "\n## Fuzzing")
	if fuzzing < 0 {
		t.Fatal("security.md has no section \"## Fuzzing\": the test's notion of where bare names are integration tests is out of date")
	}
	n := 0
	for _, m := range cited.FindAllStringSubmatchIndex(string(doc), -1) {
		at := m[0]
		m := []string{string(doc[m[0]:m[1]]), string(doc[m[2]:m[3]]), string(doc[m[4]:m[5]])}
		pkg, name := strings.TrimSuffix(m[1], "/"), m[2]
		if pkg == "pkg" && name == "TestName" {
			continue // the doc's own notation
		}
		n++
		dirs := where[name]
		if len(dirs) == 0 {
			t.Errorf("security.md names %s, which no test file declares", m[0])
			continue
		}
		if pkg == "" && at > fuzzing {
			continue
		}
		if pkg == "" {
			// The doc's notation: a bare name is an integration test (it
			// named package tests bare, a review).
			pkg = "integration"
		}
		found := false
		for _, d := range dirs {
			if d == "../"+pkg || strings.HasSuffix(d, "/"+pkg) {
				found = true
			}
		}
		if !found {
			t.Errorf("security.md names %s, but %s is declared in %v", m[0], name, dirs)
		}
	}
	if n < 100 {
		t.Fatalf("only %d tests named in security.md: the pattern no longer matches how it names them", n)
	}
}
