package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

func testPlan() *api.DeclarePlan {
	return &api.DeclarePlan{
		Body: "ab12", Nodes: 15, Changing: 3, Unchanged: 12, Skipped: []string{"gone"},
		Groups: []api.PlanGroup{
			{Count: 12, Nodes: func() []api.Assignment {
				var n []api.Assignment
				for _, id := range []string{"db-01", "db-02", "db-03", "db-04", "db-05", "db-06", "db-07", "db-08", "db-09", "db-10", "db-11", "db-12"} {
					n = append(n, api.Assignment{Node: id, Version: 4})
				}
				return n
			}(), Unchanged: 2},
			{Count: 3, Nodes: []api.Assignment{{Node: "web-1", Version: 5}, {Node: "web-2", Version: 5}, {Node: "web-3", Version: 9}},
				Added:      []api.PlanFile{{Path: "etc/new.conf", Mode: "0644", Size: 12}},
				Changed:    []api.PlanChange{{Path: "etc/app.conf", What: []string{api.PlanContent, api.PlanMode}, From: api.PlanFile{Mode: "0600", Size: 40}, To: api.PlanFile{Mode: "0640", Size: 52}}},
				Removed:    []api.PlanFile{{Path: "etc/old.conf", Mode: "0600", Size: 10, Owner: "app", Group: "app"}},
				AddedCount: 1, ChangedCount: 1, RemovedCount: 1, Unchanged: 1},
		},
	}
}

// TestWritePlan: the text plan names each group's nodes with their versions (ten,
// then a count), the paths added, changed and removed with their modes and sizes,
// and a summary line that says nothing was declared.
func TestWritePlan(t *testing.T) {
	var out bytes.Buffer
	writePlan(&out, testPlan())
	want := []string{
		"12 node(s) (db-01 v4, db-02 v4, db-03 v4, db-04 v4, db-05 v4, db-06 v4, db-07 v4, db-08 v4, db-09 v4, db-10 v4 and 2 more): no change (2 file(s) as they are; the new version is sent all the same)",
		"3 node(s) (web-1 v5, web-2 v5, web-3 v9): 1 to add, 1 to change, 1 to remove, 1 unchanged",
		"  + etc/new.conf  (0644, 12 bytes)",
		"  ~ etc/app.conf  (content, 40 -> 52 bytes; mode 0600 -> 0640)",
		"  - etc/old.conf  (0600, 10 bytes, app:app)",
		"skipped  gone (revoked or not a worker)",
		"dry run: 15 node(s) selected, 3 would change, 12 unchanged, 1 skipped; nothing was declared",
	}
	if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("plan:\n%s\nwant:\n%s", out.String(), strings.Join(want, "\n"))
	}

	// A cut answer says so, and how much it left out.
	p := testPlan()
	p.Groups[1].Truncated, p.Groups[1].AddedCount = true, 40
	p.OtherGroups, p.OtherNodes = 2, 7
	out.Reset()
	writePlan(&out, p)
	for _, s := range []string{"cut to fit the answer: 40 added, 1 changed, 1 removed in all", "2 more group(s) of 7 node(s)"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("a cut plan does not say %q:\n%s", s, out.String())
		}
	}
}

// TestDeclareDryRunJSONKeys: declare --dry-run --json prints the declare object,
// with no assignment and the plan under "plan", in the documented snake_case keys.
func TestDeclareDryRunJSONKeys(t *testing.T) {
	var out bytes.Buffer
	if err := writeJSON(&out, api.DeclareResult{Assignments: []api.Assignment{}, Plan: testPlan()}); err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if string(doc["assignments"]) != "[]" {
		t.Errorf("assignments = %s, want []", doc["assignments"])
	}
	var plan map[string]json.RawMessage
	if err := json.Unmarshal(doc["plan"], &plan); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"body", "nodes", "changing", "unchanged", "groups", "skipped"} {
		if _, ok := plan[k]; !ok {
			t.Errorf("plan has no %q: %s", k, doc["plan"])
		}
	}
	var groups []map[string]json.RawMessage
	if err := json.Unmarshal(plan["groups"], &groups); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"count", "nodes", "added", "changed", "removed", "unchanged", "added_count", "changed_count", "removed_count"} {
		if _, ok := groups[1][k]; !ok {
			t.Errorf("group has no %q: %s", k, plan["groups"])
		}
	}
}

// TestDeclareDryRunUsage: --dry-run declares nothing, so --wait with it is a usage
// error, before anything is read or sent.
func TestDeclareDryRunUsage(t *testing.T) {
	dir := t.TempDir()
	body := filepath.Join(dir, "body.json")
	writeTestFile(t, body, `{"files":[]}`)
	code, _, stderr := runCLI("declare", "--data", dir, "--file", body, "--all", "--dry-run", "--wait", "30s")
	if code != exitUsage || !strings.Contains(stderr, "--dry-run declares nothing") {
		t.Errorf("--dry-run --wait: exit %d: %s", code, stderr)
	}
	// Alone, the command line is accepted: the failure is the empty data directory.
	if code, _, stderr := runCLI("declare", "--data", dir, "--file", body, "--all", "--dry-run"); code != exitDataDir {
		t.Errorf("--dry-run: exit %d, want %d (the data directory's error):\n%s", code, exitDataDir, stderr)
	}
}

// TestOlderControlPlaneDryRun: the refusal of a control plane that does not know
// dry runs says so, and keeps its code (exit 4, refused).
func TestOlderControlPlaneDryRun(t *testing.T) {
	older := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "dry_run"`}
	err := olderDryRun(older)
	if !strings.Contains(err.Error(), "older than this meshctl") || exitCode(&bytes.Buffer{}, "meshctl", err) != exitRefused {
		t.Errorf("older control plane: %v", err)
	}
	// No answer in time: the client's text for a change that timed out says to look
	// before running it again; a dry run changed nothing, and keeps exit 3.
	late := olderDryRun(fmt.Errorf("%w declare within 15s; the control node that took it may have carried it out", operator.ErrNoAnswer))
	if strings.Contains(late.Error(), "carried it out") || !strings.Contains(late.Error(), "run it again") || exitCode(&bytes.Buffer{}, "meshctl", late) != exitUnreachable {
		t.Errorf("dry run not answered: %v", late)
	}
	other := &api.Error{Code: api.CodeBadRequest, Message: "the declaration body is invalid"}
	if err := olderDryRun(other); err != error(other) {
		t.Errorf("another refusal became %v", err)
	}
}

// TestDeclareDryRunRefusesBadBodies: a body declare refuses, the dry run refuses
// with the same message and exit code, before anything is sent.
func TestDeclareDryRunRefusesBadBodies(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"bad.json": `{"files":[`, "escape.json": `{"files":[{"path":"../etc/passwd","content":"x"}]}`, "empty.json": " \n"} {
		file := filepath.Join(dir, name)
		writeTestFile(t, file, content)
		code, _, stderr := runCLI("declare", "--data", dir, "--node", "web-1", "--file", file)
		dryCode, _, dryStderr := runCLI("declare", "--data", dir, "--node", "web-1", "--file", file, "--dry-run")
		if code == exitOK || dryCode != code || dryStderr != stderr {
			t.Errorf("%s: declare exit %d %q; dry run exit %d %q", name, code, stderr, dryCode, dryStderr)
		}
	}
}
