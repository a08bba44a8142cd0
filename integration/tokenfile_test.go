package integration

import (
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
		if got := <-read; r.Code == 0 || len(got) != 0 || !strings.Contains(r.Stderr, "named pipe (FIFO) another user owns") {
			t.Errorf("token into a FIFO another user owns: exit %d, %d bytes read:\n%s", r.Code, len(got), r.Combined())
		}
	}
	// A pipe (what the other tests read the token through) is left as it is.
	text := cp.Token("web-2")
	if _, err := tokenfmt.Parse(strings.TrimSpace(text), time.Now()); err != nil {
		t.Fatalf("the token through a pipe: %v", err)
	}
}
