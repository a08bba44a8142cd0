package integration

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/integration/harness"
)

// upgradeFixture holds the files the release point 7132ef2 left behind, written by its
// own meshctl and meshhost (testdata/upgrade-0.1.0-7132ef2/generate.sh): a control
// node's data directory after serve stopped (cp-1: mesh.json, the keys, the Raft
// store and a snapshot, the lock file), the state directory of a host whose hook
// failed (web-1: identity.json, applied.json, applied.state recording hook_failed
// with nothing owed, the managed root), that of a host the mesh revoked (web-2, with
// revoked.json), and web-1's hooks file. Its ports are fixed in those files:
// 127.0.0.1:27201-27204.
const upgradeFixture = "testdata/upgrade-0.1.0-7132ef2"

// TestUpgradeFromReleaseFiles: docs/operations.md "Upgrading" says to replace the
// binaries and serve the same data directory, run the same state directory. This
// version's binaries, started on what the older version wrote, take it up: serve
// serves the old data directory with its roster, the agent runs on the old state
// directory, runs at start the hook the older agent recorded as failed (its failure
// stays, failing, until it succeeds), meshhost hooks retry reaches it over the
// socket, a declaration is applied, and the revoked host stays revoked. Every file
// there is held to the strict readers of decision 0024 and to the checks of regular
// files, which are newer than the files.
func TestUpgradeFromReleaseFiles(t *testing.T) {
	dir := t.TempDir()
	copyFixture(t, upgradeFixture, dir)
	cpDir := filepath.Join(dir, "cp-1")
	ctl := func(args ...string) harness.Result {
		t.Helper()
		return harness.Run(t, "", nil, bin.Meshctl, append(args, "--data", cpDir)...)
	}
	serve := harness.Start(t, nil, bin.Meshctl, "serve", "--data", cpDir, "--raft-heartbeat", "300ms",
		"--reconcile", "1s", "--offline-after", "3s", "--metrics-listen", "127.0.0.1:27204")
	serve.WaitOutput(t, "control node ready", 30*time.Second)
	harness.Eventually(t, 20*time.Second, "serve answers operators", func() bool { return ctl("nodes").Code == 0 })

	nodes := func() map[string]api.NodeView {
		t.Helper()
		r := ctl("nodes", "--json")
		var res api.NodesResult
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &res) != nil {
			t.Fatalf("nodes --json: exit %d:\n%s", r.Code, r.Combined())
		}
		m := map[string]api.NodeView{}
		for _, n := range res.Nodes {
			m[n.ID] = n
		}
		return m
	}
	if n := nodes(); len(n) != 2 || n["web-1"].State != api.StateOffline || n["web-2"].State != api.StateRevoked {
		t.Fatalf("the roster of the older version is not served as it was: %+v", n)
	}
	if r := ctl("control", "status"); r.Code != 0 || !strings.Contains(r.Stdout, "leader cp-1") {
		t.Fatalf("control status: exit %d:\n%s", r.Code, r.Combined())
	}

	web1 := filepath.Join(dir, "web-1")
	// As the upgrade notes say ("Hooks run in /"): the older hooks file names a file
	// relative to the managed root, its working directory then; it names it through
	// MESH_ROOT before the binary is replaced.
	writeFile(t, filepath.Join(dir, "hooks.json"), `{"hooks":[{"name":"reload-app","paths":["etc/app/*.conf"],
           "run":["/bin/sh","-c","test -e \"$MESH_ROOT/../reload-ok\""],"timeout":"10s"}]}`)
	agent := harness.Start(t, nil, bin.Meshhost, "run", "--state", web1, "--root", filepath.Join(web1, "managed"),
		"--hooks", filepath.Join(dir, "hooks.json"), "--heartbeat", "1s")
	// The older agent kept no paths owed for its failed hook: this one runs it
	// for the managed paths the hook matches, and it fails again.
	agent.WaitOutput(t, "running the hooks the agent owed", 20*time.Second)
	agent.WaitOutput(t, "connected to the mesh", 20*time.Second)
	harness.Eventually(t, 30*time.Second, "status names web-1 failing", func() bool {
		r := ctl("status")
		return r.Code == 5 && strings.Contains(r.Combined(), "1 failing hook_failed in hook reload-app (fix the host, then `meshhost hooks retry` there): web-1")
	})
	if st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", web1); st.Code != 0 || !strings.Contains(st.Stdout, "FAILED: reload-app") {
		t.Fatalf("meshhost status on the older state directory: exit %d, want 0 listing the failed hook:\n%s", st.Code, st.Combined())
	}
	// Fixed on the host, and retried over the agent's socket.
	if err := os.WriteFile(filepath.Join(web1, "reload-ok"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", web1, "--timeout", "60s"); r.Code != 0 || !strings.Contains(r.Stdout, "ran reload-app") {
		t.Fatalf("hooks retry: exit %d:\n%s", r.Code, r.Combined())
	}
	harness.Eventually(t, 30*time.Second, "status exits 0 once the hook ran", func() bool { return ctl("status").Code == 0 })

	body := filepath.Join(dir, "body.json")
	writeFile(t, body, `{"files":[{"path":"etc/app/app.conf","content":"listen 9090\n","mode":"0640"}]}`)
	if r := ctl("declare", "--node", "web-1", "--file", body, "--wait", "60s"); r.Code != 0 {
		t.Fatalf("declare --wait after the upgrade: exit %d:\n%s", r.Code, r.Combined())
	}
	if got, err := os.ReadFile(filepath.Join(web1, "managed", "etc", "app", "app.conf")); err != nil || string(got) != "listen 9090\n" {
		t.Fatalf("etc/app/app.conf = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(web1, "managed", "etc", "motd")); !os.IsNotExist(err) {
		t.Fatalf("etc/motd, no longer declared, is still there: %v", err)
	}

	// The host the older version revoked stays revoked: its revoked.json is read.
	web2 := filepath.Join(dir, "web-2")
	if st := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", web2); st.Code != 6 || !strings.Contains(st.Stdout, "REVOKED") {
		t.Fatalf("meshhost status of the revoked host: exit %d, want 6:\n%s", st.Code, st.Combined())
	}
	run2 := harness.Start(t, nil, bin.Meshhost, "run", "--state", web2, "--root", filepath.Join(web2, "managed"))
	if code := run2.Wait(20 * time.Second); code != 6 {
		t.Fatalf("meshhost run of the revoked host: exit %d, want 6:\n%s", code, run2.Output())
	}
}

// copyFixture copies the fixture src into dst with the modes the programs left: git
// keeps no modes but the executable bit, and the readers refuse a private file or a
// directory that others may read or write.
func copyFixture(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if rel == "generate.sh" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if strings.Contains(filepath.ToSlash(rel), "/managed/") {
			mode = 0o644
		}
		return os.WriteFile(to, data, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}
