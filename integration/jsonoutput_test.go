package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
)

// documentedJSON reads operations.md's table of what --json prints: for each
// command, the keys its object may have (nil: the row is open-ended, "…").
func documentedJSON(t *testing.T) map[string]map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleDir(t), "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "\n## JSON output\n")
	if i < 0 {
		t.Fatal("operations.md has no section JSON output")
	}
	text = text[i+1:]
	if j := strings.Index(text[3:], "\n## "); j >= 0 {
		text = text[:j+3]
	}
	code := regexp.MustCompile("`([^`]+)`")
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.Contains(cells[1], "`") {
			continue
		}
		var keys map[string]bool
		if !strings.Contains(cells[2], "…") {
			keys = map[string]bool{}
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				keys[m[1]] = true
			}
		}
		// "`meshctl signing-key rotate`, `retire`": the second names a command
		// of the first's program and parent.
		var base string
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			name := m[1]
			if f := strings.Fields(name); len(f) == 1 && base != "" {
				name = base + " " + name
			} else {
				base = strings.Join(f[:len(f)-1], " ")
			}
			out[name] = keys
		}
	}
	if len(out) == 0 {
		t.Fatal("operations.md's JSON output section has no table")
	}
	return out
}

// oneObject decodes stdout as exactly one JSON object and returns its keys.
func oneObject(stdout string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(stdout))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("stdout is not a JSON object: %v", err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("stdout holds more than one JSON value")
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	return keys, nil
}

