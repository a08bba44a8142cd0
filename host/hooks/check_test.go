package hooks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckFindsCommandsThatCannotRun: a hook whose command is missing or not
// executable is found as the agent starts, each with its reason; a command on the
// PATH, and a script under the managed root given by a relative path, pass. Before,
// such a hook was found only when it ran, at the first change of its paths.
func TestCheckFindsCommandsThatCannotRun(t *testing.T) {
	root := t.TempDir()
	dir := t.TempDir()
	notExec := filepath.Join(dir, "reload.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "reload"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"on-path","paths":["x"],"run":["sh","-c","true"]},
		{"name":"in-root","paths":["x"],"run":["bin/reload"]},
		{"name":"missing","paths":["x"],"run":["/nonexistent/bin/reload-app"]},
		{"name":"typo","paths":["x"],"run":["systemctll","restart","app"]},
		{"name":"not-executable","paths":["x"],"run":["`+notExec+`"]},
		{"name":"a-directory","paths":["x"],"run":["`+dir+`"]},
		{"name":"relative","paths":["x"],"run":["sbin/reload"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	found := cfg.Check(root)
	var got []string
	for _, err := range found {
		if !errors.Is(err, ErrCommand) {
			t.Errorf("%v does not match ErrCommand", err)
		}
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{`"missing"`, `"typo": systemctll: not found`, `"not-executable"`, "is not executable", `"a-directory"`, "is not a regular file",
		// Where it was looked for (a walkthrough: "not found" alone).
		`"relative": sbin/reload: not found at ` + filepath.Join(root, "sbin", "reload") + " (a relative command is under the managed root)", "not found on the hooks' PATH ("} {
		if !strings.Contains(all, want) {
			t.Errorf("findings lack %s:\n%s", want, all)
		}
	}
	if len(found) != 5 || strings.Contains(all, "on-path") || strings.Contains(all, "in-root") {
		t.Errorf("want the 5 hooks that cannot run, got:\n%s", all)
	}
}

// TestARelativePATHEntryIsNotSearched: a bare command name is not looked up on a
// relative entry of the agent's PATH ("bin"), as exec refuses what it finds there:
// the file checked (under the agent's working directory) was not the file run
// (under the hook's), which no check had judged. The hook's command is then not
// found, said as the agent starts and when the hook runs, and nothing is run.
// Before, the check passed and exec ran whatever was at that path from the hook's
// working directory (the managed root then: a file a declaration could write).
func TestARelativePATHEntryIsNotSearched(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	marker := filepath.Join(base, "ran")
	if err := os.Mkdir(filepath.Join(base, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "meshtest-reload"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "bin:"+os.Getenv("PATH"))
	cfg, err := Load(write(t, `{"hooks":[{"name":"reload","paths":["*"],"run":["meshtest-reload"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if found := cfg.Check(root); len(found) != 1 || !strings.Contains(found[0].Error(), "meshtest-reload: not found") {
		t.Fatalf("as the agent starts: %v, want the command not found", found)
	}
	_, failures := cfg.Run(context.Background(), root, []string{"a"})
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "not run: meshtest-reload: not found") {
		t.Fatalf("failures %v, want the hook not run, its command not found", failures)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command was run from a relative PATH entry")
	}
}

// TestCheckFindsPatternsThatDoNotMatchAsWritten (a walkthrough): "./etc/*" and
// "etc/" match no declared path (paths are clean), and "etc/**" matches one level
// as "etc/*" does; all were taken without a word, the hook never running for what
// it seemed to name. Each is found (ErrPattern), with the pattern to write, and
// said in the log by its kind; a command another user could change is no longer
// told "unless it is installed first". The file still loads: a hooks file in use
// must not stop the agent.
func TestCheckFindsPatternsThatDoNotMatchAsWritten(t *testing.T) {
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"dot","paths":["./etc/*"],"run":["sh","-c","true"]},
		{"name":"slash","paths":["etc/"],"run":["sh","-c","true"]},
		{"name":"double","paths":["etc/**"],"run":["sh","-c","true"]},
		{"name":"root","paths":["./"],"run":["sh","-c","true"]},
		{"name":"up","paths":["../etc/*"],"run":["sh","-c","true"]},
		{"name":"fine","paths":["etc/app/*/*.conf","etc/*"],"run":["sh","-c","true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	found := cfg.Check(t.TempDir())
	var got []string
	for _, err := range found {
		if !errors.Is(err, ErrPattern) || errors.Is(err, ErrCommand) || !strings.HasPrefix(Warning(err), "a hook's path pattern does not match") {
			t.Errorf("%v: want ErrPattern, warned of as a pattern", err)
		}
		got = append(got, err.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{`"dot": path pattern "./etc/*" never matches`, `write "etc/*"`, `"slash": path pattern "etc/" never matches`, `write "etc/*"`,
		`"double": path pattern "etc/**" matches one level only`,
		`"root": path pattern "./" never matches: it names the managed root itself`, `write "*"`,
		`"up": path pattern "../etc/*" never matches: declared paths have no ".."`} {
		if !strings.Contains(all, want) {
			t.Errorf("findings lack %s:\n%s", want, all)
		}
	}
	if len(found) != 5 || strings.Contains(all, "fine") {
		t.Errorf("want the 5 patterns, got:\n%s", all)
	}
	if w := Warning(fmt.Errorf("%w: hook %q: not run: it belongs to uid 65534", ErrCommand, "x")); strings.Contains(w, "installed first") || !strings.Contains(w, "owner or mode") {
		t.Errorf("a command's warning: %q", w)
	}
}
