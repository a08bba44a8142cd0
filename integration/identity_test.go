package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/host/identity"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestIdentityFileStates: an existing identity file in any state stops enrolment with
// its own message, and nothing overwrites it; the token is not consumed (the
// unreadable case's too, once the directory in the file's place is gone); meshhost
// run refuses each damaged one with the same words (it was checked for a truncated
// one alone).
func TestIdentityFileStates(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "idstates")
	cp.Serve()
	good := harness.NewHost(t, bin, "good")
	if r := good.Enrol(cp.Token("good")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	valid, err := os.ReadFile(identity.Path(good.State))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		prepare func(path string)
		want    string
	}{
		{"already enrolled", func(p string) { write(t, p, valid, 0o600) }, "already enrolled"},
		{"truncated", func(p string) { write(t, p, valid[:len(valid)/2], 0o600) }, "truncated"},
		{"corrupt", func(p string) { write(t, p, []byte(`{"format":1,"mesh":"x"}`), 0o600) }, "corrupt"},
		{"unreadable", func(p string) {
			if err := os.MkdirAll(p, 0o700); err != nil { // a directory where the file should be
				t.Fatal(err)
			}
		}, "cannot be read"},
	}
	messages := map[string]string{}
	for _, c := range cases {
		h := harness.NewHost(t, bin, "h-"+strings.ReplaceAll(c.name, " ", "-"))
		if err := os.MkdirAll(h.State, 0o700); err != nil {
			t.Fatal(err)
		}
		path := identity.Path(h.State)
		c.prepare(path)
		before := snapshot(t, path)
		tok := cp.Token(h.Name)
		r := h.Enrol(tok)
		if r.Code != hostExitIdentity {
			t.Errorf("%s: exit %d, want %d:\n%s", c.name, r.Code, hostExitIdentity, r.Combined())
		}
		if !strings.Contains(r.Stderr, c.want) {
			t.Errorf("%s: message lacks %q:\n%s", c.name, c.want, r.Stderr)
		}
		if after := snapshot(t, path); after != before {
			t.Errorf("%s: the identity file was changed by a refused enrolment", c.name)
		}
		if _, ok := cp.Node(h.Name); ok {
			t.Errorf("%s: the mesh recorded the node", c.name)
		}
		for other, msg := range messages {
			if msg == r.Stderr {
				t.Errorf("%s and %s read alike", c.name, other)
			}
		}
		messages[c.name] = r.Stderr
		// meshhost run refuses a damaged identity too, with the same words.
		if c.name != "already enrolled" {
			if r := harness.Run(t, "", nil, bin.Meshhost, "run", "--state", h.State, "--root", h.Root); r.Code != hostExitIdentity || !strings.Contains(r.Stderr, c.want) {
				t.Errorf("run with a %s identity: exit %d, want %d saying %q:\n%s", c.name, r.Code, hostExitIdentity, c.want, r.Combined())
			}
		}
		// The token was not consumed: with the file (or the directory in its
		// place) out of the way it enrols.
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		if r := h.Enrol(tok); r.Code != 0 {
			t.Errorf("%s: the token did not survive the refusal: %s", c.name, r.Combined())
		}
	}
}

// TestNoSecretInLogs: the token secret and the node seed never reach a log or an
// output other than the token itself and the identity file.
func TestNoSecretInLogs(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "quiet")
	serve := cp.Serve("--log-level", "debug")
	text := cp.Token("web-1")
	tok, err := tokenfmt.Parse(text, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	secret := tok.Encode()[len(tok.Encode())-9-64 : len(tok.Encode())-9]
	h := harness.NewHost(t, bin, "web-1")
	enrolOut := h.Enrol(text)
	if enrolOut.Code != 0 {
		t.Fatalf("enrol: %s", enrolOut.Combined())
	}
	bad := harness.NewHost(t, bin, "web-1b").Enrol(text) // refused: used
	agent := h.Run("--log-level", "debug")
	time.Sleep(2 * time.Second)
	// At debug the agent says what it sends and receives (it logged almost nothing
	// more than at info): the lines this test reads for secrets are there.
	for _, line := range []string{"sync asked", "synced: every envelope", "status sent"} {
		if !strings.Contains(agent.Output(), line) {
			t.Errorf("the agent's debug log has no %q line:\n%s", line, agent.Output())
		}
	}
	id, err := identity.Load(h.State)
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{
		"serve log": serve.Output(), "enrol output": enrolOut.Combined(), "refused enrol": bad.Combined(), "agent log": agent.Output(),
	} {
		if strings.Contains(strings.ToLower(out), secret) {
			t.Errorf("the token secret appears in the %s", name)
		}
		if strings.Contains(out, string(id.Seed)) {
			t.Errorf("the node seed appears in the %s", name)
		}
	}
	// Nor in the replicated state.
	err = filepath.Walk(filepath.Join(cp.Dir, "raft"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(strings.ToLower(string(data)), secret) {
			t.Errorf("the token secret is stored in %s", p)
		}
		if strings.Contains(string(data), string(id.Seed)) {
			t.Errorf("the node seed is stored in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}

func snapshot(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		return "absent"
	}
	if fi.IsDir() {
		return "dir"
	}
	data, _ := os.ReadFile(path)
	return fi.Mode().String() + string(data)
}
