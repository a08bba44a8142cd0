package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTokenFileThatIsNotAFile: --token-file may name a pipe, read until its writer
// closes it; a directory or a device is refused as what it is, before anything is
// read or made on disk (/dev/zero used to be read to the cap and called an
// oversized token; a directory gave "read: is a directory").
func TestTokenFileThatIsNotAFile(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("m", 20<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		dir: dir + " is a directory, not a regular file",
		big: "over 16384 bytes; a token is one line",
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		cases["/dev/zero"] = "/dev/zero is a character device, not a regular file"
	}
	fifo := filepath.Join(dir, "token.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err == nil {
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			f.Write([]byte("mesh1_demo_127.0.0.1:7300_ab"))
		}()
		cases[fifo] = "truncated" // read whole, then parsed
	}
	for file, want := range cases {
		state := filepath.Join(t.TempDir(), "state")
		done := make(chan struct{})
		var code int
		var stderr string
		go func() {
			defer close(done)
			code, _, stderr = runCLI("", nil, "enrol", "--state", state, "--token-file", file)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("--token-file %s: no answer within 30 s", file)
		}
		if code != exitToken || !strings.Contains(stderr, want) {
			t.Errorf("--token-file %s: exit %d, stderr %q; want %d and %q", file, code, stderr, exitToken, want)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("--token-file %s: the state directory was made (%v)", file, err)
		}
	}
}

// TestATokenFileAnotherUserCouldWriteIsRefused: the token names the mesh this
// machine will trust (its CA pin and signing key), so enrol refuses a token file
// another user could have written: one group or others may write (a user made
// /tmp/token.txt 0666 before the operator wrote the token in it, then put their own
// mesh's token there), or one another user owns, unless that user ran meshhost
// through sudo. Refused before anything is parsed or made on disk, exit 5, naming
// why; a file others may read is taken with a warning. Before, a local audit had
// the host enrolled into the other user's mesh.
func TestATokenFileAnotherUserCouldWriteIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user (chown to 65534) needs root")
	}
	dir := t.TempDir()
	token := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("mesh1_demo_127.0.0.1:7300_ab"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	enrol := func(file string, env map[string]string) (int, string) {
		t.Helper()
		state := filepath.Join(t.TempDir(), "state")
		code, _, stderr := runCLI("", env, "enrol", "--state", state, "--token-file", file)
		return code, stderr
	}
	refused := map[string]string{
		token("open", 0o666, 0):       "has mode 0666: group or others may write it",
		token("theirs", 0o600, 65534): "belongs to uid 65534",
	}
	for file, why := range refused {
		code, stderr := enrol(file, nil)
		if code != exitIdentity || !strings.Contains(stderr, why) || !strings.Contains(stderr, "another mesh's token") {
			t.Errorf("%s: exit %d, %q; want %d and %q", file, code, stderr, exitIdentity, why)
		}
	}
	// Past the check, the token is parsed: this one is cut short (exit 3).
	if code, stderr := enrol(filepath.Join(dir, "theirs"), map[string]string{"SUDO_UID": "65534"}); code != exitToken || !strings.Contains(stderr, "truncated") {
		t.Errorf("a token file of the user who ran sudo: exit %d, %q; want it taken (then %d, truncated)", code, stderr, exitToken)
	}
	// `meshhost enrol < /tmp/token.txt`: the file on stdin is judged alike.
	f, err := os.Open(filepath.Join(dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"enrol", "--state", filepath.Join(t.TempDir(), "state")}, &cliIO{stdin: f, stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}); code != exitIdentity ||
		!strings.Contains(errb.String(), "the token file on stdin cannot be used") {
		t.Errorf("a token file others may write, on stdin: exit %d, %q", code, errb.String())
	}
	code, stderr := enrol(token("readable", 0o644, 0), nil)
	if code != exitToken || !strings.Contains(stderr, "may be read by group or others (mode 0644)") {
		t.Errorf("a token file others may read: exit %d, %q; want a warning, then taken", code, stderr)
	}
	if strings.Contains(stderr, "mesh1_demo") {
		t.Errorf("the warning shows the token: %q", stderr)
	}
}
