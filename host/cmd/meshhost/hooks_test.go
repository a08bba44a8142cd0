package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/host/state"
)

// TestHooksOwedAndFailedShown: meshhost status lists the hooks that failed and the
// paths whose hooks are owed, in text and JSON; hooks retry without an agent says
// the agent's start runs them, and with nothing owed that there is nothing to run.
// Before, status showed neither, and the only trace of a failed hook was the last
// error, gone at the next declaration.
func TestHooksOwedAndFailedShown(t *testing.T) {
	dir, _ := enrolled(t)
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir); code != 0 || !strings.Contains(out, "nothing to run") {
		t.Fatalf("retry with nothing owed: exit %d\n%s%s", code, out, errs)
	}
	// No agent runs: no file was read again, and --json says so too.
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir, "--json"); code != 0 || !strings.Contains(out, `"not_reloaded": "meshhost run is not running: it reads the hooks file as it starts"`) {
		t.Fatalf("retry --json with nothing owed and no agent: exit %d\n%s%s", code, out, errs)
	}
	saveFailedHook(t, dir, "hook restart-app: exit status 1: port 8080 in use")
	code, out, errs := runCLI("", nil, "status", "--state", dir)
	if code != 0 || !strings.Contains(out, "FAILED: restart-app") || !strings.Contains(out, "meshhost hooks retry --state "+dir) ||
		!strings.Contains(out, "owed      hooks for 1 changed path(s): etc/app.conf") || !strings.Contains(out, "port 8080 in use") {
		t.Fatalf("status: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = runCLI("", nil, "status", "--state", dir, "--json")
	var st struct {
		Owed   []string `json:"hooks_owed"`
		Failed []string `json:"hooks_failed"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || len(st.Owed) != 1 || len(st.Failed) != 1 {
		t.Fatalf("status --json: exit %d, %+v, %v\n%s", code, st, err, out)
	}
	code, out, errs = runCLI("", nil, "hooks", "retry", "--state", dir)
	// What it waits for is said before the wait (it was silent for as long as
	// the hooks ran).
	if code != 1 || !strings.Contains(errs, "meshhost run is not running") || !strings.Contains(errs, "when it starts") ||
		!strings.Contains(errs, "asking the agent to run the hooks owed for etc/app.conf and that failed (restart-app) (waiting up to 5m0s") {
		t.Fatalf("retry without an agent: exit %d\n%s%s", code, out, errs)
	}
	if code, _, errs := runCLI("", nil, "hooks", "retry", "--state", dir, "--timeout", "0s"); code != 2 {
		t.Fatalf("--timeout 0s: exit %d\n%s", code, errs)
	}
	// A directory that holds no enrolled node (a mistyped --state) is said to be
	// one, as status says it (exit 5); it read "nothing to run", exit 0.
	empty := t.TempDir()
	if err := os.Chmod(empty, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", empty); code != 5 || strings.Contains(out, "nothing to run") || !strings.Contains(errs, "not enrolled") {
		t.Fatalf("retry on a directory with no enrolled node: exit %d\n%s%s", code, out, errs)
	}
}

// TestAHooksOutputCannotDriveTheTerminal: a failed hook's output is shown by meshhost
// status as text, its escape sequences as escapes (here one that sets the terminal's
// title, one that clears the screen and a carriage return that writes over the line),
// and kept as it is in --json, where JSON escapes it. Before, status wrote them to
// the operator's terminal as they were.
func TestAHooksOutputCannotDriveTheTerminal(t *testing.T) {
	dir, _ := enrolled(t)
	now := time.Now().UTC().Truncate(time.Second)
	output := "hook restart-app: exit status 1: \x1b]0;all good\x07\x1b[2Jport 8080 in use\rall good"
	if err := state.Save(dir, state.Applied{HaveApplied: true, Version: 3, BodyDigest: strings.Repeat("ab", 32),
		IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour), Managed: []string{"etc/app.conf"},
		LastErrorCode: "hook_failed", LastError: output, LastErrorVersion: 3,
		HooksPending: []string{"etc/app.conf"}, HooksFailed: []string{"restart-app"}}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI("", nil, "status", "--state", dir)
	if code != 0 || strings.ContainsAny(out, "\x1b\x07\r") ||
		!strings.Contains(out, `exit status 1: \x1b]0;all good\a\x1b[2Jport 8080 in use\rall good`) {
		t.Fatalf("status: exit %d\n%q\n%s", code, out, errs)
	}
	code, out, _ = runCLI("", nil, "status", "--state", dir, "--json")
	var st struct {
		LastError string `json:"last_error"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != 0 || st.LastError != "hook_failed: "+output {
		t.Fatalf("status --json: exit %d, last error %q, %v", code, st.LastError, err)
	}
}

// TestHooksRetrySaysTheFileWasReadAgain (a docs walkthrough): with no hook owed or
// failed, `meshhost hooks retry` answered "nothing to run" without asking the agent,
// which kept the hooks file it had read at start: an operator who had edited the
// file believed it live. It asks the agent, which reads the file again, and says so
// (text and --json), or says why it did not; a file that cannot be used is exit 1.
// A failure cleared because the file no longer runs the hook is said too (--json
// printed {}).
func TestHooksRetrySaysTheFileWasReadAgain(t *testing.T) {
	_, id := enrolled(t)
	dir, answer := fakeAgent(t, id, `{"nothing":true,"reloaded":true}`)
	code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir)
	if code != 0 || !strings.Contains(out, "nothing to run") || !strings.Contains(out, "the hooks file was read again") {
		t.Fatalf("retry with nothing owed: exit %d\n%s%s", code, out, errs)
	}
	type answered struct {
		Nothing  bool     `json:"nothing"`
		Reloaded bool     `json:"reloaded"`
		Cleared  []string `json:"cleared"`
	}
	code, out, errs = runCLI("", nil, "hooks", "retry", "--state", dir, "--json")
	var got answered
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || !got.Nothing || !got.Reloaded {
		t.Fatalf("retry --json with nothing owed: exit %d, %+v, %v\n%s%s", code, got, err, out, errs)
	}
	// What the agent found of the file read again, said, not only logged (a
	// walkthrough of declarations.md).
	answer(`{"nothing":true,"reloaded":true,"warnings":["hook pattern: hook \"h\": path pattern \"etc/**\" matches one level only"]}`)
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir); code != 0 || !strings.Contains(out, "the hooks file was read again") ||
		!strings.Contains(out, `warning: hook pattern: hook "h": path pattern "etc/**" matches one level only`) {
		t.Fatalf("retry, the file read again with a finding: exit %d\n%s%s", code, out, errs)
	}
	answer(`{"nothing":true,"not_reloaded":"the agent runs without a hooks file (meshhost run was started without --hooks)"}`)
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir); code != 0 || !strings.Contains(out, "the hooks file was not read again: the agent runs without a hooks file") {
		t.Fatalf("retry, the agent without a hooks file: exit %d\n%s%s", code, out, errs)
	}
	answer(`{"config_error":"hooks: unexpected end of JSON input"}`)
	if code, out, errs := runCLI("", nil, "hooks", "retry", "--state", dir); code != 1 || !strings.Contains(errs, "the hooks file, read again, cannot be used: hooks: unexpected end of JSON input") {
		t.Fatalf("retry with nothing owed, the file cut short: exit %d\n%s%s", code, out, errs)
	}

	saveFailedHook(t, dir, "hook restart-app: exit status 1")
	answer(`{"reloaded":true,"cleared":["restart-app"]}`)
	code, out, errs = runCLI("", nil, "hooks", "retry", "--state", dir)
	if code != 0 || !strings.Contains(out, "no hook ran: the hooks file no longer runs restart-app for the paths that had failed; their failure is cleared") {
		t.Fatalf("retry, the failed hook gone from the file: exit %d\n%s%s", code, out, errs)
	}
	got = answered{}
	code, out, errs = runCLI("", nil, "hooks", "retry", "--state", dir, "--json")
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || len(got.Cleared) != 1 || got.Cleared[0] != "restart-app" {
		t.Fatalf("retry --json, the failed hook gone from the file: exit %d, %+v, %v\n%s%s", code, got, err, out, errs)
	}
}

// saveFailedHook records in dir's state that hook restart-app failed (why) for
// etc/app.conf of version 3, as the agent records it.
func saveFailedHook(t *testing.T, dir, why string) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	if err := state.Save(dir, state.Applied{HaveApplied: true, Version: 3, BodyDigest: strings.Repeat("ab", 32),
		IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour), Managed: []string{"etc/app.conf"},
		LastErrorCode: "hook_failed", LastError: why, LastErrorVersion: 3,
		HooksPending: []string{"etc/app.conf"}, HooksFailed: []string{"restart-app"}}); err != nil {
		t.Fatal(err)
	}
}
