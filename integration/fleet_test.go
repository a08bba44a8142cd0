package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
)

// TestFleetTargeting: declarations by label, role, node list and --all; each node gets
// its own version; --wait reports converged, failed and offline nodes and exits 5
// naming the ones that did not converge; labels set at mint and changed later; hooks
// run only as the host's local configuration says.
func TestFleetTargeting(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "fleet")
	cp.Serve()
	labels := map[string][]string{
		"web-1": {"--label", "tier=web", "--label", "env=prod"},
		"web-2": {"--label", "tier=web", "--label", "env=dev"},
		"db-1":  {"--label", "tier=db"},
	}
	hosts := map[string]*harness.Host{}
	agents := map[string]*harness.Process{}
	marker := filepath.Join(t.TempDir(), "hook-ran")
	hooksFile := filepath.Join(t.TempDir(), "hooks.json")
	writeFile(t, hooksFile, `{"hooks":[{"name":"reload-db","paths":["etc/db.conf"],"run":["sh","-c","printf '%s' \"$MESH_CHANGED\" > `+marker+`"]}]}`)
	for _, id := range []string{"web-1", "web-2", "db-1"} {
		h := harness.NewHost(t, bin, id)
		if r := h.Enrol(cp.Token(id, labels[id]...)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", id, r.Combined())
		}
		if id == "db-1" {
			agents[id] = h.Run("--hooks", hooksFile)
		} else {
			agents[id] = h.Run()
		}
		hosts[id] = h
	}
	dir := t.TempDir()
	body := func(name, content string) string {
		p := filepath.Join(dir, name+".json")
		writeFile(t, p, content)
		return p
	}
	declare := func(want int, args ...string) harness.Result {
		t.Helper()
		r := cp.Ctl(append([]string{"declare"}, args...)...)
		if r.Code != want {
			t.Fatalf("declare %v: exit %d, want %d:\n%s", args, r.Code, want, r.Combined())
		}
		return r
	}
	version := func(id string) uint64 { n, _ := cp.Node(id); return n.Declared }

	r := declare(0, "--label", "tier=web", "--file", body("web", `{"files":[{"path":"etc/web.conf","content":"web"}]}`), "--wait=30s")
	if !strings.Contains(r.Stdout, "declared web-1 v1") || !strings.Contains(r.Stdout, "declared web-2 v1") || strings.Contains(r.Stdout, "db-1") {
		t.Fatalf("--label tier=web selected:\n%s", r.Stdout)
	}
	if !strings.Contains(r.Stderr, "2 converged, 0 failed, 0 offline, 0 pending") {
		t.Fatalf("--wait progress:\n%s", r.Stderr)
	}
	if version("db-1") != 0 {
		t.Fatal("db-1 was declared for a label it does not carry")
	}
	// The body declare names selects the nodes it reached, once its wait is over.
	m := regexp.MustCompile(`(?m)^body +([0-9a-f]{12}) \(meshctl status --body`).FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("declare does not name its body:\n%s", r.Stdout)
	}
	if st := cp.Ctl("status", "--body", m[1]); st.Code != 0 || !strings.Contains(st.Stdout, "web-1") || !strings.Contains(st.Stdout, "web-2") || strings.Contains(st.Stdout, "db-1") ||
		!strings.Contains(st.Stdout, "2 node(s): 2 converged") {
		t.Fatalf("status --body %s: exit %d\n%s", m[1], st.Code, st.Combined())
	}
	if n, _ := cp.Node("web-1"); !strings.HasPrefix(n.DeclaredBody, m[1]) || n.DeclaredAt.IsZero() {
		t.Fatalf("nodes --json: web-1 declared body %q at %v, want %s…", n.DeclaredBody, n.DeclaredAt, m[1])
	}
	declare(0, "--label", "tier=web", "--label", "env=prod", "--file", body("prod", `{"files":[{"path":"etc/web.conf","content":"prod"}]}`), "--wait=30s")
	if version("web-1") != 2 || version("web-2") != 1 {
		t.Fatalf("labels must all match: web-1 v%d, web-2 v%d", version("web-1"), version("web-2"))
	}
	// Labels change after enrolment.
	if r := cp.Ctl("label", "db-1", "tier=web"); r.Code != 0 {
		t.Fatalf("label: %s", r.Combined())
	}
	declare(0, "--label", "tier=web", "--file", body("web2", `{"files":[{"path":"etc/web.conf","content":"web again"}]}`), "--wait=30s")
	if version("db-1") != 1 {
		t.Fatalf("db-1 relabelled tier=web was not selected (v%d)", version("db-1"))
	}
	declare(0, "--role", "worker", "--file", body("role", `{"files":[{"path":"etc/role","content":"worker"}]}`), "--wait=30s")
	declare(0, "--node", "web-2", "--node", "db-1", "--file", body("list", `{"files":[{"path":"etc/db.conf","content":"db"}]}`), "--wait=30s")
	if version("web-1") != 4 || version("web-2") != 4 || version("db-1") != 3 {
		t.Fatalf("versions after the list: web-1 v%d, web-2 v%d, db-1 v%d", version("web-1"), version("web-2"), version("db-1"))
	}
	// The hook on db-1 ran for its own configured path; web-2 has no hooks.
	harness.Eventually(t, 10*time.Second, "db-1's hook ran", func() bool {
		b, _ := os.ReadFile(marker)
		return string(b) == "etc/db.conf"
	})
	// A declaration cannot carry a command.
	if r := cp.Ctl("declare", "--all", "--file", body("cmd", `{"files":[],"run":["rm","-rf","/"]}`)); r.Code == 0 || !strings.Contains(r.Stderr, "unknown field") {
		t.Fatalf("a body with a command was accepted (exit %d): %s", r.Code, r.Combined())
	}

	// A node that cannot apply: a directory sits where web-2's file is declared.
	if err := os.MkdirAll(filepath.Join(hosts["web-2"].Root, "etc", "blocked"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = declare(5, "--all", "--file", body("all", `{"files":[{"path":"etc/blocked","content":"x"}]}`), "--wait=30s")
	if !strings.Contains(r.Stderr, "1 failed apply_failed: web-2 (") || strings.Contains(r.Stderr, "web-1") {
		t.Fatalf("--wait with a failing node:\n%s", r.Combined())
	}
	if n, _ := cp.Node("web-2"); n.LastError == nil || !strings.Contains(n.LastError.Message, "etc/blocked") {
		t.Fatalf("the failure does not name the path: %+v", n.LastError)
	}
	// A node that does not answer.
	agents["db-1"].Kill()
	harness.Eventually(t, 15*time.Second, "db-1 offline", func() bool { n, _ := cp.Node("db-1"); return n.State == "offline" })
	r = declare(5, "--node", "db-1", "--file", body("off", `{"files":[]}`), "--wait=2s")
	if !strings.Contains(r.Stderr, "1 offline (the declaration stands: each applies it when its agent reconnects; meshctl status NODE shows when): db-1") {
		t.Fatalf("--wait with an offline node:\n%s", r.Combined())
	}
	// status exits 5 while a live node has not converged (web-2 fails); the
	// offline db-1 is counted, not waited for.
	st := cp.Ctl("status")
	if st.Code != 5 || !strings.Contains(st.Stdout, "3 node(s): 1 converged") || !strings.Contains(st.Stdout, "1 offline") ||
		!strings.Contains(st.Stderr, "1 failing apply_failed: web-2 (") || strings.Contains(st.Stderr, "db-1") {
		t.Fatalf("status: exit %d\n%s", st.Code, st.Combined())
	}

	// The roster narrowed: web-1 (tier=web, env=prod) converged, web-2 (tier=web,
	// env=dev) failing, db-1 (relabelled tier=web) offline.
	listed := func(args ...string) []string {
		t.Helper()
		r := cp.Ctl(append([]string{"nodes", "--json"}, args...)...)
		var res struct {
			Nodes []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		}
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			t.Fatalf("nodes --json %v: exit %d\n%s", args, r.Code, r.Combined())
		}
		var ids []string
		for _, n := range res.Nodes {
			ids = append(ids, n.ID)
		}
		return ids
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "offline"}, "db-1"},
		{[]string{"--label", "tier=web", "--label", "env=dev"}, "web-2"},
		{[]string{"--role", "worker", "--state", "alive"}, "web-1 web-2"},
		{[]string{"--label", "env=none"}, ""},
	} {
		if got := strings.Join(listed(c.args...), " "); got != c.want {
			t.Errorf("nodes %v lists %q, want %q", c.args, got, c.want)
		}
	}
	if r := cp.Ctl("nodes", "--label", "env=none"); r.Code != 0 || !strings.Contains(r.Stdout, "(none of the 3 node(s) matches --label env=none)") {
		t.Errorf("nodes selecting none: exit %d\n%s", r.Code, r.Combined())
	}
	// status about the selection only: prod converged, dev failing, none refused.
	if r := cp.Ctl("status", "--label", "env=prod"); r.Code != 0 || !strings.Contains(r.Stdout, "1 node(s): 1 converged") {
		t.Errorf("status --label env=prod: exit %d\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status", "--label", "env=dev"); r.Code != 5 || !strings.Contains(r.Stderr, "1 failing apply_failed: web-2 (") {
		t.Errorf("status --label env=dev: exit %d\n%s", r.Code, r.Combined())
	}
	// --summary: the same verdict and summary, no row for each node.
	if r := cp.Ctl("status", "--summary"); r.Code != 5 || !strings.HasPrefix(r.Stdout, "3 node(s): ") || strings.Contains(r.Stdout, "NODE") ||
		strings.Contains(r.Stdout, "web-1") || !strings.Contains(r.Stderr, "1 failing apply_failed: web-2 (") {
		t.Errorf("status --summary: exit %d, want 5 with the summary alone\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status", "--summary", "--json"); r.Code != 5 || !strings.Contains(r.Stdout, `"summary"`) || strings.Contains(r.Stdout, `"nodes":[`) || strings.Contains(r.Stdout, `"web-1"`) {
		t.Errorf("status --summary --json: exit %d, want the summary alone\n%s", r.Code, r.Combined())
	}
	// A control node named alone has no summary: its row, as without --summary.
	ctlID := cp.Nodes().Control[0].ID
	if r := cp.Ctl("status", "--summary", ctlID); r.Code != 0 || !strings.Contains(r.Stdout, "CONTROL") || !strings.Contains(r.Stdout, ctlID) {
		t.Errorf("status --summary %s: exit %d, want its row\n%s", ctlID, r.Code, r.Combined())
	}
	if r := cp.Ctl("nodes", "--summary"); r.Code != 2 {
		t.Errorf("nodes --summary: exit %d, want 2 (status's flag)\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status", "--label", "env=none"); r.Code != 1 || !strings.Contains(r.Stderr, "no node matches --label env=none") || !strings.Contains(r.Stderr, "with its role, state and labels") {
		t.Errorf("status selecting none: exit %d, want 1\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status", "--body", "deadbeef0000"); r.Code != 1 || !strings.Contains(r.Stderr, "no node matches --body deadbeef0000") || !strings.Contains(r.Stderr, `"declared_body"`) {
		t.Errorf("status of a body none holds: exit %d, want 1 naming where digests are\n%s", r.Code, r.Combined())
	}
	if r := cp.Ctl("status", "web-1", "--state", "alive"); r.Code != 2 {
		t.Errorf("status with names and a selection: exit %d, want 2\n%s", r.Code, r.Combined())
	}
	// A name that is no node (a typo) is refused, exit 4, the nodes found shown:
	// it was passed over, and status of web-1 and it exited 0, converged.
	if r := cp.Ctl("status", "web-1", "web-9"); r.Code != 4 || !strings.Contains(r.Stderr, "no such node: web-9") || !strings.Contains(r.Stdout, "web-1") {
		t.Errorf("status of web-1 and web-9: exit %d, want 4 naming web-9\n%s", r.Code, r.Combined())
	}
	// Every name no node: the error alone, no empty table or summary of nothing
	// before it.
	for _, cmd := range []string{"nodes", "status"} {
		if r := cp.Ctl(cmd, "nosuch"); r.Code != 4 || r.Stdout != "" || !strings.Contains(r.Stderr, "no such node: nosuch") {
			t.Errorf("%s nosuch: exit %d, want 4 and nothing on stdout\n%s", cmd, r.Code, r.Combined())
		}
	}
	if r := cp.Ctl("status", "--json", "nosuch"); r.Code != 4 || !strings.Contains(r.Stdout, `"nodes": []`) {
		t.Errorf("status --json nosuch: exit %d, want 4 and no nodes\n%s", r.Code, r.Combined())
	}
	// A control node named shows its row of the control table.
	ctl := cp.Nodes().Control[0].ID
	if r := cp.Ctl("nodes", ctl); r.Code != 0 || !strings.Contains(r.Stdout, "CONTROL") || !strings.Contains(r.Stdout, ctl) || strings.Contains(r.Stdout, "LAST ERROR") {
		t.Errorf("nodes %s: exit %d, want its control row and no host table\n%s", ctl, r.Code, r.Combined())
	}
	// The agents said in their reports that they take batch proofs, so the last
	// declaration --all was signed once for the three (decision 0034): web-1 applied
	// it from an envelope carrying its proof, and keeps that envelope (written as
	// the agent stops).
	agents["web-1"].Signal(syscall.SIGTERM)
	if code := agents["web-1"].Wait(20 * time.Second); code != 0 {
		t.Fatalf("web-1's agent stopped with exit %d", code)
	}
	if env, err := os.ReadFile(filepath.Join(hosts["web-1"].State, "applied.envelope")); err != nil || !strings.Contains(string(env), `"batch":{"salt":`) {
		t.Fatalf("web-1 applied a fan-out's declaration from an envelope without a batch proof (%v):\n%.400s", err, env)
	}
}

// TestOwnerAndGroup: declared owner and group are applied when the agent runs as root.
func TestOwnerAndGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent changes ownership only when it runs as root (documented); the applier's unit tests cover the rest")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody here: %v", err)
	}
	cp := harness.NewControlPlane(t, bin, "owner")
	cp.Serve()
	h := harness.NewHost(t, bin, "web-1")
	if r := h.Enrol(cp.Token("web-1")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	h.Run()
	f := filepath.Join(t.TempDir(), "b.json")
	writeFile(t, f, fmt.Sprintf(`{"files":[{"path":"srv/owned","content":"x","mode":"0640","owner":"nobody","group":"%s"}]}`, nobody.Gid))
	if r := cp.Ctl("declare", "--node", "web-1", "--file", f, "--wait=30s"); r.Code != 0 {
		t.Fatalf("declare: %s", r.Combined())
	}
	fi, err := os.Stat(filepath.Join(h.Root, "srv", "owned"))
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if strconv.Itoa(int(st.Uid)) != nobody.Uid || strconv.Itoa(int(st.Gid)) != nobody.Gid || fi.Mode().Perm() != 0o640 {
		t.Fatalf("owner %d:%d mode %v, want %s:%s 0640", st.Uid, st.Gid, fi.Mode().Perm(), nobody.Uid, nobody.Gid)
	}
}
