package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInputFilesThatAreNotFiles: what an operator names with --file or
// --token-file may be a pipe, read until its writer closes it (`--file
// <(generate)`); a device is refused without being read (/dev/zero used to be read
// to 1 MiB and called too large); a token file over the cap says a token is one
// line, not that a declaration cannot carry it.
func TestInputFilesThatAreNotFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "body.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write([]byte(`{"files":[]}`))
	}()
	done := make(chan struct{})
	var code int
	var stderr string
	go func() {
		defer close(done)
		code, _, stderr = runCLI("declare", "--data", dir, "--node", "web-1", "--file", fifo)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("declare --file FIFO did not return within 30 s")
	}
	// The body was read whole: what fails is the empty data directory.
	if code != exitDataDir || strings.Contains(stderr, "fifo") {
		t.Fatalf("declare --file FIFO: exit %d: %s", code, stderr)
	}

	if _, err := os.Stat("/dev/zero"); err == nil {
		code, _, stderr := runCLI("declare", "--data", dir, "--node", "web-1", "--file", "/dev/zero")
		if code == exitOK || !strings.Contains(stderr, "/dev/zero is a character device, not a regular file") {
			t.Fatalf("declare --file /dev/zero: exit %d: %s", code, stderr)
		}
	}

	big := filepath.Join(dir, "token.txt")
	writeTestFile(t, big, strings.Repeat("x", 20<<10))
	code, _, stderr = runCLI("join", "--data", filepath.Join(dir, "new"), "--token-file", big)
	if code == exitOK || !strings.Contains(stderr, "a token is one line") || strings.Contains(stderr, "declaration") {
		t.Fatalf("join --token-file with 20 KiB: exit %d: %s", code, stderr)
	}
}

// TestDataDirectoryFileUnusableExits7: a data directory whose mesh.json is corrupt,
// cut short, of another format, over the cap or not a file at all cannot be used,
// and running again will not mend it: exit 7, which the systemd unit does not
// restart (RestartPreventExitStatus), not exit 1, which it restarts for ever.
func TestDataDirectoryFileUnusableExits7(t *testing.T) {
	for name, put := range map[string]func(path string) error{
		"corrupt":        func(p string) error { return os.WriteFile(p, []byte("mesh = demo\n"), 0o644) },
		"cut short":      func(p string) error { return os.WriteFile(p, []byte(`{"format":1,"mesh":`), 0o644) },
		"another format": func(p string) error { return os.WriteFile(p, []byte(`{"format":9}`), 0o644) },
		"a member twice": func(p string) error { return os.WriteFile(p, []byte(`{"format":1,"format":1}`), 0o644) },
		"over the cap":   func(p string) error { return os.WriteFile(p, []byte(strings.Repeat(" ", 2<<20)), 0o644) },
		"a FIFO":         func(p string) error { return syscall.Mkfifo(p, 0o600) },
		"a directory":    func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := put(filepath.Join(dir, "mesh.json")); err != nil {
				t.Skipf("cannot make it here: %v", err)
			}
			for _, cmd := range [][]string{{"serve", "--data", dir}, {"nodes", "--data", dir}} {
				done := make(chan struct{})
				var code int
				var stderr string
				go func() {
					defer close(done)
					code, _, stderr = runCLI(cmd...)
				}()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					t.Fatalf("%s: no answer within 30 s", cmd[0])
				}
				if code != exitDataDir || !strings.Contains(stderr, "mesh.json") {
					t.Errorf("%s: exit %d, want %d: %s", cmd[0], code, exitDataDir, stderr)
				}
			}
		})
	}
}

// TestJoinInputThatCannotBeAToken: input over the cap, whether from --token-file
// or stdin, is a token that cannot be used (exit 4, as an empty one), said as such,
// and nothing is written.
func TestJoinInputThatCannotBeAToken(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("x", 20<<10)
	file := filepath.Join(dir, "token.txt")
	writeTestFile(t, file, big)
	for name, run1 := range map[string]func(data string) (int, string, string){
		"token file": func(data string) (int, string, string) {
			return runCLI("join", "--data", data, "--token-file", file)
		},
		"stdin": func(data string) (int, string, string) {
			var out, errb bytes.Buffer
			code := run([]string{"join", "--data", data}, &cliIO{stdin: strings.NewReader(big), stdout: &out, stderr: &errb, getenv: func(string) string { return "" }})
			return code, out.String(), errb.String()
		},
		"empty stdin": func(data string) (int, string, string) { return runCLI("join", "--data", data) },
	} {
		t.Run(name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "new")
			code, _, stderr := run1(data)
			if code != exitRefused || strings.Contains(stderr, "--help") {
				t.Fatalf("exit %d, want %d: %s", code, exitRefused, stderr)
			}
			if name != "empty stdin" && !strings.Contains(stderr, "a token is one line") {
				t.Fatalf("the message does not say what a token is: %s", stderr)
			}
			if _, err := os.Stat(data); !os.IsNotExist(err) {
				t.Fatalf("the data directory was made: %v", err)
			}
		})
	}
}

// TestBodyWithAByteOrderMark: a body saved with a UTF-8 byte order mark first is
// read as the JSON after it.
func TestBodyWithAByteOrderMark(t *testing.T) {
	file := filepath.Join(t.TempDir(), "body.json")
	writeTestFile(t, file, "\xef\xbb\xbf"+`{"files":[]}`+"\r\n")
	cio := &cliIO{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	data, err := readBody(file, cio)
	if err != nil || !strings.HasPrefix(string(data), `{"files":[]}`) {
		t.Fatalf("readBody = %q, %v", data, err)
	}
	writeTestFile(t, file, "\xef\xbb\xbf\n")
	if _, err := readBody(file, cio); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("a byte order mark alone: %v, want the file called empty", err)
	}
}

// TestABodyTypedOnATerminalIsAskedFor: declare --file - on a terminal waited without
// a word, looking stuck (a CLI audit); it says it reads the body there and how to
// end it. Read from a pipe or a file, nothing is said.
func TestABodyTypedOnATerminalIsAskedFor(t *testing.T) {
	for _, tty := range []bool{true, false} {
		var stderr bytes.Buffer
		cio := &cliIO{stdin: strings.NewReader(`{"files":[]}`), stdout: io.Discard, stderr: &stderr, getenv: func(string) string { return "" }, stdinIsTTY: tty}
		if data, err := readBody("-", cio); err != nil || string(data) != `{"files":[]}` {
			t.Fatalf("tty %v: %q, %v", tty, data, err)
		}
		if asked := strings.Contains(stderr.String(), "end it with Ctrl-D"); asked != tty {
			t.Errorf("stdin a terminal %v: stderr %q", tty, stderr.String())
		}
	}
}

// TestJoinWaitingOnAPipeSaysJoin (a walkthrough): join's token through a FIFO that
// stays silent past a second was announced as "meshctl declare: … is a pipe".
func TestJoinWaitingOnAPipeSaysJoin(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "token.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		time.Sleep(1500 * time.Millisecond) // past the notice
		f.Write([]byte("not a token\n"))
	}()
	code, _, stderr := runCLI("join", "--data", filepath.Join(dir, "new"), "--token-file", fifo)
	if code == exitOK || !strings.Contains(stderr, "meshctl join: "+fifo+" is a pipe; waiting") || strings.Contains(stderr, "declare") {
		t.Fatalf("join --token-file FIFO: exit %d: %s", code, stderr)
	}
}
