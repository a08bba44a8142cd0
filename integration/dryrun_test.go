package integration

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// TestDeclareDryRun, with the built binaries and real hosts: a dry run of a body
// that drops a file shows it removed on the node holding it and everything added on
// the node that holds nothing yet, declares nothing (the declared versions stay,
// the host keeps its files), and refuses what declare refuses with its exit code;
// the real declaration then applies it, and a dry run of the same body again shows
// no change.
func TestDeclareDryRun(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "dryrun")
	cp.Serve()
	var hosts []*harness.Host
	for _, id := range []string{"web-1", "web-2"} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		h.Run()
		hosts = append(hosts, h)
	}
	dir := t.TempDir()
	bodyA := filepath.Join(dir, "a.json")
	writeFile(t, bodyA, `{"files":[{"path":"etc/app.conf","content":"secret-a\n"},{"path":"etc/old.conf","content":"old\n"}]}`)
	bodyB := filepath.Join(dir, "b.json")
	writeFile(t, bodyB, `{"files":[{"path":"etc/app.conf","content":"secret-bb\n","mode":"0640"},{"path":"etc/new.conf","content":"new\n"}]}`)
	if r := cp.Ctl("declare", "--node", "web-1", "--file", bodyA, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("declare A to web-1: %s", r.Combined())
	}
	declared := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, n := range cp.Nodes().Nodes {
			out[n.ID] = n.Declared
		}
		return out
	}
	before := declared()

	r := cp.Ctl("declare", "--all", "--file", bodyB, "--dry-run")
	if r.Code != 0 {
		t.Fatalf("dry run: exit %d\n%s", r.Code, r.Combined())
	}
	for _, want := range []string{
		"1 node(s) (web-1 v2): 1 to add, 1 to change, 1 to remove, 0 unchanged",
		"  + etc/new.conf  (0644, 4 bytes)",
		"  ~ etc/app.conf  (content, 9 -> 10 bytes; mode 0644 -> 0640)",
		"  - etc/old.conf  (0644, 4 bytes)",
		"1 node(s) (web-2 v1): 2 to add, 0 to change, 0 to remove, 0 unchanged",
		"dry run: 2 node(s) selected, 2 would change, 0 unchanged; nothing was declared",
	} {
		if !strings.Contains(r.Stdout, want+"\n") {
			t.Errorf("the dry run does not say %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Combined(), "secret-") {
		t.Errorf("the dry run prints file content:\n%s", r.Combined())
	}

	j := cp.Ctl("declare", "--all", "--file", bodyB, "--dry-run", "--json")
	var res api.DeclareResult
	if j.Code != 0 || json.Unmarshal([]byte(j.Stdout), &res) != nil || res.Plan == nil || len(res.Assignments) != 0 {
		t.Fatalf("dry run --json: exit %d\n%s", j.Code, j.Combined())
	}
	if p := res.Plan; p.Nodes != 2 || p.Changing != 2 || len(p.Groups) != 2 || p.Groups[0].Nodes[0].Node != "web-1" ||
		p.Groups[0].Removed[0].Path != "etc/old.conf" || p.Groups[1].AddedCount != 2 {
		t.Errorf("dry run --json plan = %+v", p)
	}

	// A selection of no node: the dry run's exit code is declare's.
	none := cp.Ctl("declare", "--label", "tier=none", "--file", bodyB, "--dry-run")
	real := cp.Ctl("declare", "--label", "tier=none", "--file", bodyB)
	if none.Code != 4 || real.Code != none.Code {
		t.Errorf("no node selected: dry run exit %d, declare exit %d, want 4 for both\n%s\n%s", none.Code, real.Code, none.Combined(), real.Combined())
	}

	// Nothing was declared: the versions stand and web-1 keeps the file the body
	// drops (its agent would have removed it within this time: it applied A above).
	time.Sleep(time.Second)
	if after := declared(); after["web-1"] != before["web-1"] || after["web-2"] != before["web-2"] {
		t.Errorf("declared versions went from %v to %v over the dry runs", before, after)
	}
	if got, err := hosts[0].ReadManaged("etc/old.conf"); err != nil || got != "old\n" {
		t.Errorf("web-1's etc/old.conf after the dry run: %q, %v", got, err)
	}
	if _, err := hosts[1].ReadManaged("etc/new.conf"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("web-2 has etc/new.conf after a dry run: %v", err)
	}

	if r := cp.Ctl("declare", "--all", "--file", bodyB, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("declare B: %s", r.Combined())
	}
	if _, err := hosts[0].ReadManaged("etc/old.conf"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("web-1 keeps etc/old.conf after the real declaration: %v", err)
	}
	r = cp.Ctl("declare", "--all", "--file", bodyB, "--dry-run")
	if r.Code != 0 || !strings.Contains(r.Stdout, "2 node(s) (web-1 v3, web-2 v2): no change (2 file(s) as they are; the new version is sent all the same)\n") ||
		!strings.Contains(r.Stdout, "dry run: 2 node(s) selected, 0 would change, 2 unchanged; nothing was declared\n") {
		t.Errorf("a dry run of the body declared: exit %d\n%s", r.Code, r.Combined())
	}
}