// TestJSONOutput: each command that prints data, run with --json against a real
// mesh, writes one JSON object on stdout and nothing else, with the keys
// operations.md lists for it; the progress of the long ones goes to stderr
// (declare --wait said nothing at all with --json before); and an error under
// --json is text on stderr with stdout empty. Not run here: join and control
// remove, which need a second control node (TestJoin* and TestRemove* drive them).
func TestJSONOutput(t *testing.T) {
	t.Parallel()
	doc := documentedJSON(t)
	cp := harness.NewControlPlane(t, bin, "json")
	cp.Serve()
	host := harness.NewHost(t, bin, "web-1")
	body := filepath.Join(t.TempDir(), "web.json")
	writeFile(t, body, `{"files":[{"path":"app.conf","content":"json"}]}`)

	check := func(name string, r harness.Result, wantCode int, stderrHas string) {
		t.Helper()
		if r.Code != wantCode {
			t.Errorf("%s --json: exit %d, want %d\n%s", name, r.Code, wantCode, r.Combined())
			return
		}
		keys, err := oneObject(r.Stdout)
		if err != nil {
			t.Errorf("%s --json: %v:\n%s", name, err, r.Stdout)
			return
		}
		allowed, ok := doc[name]
		if !ok {
			t.Errorf("operations.md's JSON output table has no row for %s", name)
		}
		for _, k := range keys {
			if allowed != nil && !allowed[k] {
				t.Errorf("%s --json prints key %q, which operations.md does not list", name, k)
			}
		}
		if stderrHas != "" && !strings.Contains(r.Stderr, stderrHas) {
			t.Errorf("%s --json: stderr lacks %q (its progress):\n%s", name, stderrHas, r.Stderr)
		}
	}

	ports := harness.FreePorts(t, 3)
	other := filepath.Join(t.TempDir(), "cp")
	check("meshctl bootstrap", harness.Run(t, "", nil, bin.Meshctl, "bootstrap", "--json", "--mesh", "other", "--data", other,
		"--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--raft-listen", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2])),
		0, "plan:")
	check("meshctl check", harness.Run(t, "", nil, bin.Meshctl, "check", "--json", "--data", other), 0, "")
	tok := cp.Ctl("token", "--node", "web-1", "--json")
	check("meshctl token", tok, 0, "")
	var minted struct{ Token string }
	if err := json.Unmarshal([]byte(tok.Stdout), &minted); err != nil || minted.Token == "" {
		t.Fatalf("token --json: %v\n%s", err, tok.Stdout)
	}
	check("meshhost enrol", host.Enrol(minted.Token, "--json"), 0, "1. token")
	// Run again (a provisioning script's rerun): the same object, saying it found
	// the enrolment done; it could not be told from the first run's.
	again := host.Enrol(minted.Token, "--json")
	check("meshhost enrol", again, 0, "")
	var rerun struct {
		Finished bool `json:"finished"`
	}
	if err := json.Unmarshal([]byte(again.Stdout), &rerun); err != nil || !rerun.Finished {
		t.Errorf("meshhost enrol --json run again: finished %v, %v:\n%s", rerun.Finished, err, again.Stdout)
	}
	host.Run()
	check("meshctl declare", cp.Ctl("declare", "--node", "web-1", "--file", body, "--json", "--wait", "60s"), 0, "waiting for 1 node(s)")
	check("meshctl declare", cp.Ctl("declare", "--node", "web-1", "--file", body, "--json"), 0, "")
	check("meshctl declare", cp.Ctl("declare", "--node", "web-1", "--file", body, "--json", "--dry-run"), 0, "")
	check("meshctl nodes", cp.Ctl("nodes", "--json"), 0, "")
	// The second declaration may not be applied yet: status then exits 5, and
	// still prints its object.
	st := cp.Ctl("status", "--json")
	check("meshctl status", st, st.Code, "")
	if st.Code != 0 && st.Code != 5 {
		t.Errorf("status --json: exit %d", st.Code)
	}
	check("meshctl label", cp.Ctl("label", "web-1", "tier=web", "--json"), 0, "")
	check("meshctl token list", cp.Ctl("token", "list", "--json"), 0, "")
	cp.Ctl("token", "--node", "web-2")
	check("meshctl token cancel", cp.Ctl("token", "cancel", "web-2", "--json"), 0, "")
	check("meshctl control status", cp.Ctl("control", "status", "--json"), 0, "")
	check("meshctl control renew-certificate", cp.Ctl("control", "renew-certificate", "--certificate", filepath.Join(cp.Dir, "tls.pem"),
		"--out", filepath.Join(t.TempDir(), "renewed.pem"), "--json"), 0, "")
	check("meshctl signing-key rotate", cp.Ctl("signing-key", "rotate", "--json"), 0, "")
	// Right after the rotation a live node may not have acknowledged it yet: exit 5
	// then, with the same JSON; 0 once every live node has.
	keyStatus := cp.Ctl("signing-key", "status", "--json")
	if keyStatus.Code == 5 {
		harness.Eventually(t, 20*time.Second, "every live node acknowledged the new keyring", func() bool {
			keyStatus = cp.Ctl("signing-key", "status", "--json")
			return keyStatus.Code == 0
		})
	}
	check("meshctl signing-key status", keyStatus, 0, "")
	check("meshctl signing-key retire", cp.Ctl("signing-key", "retire", "--force", "--json"), 0, "")
	check("meshctl version", harness.Run(t, "", nil, bin.Meshctl, "version", "--json"), 0, "")
	check("meshhost version", harness.Run(t, "", nil, bin.Meshhost, "version", "--json"), 0, "")
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The agent writes its state as it applies: read it once it has.
		r := harness.Run(t, "", nil, bin.Meshhost, "status", "--state", host.State, "--json")
		if r.Code == 0 || time.Now().After(deadline) {
			check("meshhost status", r, 0, "")
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	check("meshhost hooks retry", harness.Run(t, "", nil, bin.Meshhost, "hooks", "retry", "--state", host.State, "--json"), 0, "")
	// A selection of none fails, and still prints its (empty) object.
	check("meshctl status", cp.Ctl("status", "--json", "--label", "tier=nosuch"), 1, "")
	check("meshctl revoke", cp.Ctl("revoke", "web-1", "--json"), 0, "")

	// An error under --json is text on stderr, and stdout stays empty.
	for _, r := range []harness.Result{
		harness.Run(t, "", nil, bin.Meshctl, "nodes", "--json", "--data", t.TempDir()),
		cp.Ctl("declare", "--node", "nobody", "--file", body, "--json"),
		harness.Run(t, "", nil, bin.Meshhost, "status", "--json", "--state", t.TempDir()),
	} {
		if r.Code == 0 || r.Stdout != "" || r.Stderr == "" || bytes.HasPrefix(bytes.TrimSpace([]byte(r.Stderr)), []byte("{")) {
			t.Errorf("an error under --json: exit %d, stdout %q, stderr %q; want text on stderr and nothing on stdout", r.Code, r.Stdout, r.Stderr)
		}
	}
}
