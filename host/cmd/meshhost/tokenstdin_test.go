package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/host/enrol"
	"mesh/host/statedir"
)

// TestTokenFileDashIsStdin: --token-file - reads the token from stdin, as meshctl
// declare's --file - does, ahead of MESH_TOKEN (the flag was given); a file on stdin
// that others may write is judged as any token file. Before, it failed with "open -:
// no such file or directory".
func TestTokenFileDashIsStdin(t *testing.T) {
	tok, _ := realToken(t)
	env := map[string]string{"MESH_TOKEN": "mesh1_from_the_environment"}
	for name, cio := range map[string]*cliIO{
		"stdin":                 &cliIO{stdin: strings.NewReader(tok + "\n"), stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }},
		"stdin over MESH_TOKEN": &cliIO{stdin: strings.NewReader(tok + "\n"), stderr: &bytes.Buffer{}, getenv: func(k string) string { return env[k] }},
	} {
		got, err := readToken("-", cio)
		if err != nil || strings.TrimSpace(got) != tok {
			t.Errorf("%s: got %q, %v; want the token on stdin", name, got, err)
		}
	}
	// A 20 KiB stdin is refused as over the cap, not read whole.
	if _, err := readToken("-", &cliIO{stdin: strings.NewReader(strings.Repeat("m", 20<<10)), stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}); !errors.Is(err, enrol.ErrToken) {
		t.Errorf("20 KiB on stdin: %v, want enrol.ErrToken", err)
	}
	// A file others may write, opened by the shell as stdin, is refused as
	// --token-file's would be.
	open := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(open, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o666)
	f, err := os.Open(open)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := readToken("-", &cliIO{stdin: f, stderr: &bytes.Buffer{}, getenv: func(string) string { return "" }}); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Errorf("a world-writable file on stdin: %v, want statedir.ErrUnsafePath", err)
	}
}

// TestTokenFileThatDoesNotExist: a --token-file that is not there is said so, exit 3
// as any token file that cannot be used, and nothing is made on disk. Before, it was
// "open X: no such file or directory".
func TestTokenFileThatDoesNotExist(t *testing.T) {
	dir := t.TempDir()
	for _, file := range []string{filepath.Join(dir, "nosuch"), filepath.Join(dir, "nosuch", "token.txt"), "./-", "--"} {
		state := filepath.Join(dir, "state")
		code, _, stderr := runCLI("", nil, "enrol", "--state", state, "--token-file="+file)
		if code != exitToken || !strings.Contains(stderr, "--token-file "+file+" does not exist") {
			t.Errorf("--token-file %s: exit %d, %q; want %d and it does not exist", file, code, stderr, exitToken)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("--token-file %s: the state directory was made (%v)", file, err)
		}
	}
}

// TestTwoTokensAreRefused: a token in MESH_TOKEN and a file on stdin (`MESH_TOKEN=…
// meshhost enrol < token.txt`) is a usage error naming both, where MESH_TOKEN won
// without a word (a CLI audit). A pipe is not read (it may be the script running
// enrol, `curl … | bash`: a byte read from it was the script's, a review), and
// MESH_TOKEN is taken saying so (`cat other-token |` enrolled the machine into
// MESH_TOKEN's mesh without a word); MESH_TOKEN with nothing on stdin (a terminal,
// /dev/null, an empty file) is taken as ever.
func TestTwoTokensAreRefused(t *testing.T) {
	tok, _ := realToken(t)
	env := map[string]string{"MESH_TOKEN": tok}
	getenv := func(k string) string { return env[k] }
	file := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(file, []byte("mesh1_another_token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ue usageError
	if _, err := readToken("", &cliIO{stdin: f, stderr: &bytes.Buffer{}, getenv: getenv}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "MESH_TOKEN and another on stdin") {
		t.Errorf("MESH_TOKEN and a file on stdin: %v, want a usage error naming both", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString("echo the script's next line\n")
	w.Close()
	var said bytes.Buffer
	if got, err := readToken("", &cliIO{stdin: r, stderr: &said, getenv: getenv}); err != nil || got != tok || !strings.Contains(said.String(), "stdin, a pipe, is not read") {
		t.Errorf("MESH_TOKEN and a pipe: %q, %v, said %q; want MESH_TOKEN, saying the pipe is not read", got, err, said.String())
	}
	if rest, _ := io.ReadAll(r); string(rest) != "echo the script's next line\n" {
		t.Errorf("the pipe lost what it held: %q left", rest)
	}
	r.Close()
	// A script run as `bash < install.sh` is the next commands' stdin: what is
	// left of it is no token, is not read on, and MESH_TOKEN is taken (it was
	// refused as a second token, a review).
	script := filepath.Join(t.TempDir(), "install.sh")
	if err := os.WriteFile(script, []byte("MESH_TOKEN=x meshhost enrol\nmeshhost run --state s --root r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sf, err := os.Open(script)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if _, err := sf.Seek(28, io.SeekStart); err != nil { // bash read the first line
		t.Fatal(err)
	}
	if got, err := readToken("", &cliIO{stdin: sf, stderr: &bytes.Buffer{}, getenv: getenv}); err != nil || got != tok {
		t.Errorf("MESH_TOKEN and a script on stdin: %q, %v; want MESH_TOKEN", got, err)
	}
	if at, _ := sf.Seek(0, io.SeekCurrent); at != 28 {
		t.Errorf("the script on stdin was read on, to %d", at)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	for _, path := range []string{os.DevNull, empty} {
		in, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := readToken("", &cliIO{stdin: in, stderr: &bytes.Buffer{}, getenv: getenv}); err != nil || got != tok {
			t.Errorf("MESH_TOKEN with %s on stdin: %q, %v; want MESH_TOKEN", path, got, err)
		}
		in.Close()
	}
}

// TestATokenFileOverMESH_TOKENIsSaid: --token-file comes before MESH_TOKEN, as
// documented, and a MESH_TOKEN set (and forgotten, perhaps) was passed over
// without a word (a walkthrough): it is said, and nothing is said without one.
func TestATokenFileOverMESH_TOKENIsSaid(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(file, []byte("mesh1_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"mesh1_from_env", ""} {
		var said bytes.Buffer
		getenv := func(k string) string {
			if k == "MESH_TOKEN" {
				return env
			}
			return ""
		}
		got, err := readToken(file, &cliIO{stdin: strings.NewReader(""), stderr: &said, getenv: getenv})
		if err != nil || strings.TrimSpace(got) != "mesh1_from_file" {
			t.Fatalf("MESH_TOKEN %q: %q, %v; want the file's token", env, got, err)
		}
		if says := strings.Contains(said.String(), "MESH_TOKEN is set and not read"); says != (env != "") {
			t.Errorf("MESH_TOKEN %q: said %q", env, said.String())
		}
	}
}
