package integration

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/integration/harness"
	"mesh/tokenfmt"
)

// TestTokenWrittenToAFileOnlyItsOwnerReads: the README's `meshctl token ... >
// token.txt`, under the usual umask 022, makes the shell create token.txt 0644, so
// every local user of the operator's machine could open it, and read the token
// through that descriptor once written, however the file's mode changed after (a
// local audit did, with an inotify loop, and joined a control node of its own with
// the stolen control token). The token is written to a new file, 0600, renamed over
// the one the shell made: a descriptor opened on that one reads nothing. A file
// that holds data already (>>) and that others may read is refused, nothing
// minted; one only its owner reads is appended to; a pipe is left as it is.
func TestTokenWrittenToAFileOnlyItsOwnerReads(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "tokfile")
	cp.Serve()
	dir := t.TempDir()
	private := filepath.Join(dir, "tokens.log")
	if err := os.WriteFile(private, []byte("earlier\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, redirect, path string
		extra                []string
	}{
		{"new file", ">", filepath.Join(dir, "token.txt"), nil},
		{"new file, JSON", ">", filepath.Join(dir, "token.json"), []string{"--json"}},
		{"appended to a private file", ">>", private, nil},
	} {
		// The file as the shell makes it, and another user's process holding it
		// open before meshctl starts.
		var early *os.File
		if c.redirect == ">" {
			if err := os.WriteFile(c.path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(c.path)
			if err != nil {
				t.Fatal(err)
			}
			early = f
		}
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
		if early != nil {
			seen, _ := io.ReadAll(early)
			early.Close()
			if len(seen) != 0 {
				t.Errorf("%s: a descriptor opened before meshctl ran read %q", c.name, seen)
			}
		}
	}
	// Appended to a file others may read: refused, nothing minted.
	exposed := filepath.Join(dir, "exposed.log")
	if err := os.WriteFile(exposed, []byte("earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := harness.Run(t, "", nil, "/bin/sh", "-c", `"$0" token --data "$1" --node web-4 >> "$2"`, bin.Meshctl, cp.Dir, exposed)
	if data, _ := os.ReadFile(exposed); r.Code == 0 || string(data) != "earlier\n" || !strings.Contains(r.Stderr, "holds data already") {
		t.Errorf("a token appended to a file others may read: exit %d, file %q:\n%s", r.Code, data, r.Combined())
	}
	if r := cp.Ctl("token", "list"); strings.Contains(r.Stdout, "web-4") {
		t.Errorf("a token was minted for web-4 though none was written:\n%s", r.Stdout)
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
		// A named pipe another user made, whose reader is theirs: refused alike.
		fifo := filepath.Join(dir, "theirs.fifo")
		if err := syscall.Mkfifo(fifo, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(fifo, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		read := make(chan []byte, 1)
		go func() {
			f, err := os.Open(fifo)
			if err != nil {
				read <- nil
				return
			}
			defer f.Close()
			b, _ := io.ReadAll(f)
			read <- b
		}()
		r = harness.Run(t, "", nil, "/bin/sh", "-c", `"$0" token --data "$1" --node web-5 > "$2"`, bin.Meshctl, cp.Dir, fifo)
		if got := <-read; r.Code == 0 || len(got) != 0 || !strings.Contains(r.Stderr, "pipe or FIFO another user owns") || strings.Contains(r.Stderr, "through a pipe") {
			t.Errorf("token into a FIFO another user owns: exit %d, %d bytes read:\n%s", r.Code, len(got), r.Combined())
		}
	}
	// A pipe (what the other tests read the token through) is left as it is.
	text := cp.Token("web-2")
	if _, err := tokenfmt.Parse(strings.TrimSpace(text), time.Now()); err != nil {
		t.Fatalf("the token through a pipe: %v", err)
	}
}

// TestTokenOutSurvivesARerun (audit of commands run twice, finding 1): a script's
// `meshctl token --node web-1 > token.txt`, run again, had the shell empty token.txt
// before meshctl ran; meshctl was then refused token_pending, "use that token", whose
// one copy had just been destroyed. With --out the file is written only once a
// token is minted, and run again the command is refused before anything is minted
// (exit 2), the file and the pending token as they were; --replace mints anew and
// replaces it. With --json, stdout holds the object without the token, "out" naming
// the file. The `>` form run again now says the shell emptied the file; a control
// token's refusal no longer speaks of labels.
func TestTokenOutSurvivesARerun(t *testing.T) {
	t.Parallel()
	cp := harness.NewControlPlane(t, bin, "tokout")
	cp.Serve()
	dir := t.TempDir()
	file := filepath.Join(dir, "web-1.token")
	r := harness.Run(t, "", nil, "/bin/sh", "-c", `umask 022 && "$0" token --data "$1" --node web-1 --out "$2"`, bin.Meshctl, cp.Dir, file)
	if r.Code != 0 || r.Stdout != "" || !strings.Contains(r.Stderr, "is in "+file+" (mode 0600)") {
		t.Fatalf("token --out (exit %d): %s", r.Code, r.Combined())
	}
	first, _ := os.ReadFile(file)
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("--out's file: %v %v", fi, err)
	}
	if _, err := tokenfmt.Parse(strings.TrimSpace(string(first)), time.Now()); err != nil {
		t.Fatalf("--out's file holds no token: %v: %q", err, first)
	}
	r = cp.Ctl("token", "--node", "web-1", "--out", file)
	if again, _ := os.ReadFile(file); r.Code != 2 || string(again) != string(first) || !strings.Contains(r.Stderr, "holds data already") || !strings.Contains(r.Stderr, "--replace") {
		t.Fatalf("token --out run again (exit %d), file kept %t: %s", r.Code, string(again) == string(first), r.Combined())
	}
	if l := cp.Ctl("token", "list", "--node", "web-1"); strings.Count(l.Stdout, "pending") != 1 {
		t.Fatalf("web-1's tokens after the rerun:\n%s", l.Stdout)
	}
	r = cp.Ctl("token", "--node", "web-1", "--out", file, "--replace")
	if second, _ := os.ReadFile(file); r.Code != 0 || string(second) == string(first) || !strings.Contains(r.Stderr, "cancelled token") {
		t.Fatalf("token --out --replace (exit %d): %s", r.Code, r.Combined())
	}
	// --json: the object on stdout, the token in the file alone.
	jfile := filepath.Join(dir, "web-2.token")
	r = cp.Ctl("token", "--node", "web-2", "--out", jfile, "--json")
	var obj map[string]any
	if err := json.Unmarshal([]byte(r.Stdout), &obj); r.Code != 0 || err != nil || obj["out"] != jfile || obj["node"] != "web-2" || obj["token"] != nil ||
		strings.Contains(r.Stdout, "mesh1_") {
		t.Fatalf("token --out --json (exit %d): %v\n%s", r.Code, err, r.Combined())
	}
	keys, _ := oneObject(r.Stdout)
	doc := documentedJSON(t)["meshctl token"]
	for _, k := range keys {
		if !doc[k] {
			t.Errorf("token --out --json prints %q, which operations.md does not list", k)
		}
	}
	if data, _ := os.ReadFile(jfile); !strings.HasPrefix(string(data), "mesh1_") {
		t.Fatalf("--out with --json: the file holds %q, want the token alone", data)
	}
	// The `>` form run again: the refusal says the shell emptied the file.
	shell := filepath.Join(dir, "web-3.txt")
	for range 2 {
		r = harness.Run(t, "", nil, "/bin/sh", "-c", `"$0" token --data "$1" --node web-3 > "$2"`, bin.Meshctl, cp.Dir, shell)
	}
	if r.Code != 4 || !strings.Contains(r.Stderr, "token_pending") || !strings.Contains(r.Stderr, "the shell emptied it before meshctl ran") {
		t.Fatalf("token > file run again (exit %d): %s", r.Code, r.Combined())
	}
	// A control token's refusal speaks of no labels.
	cp.ControlToken("cp-2")
	r = cp.Ctl("token", "--role", "control", "--node", "cp-2", "--addr", "127.0.0.1:1")
	if r.Code != 4 || !strings.Contains(r.Stderr, "cp-2 has control token") || strings.Contains(r.Stderr, "labels") {
		t.Fatalf("a second control token for cp-2 (exit %d): %s", r.Code, r.Combined())
	}
}
