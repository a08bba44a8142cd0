package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mesh/host/hooks"
	"mesh/host/wire"
)

// hooksFile writes the hooks named in runs (name: its paths' pattern and shell
// command) to p, and loads it.
func hooksFile(t *testing.T, p string, runs ...[3]string) hooks.Config {
	t.Helper()
	var list []any
	for _, r := range runs {
		list = append(list, map[string]any{"name": r[0], "paths": []string{r[1]}, "run": []string{"sh", "-c", r[2]}})
	}
	js, err := json.Marshal(map[string]any{"hooks": list})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// retried asks a for a retry, as the agent's loop does, and returns its answer.
func retried(t *testing.T, a *Agent) HooksOutcome {
	t.Helper()
	reply := make(chan HooksOutcome, 1)
	a.retryHooks(reply)
	select {
	case out := <-reply:
		return out
	default:
		t.Fatal("the retry was not answered at once")
		return HooksOutcome{}
	}
}

// TestRetryWithNothingOwedReadsTheHooksFileAgain (a docs walkthrough): `meshhost
// hooks retry` with no hook owed or failed answered "nothing to run" without reading
// the hooks file, and an operator who had added a hook to it believed it live while
// the agent kept the hooks read at start. The retry reads the file whenever no hook
// runs or waits, says so, and the added hook runs at the next change; a file that
// cannot be used is said, the hooks read before kept; while a hook runs, the answer
// says the file was not read, and why.
func TestRetryWithNothingOwedReadsTheHooksFileAgain(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	p, mark := filepath.Join(dir, "hooks.json"), filepath.Join(dir, "db-reloaded")
	restart := [3]string{"restart-app", "etc/*", "true"}
	reloadDB := [3]string{"reload-db", "db/*", "touch " + mark}
	a := f.withHooks(t, hooksFile(t, p, restart))
	a.o.HooksFile = p
	if err := a.handle(context.Background(), f.declFiles(t, 1, "etc/app.conf")); err != nil {
		t.Fatal(err)
	}

	// The operator adds a hook, and asks for a retry: nothing is owed.
	hooksFile(t, p, restart, reloadDB)
	if out := retried(t, a); !out.Nothing || !out.Reloaded || out.NotReloaded != "" || out.ConfigError != "" {
		t.Fatalf("a retry with nothing owed, the file edited: %+v; want nothing run and the file read again", out)
	}
	if err := a.handle(context.Background(), f.declFiles(t, 2, "etc/app.conf", "db/app.conf")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the hook added to the file did not run at the next change: %v", err)
	}

	// A file that cannot be used: said, and the hooks read before stay.
	if err := os.WriteFile(p, []byte(`{"hooks":[`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := retried(t, a); out.ConfigError == "" || out.Reloaded || out.Nothing {
		t.Fatalf("a retry with the file cut short: %+v; want the file's fault said", out)
	}
	if got := hookNames(a.o.Hooks); !slices.Equal(got, []string{"restart-app", "reload-db"}) {
		t.Fatalf("after a file that cannot be used the agent runs %q, want the hooks read before", got)
	}

	// A hook runs: the file is not read again, and the answer says why.
	hooksFile(t, p, restart)
	a.hookBusy = true
	reply := make(chan HooksOutcome, 1)
	a.retryHooks(reply)
	a.hooksFinished(hookRun{version: 2, ran: []string{"restart-app"}})
	if out := <-reply; out.Reloaded || !strings.Contains(out.NotReloaded, "running or waiting their turn") {
		t.Fatalf("a retry while a hook runs: %+v; want the file not read again, and why", out)
	}
	if got := hookNames(a.o.Hooks); len(got) != 2 {
		t.Fatalf("the file was read again while a hook ran: the agent runs %q", got)
	}

	// Without a hooks file (run without --hooks): nothing to read, said so.
	a.o.HooksFile = ""
	if out := retried(t, a); !out.Nothing || out.Reloaded || out.NotReloaded != notReloadedNoFile {
		t.Fatalf("a retry without a hooks file: %+v", out)
	}
}

// TestARetryTellsOfAFailureClearedUnrun (a docs walkthrough): a failed hook removed
// from the hooks file, and `meshhost hooks retry`: the file read again no longer
// runs it, its failure is cleared though nothing ran, and the agent logged so, but
// the answer was empty (`{}` with --json). It names the hooks whose failure was
// cleared.
func TestARetryTellsOfAFailureClearedUnrun(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(t.TempDir(), "hooks.json")
	a := f.withHooks(t, hooksFile(t, p, [3]string{"restart-app", "etc/*", "echo port in use >&2; exit 1"}))
	a.o.HooksFile = p
	if err := a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("reported %+v, want hook_failed", st.Error)
	}
	hooksFile(t, p, [3]string{"reload-db", "db/*", "true"})
	out := retried(t, a)
	if len(out.Ran) != 0 || !slices.Equal(out.Cleared, []string{"restart-app"}) || !out.Reloaded {
		t.Fatalf("a retry once the failed hook left the file: %+v; want restart-app's failure cleared, nothing run", out)
	}
	if js, _ := json.Marshal(out); !strings.Contains(string(js), `"cleared":["restart-app"]`) {
		t.Fatalf("the answer as JSON: %s", js)
	}
	if st := reported(t, a); st.Error != nil {
		t.Fatalf("reported %+v once the failure was cleared", st.Error)
	}

	// A hook that runs and succeeds is not said to be cleared unrun.
	hooksFile(t, p, [3]string{"restart-app", "etc/*", "exit 1"})
	if out := retried(t, a); !out.Nothing || !out.Reloaded {
		t.Fatalf("a retry with nothing owed: %+v", out)
	}
	if err := a.handle(context.Background(), f.decl(t, 2, "y")); err != nil {
		t.Fatal(err)
	}
	if st := reported(t, a); st.Error == nil || st.Error.Code != wire.StatusHookFailed {
		t.Fatalf("reported %+v, want hook_failed", st.Error)
	}
	hooksFile(t, p, [3]string{"restart-app", "etc/*", "true"})
	if out := retried(t, a); !slices.Equal(out.Ran, []string{"restart-app"}) || len(out.Cleared) != 0 {
		t.Fatalf("a retry that ran the failed hook again: %+v; want it run, none cleared unrun", out)
	}
}

// TestARetrySaysWhatItFoundOfTheHooksFile (a walkthrough of declarations.md): the
// hooks file read again for a retry was checked (a pattern that matches one level
// only, a command that cannot be run now), and what was found went to the agent's
// log only, while hooks retry said the file was read: the answer carries it.
func TestARetrySaysWhatItFoundOfTheHooksFile(t *testing.T) {
	f := newFixture(t)
	p := filepath.Join(t.TempDir(), "hooks.json")
	a := f.withHooks(t, hooksFile(t, p, [3]string{"restart-app", "etc/*", "true"}))
	a.o.HooksFile = p
	hooksFile(t, p, [3]string{"restart-app", "etc/**", "true"})
	out := retried(t, a)
	if !out.Reloaded || len(out.Warnings) != 1 || !strings.Contains(out.Warnings[0], `"etc/**" matches one level only`) {
		t.Fatalf("a retry reading a file whose pattern matches one level only: %+v", out)
	}
	hooksFile(t, p, [3]string{"restart-app", "etc/*", "true"})
	if out := retried(t, a); !out.Reloaded || len(out.Warnings) != 0 {
		t.Fatalf("a retry reading a file with nothing to say of it: %+v", out)
	}
}
