package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestTokenWrittenToAFileOnlyItsOwnerReads: the README's `meshctl token ... >
// token.txt`, under the usual umask 022, makes the shell create token.txt 0644, so
// for as long as the token lives (up to an hour) every local user of the operator's
// machine could read it, and enrol a machine of their own as that node before the
// real one did. A token written to a regular file is written only once the file is
// 0600; appended to an existing file likewise; into a file another user owns,
// never; into a pipe, unchanged.
func TestTokenWrittenToAFileOnlyItsOwnerReads(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tokfile")
	cp.Serve()
	dir := t.TempDir()
	appended := filepath.Join(dir, "tokens.log")
	if err := os.WriteFile(appended, []byte("earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, redirect, path string
		extra                []string
	}{
		{"new file", ">", filepath.Join(dir, "token.txt"), nil},
		{"new file, JSON", ">", filepath.Join(dir, "token.json"), []string{"--json"}},
		{"appended", ">>", appended, nil},
	} {
		// --replace: each case mints web-1's token again.
		script := `umask 022 && "$0" token --data "$1" --node web-1 --replace ` + strings.Join(c.extra, " ") + ` ` + c.redirect + ` "$2"`
		r := harness.Run(t, "", nil, "/bin/sh", "-c", script, bin.Meshctl, cp.Dir, c.path)
		if r.Code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, r.Code, r.Combined())
		}
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s: the token is written to a file of mode %v: other users can read it", c.name, perm)
		}
		data, _ := os.ReadFile(c.path)
		if !strings.Contains(string(data), "mesh1_") {
			t.Errorf("%s: no token in the file:\n%s", c.name, data)
		}
	}
	// A file another user created first (in a shared directory, where the
	// redirection only truncates it) is theirs to read whatever its mode: refused,
	// before anything is minted.
	if os.Geteuid() != 0 {
		t.Log("not root: the file of another user is not tried (it needs chown)")
	} else {
		theirs := filepath.Join(dir, "theirs.txt")
		if err := os.WriteFile(theirs, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(theirs, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		script := `"$0" token --data "$1" --node web-3 > "$2"`
		r := harness.Run(t, "", nil, "/bin/sh", "-c", script, bin.Meshctl, cp.Dir, theirs)
		data, _ := os.ReadFile(theirs)
		if r.Code == 0 || len(data) != 0 || !strings.Contains(r.Stderr, "another user owns (uid 65534)") {
			t.Errorf("token into a file another user owns: exit %d, %d bytes written:\n%s", r.Code, len(data), r.Combined())
		}
		if r := cp.Ctl("token", "list"); strings.Contains(r.Stdout, "web-3") {
			t.Errorf("a token was minted for web-3 though none was written:\n%s", r.Stdout)
		}
	}
	// A pipe (what the other tests read the token through) is left as it is.
	text := cp.Token("web-2")
	if _, err := tokenfmt.Parse(strings.TrimSpace(text), time.Now()); err != nil {
		t.Fatalf("the token through a pipe: %v", err)
	}
}
