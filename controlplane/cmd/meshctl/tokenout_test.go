package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
	"mesh/tokenfmt"
)

// TestTokenOutWritesOnlyAMintedToken (audit of commands run twice, finding 1): a
// script's `meshctl token --node X > token.txt`, run again, had the shell empty
// token.txt before meshctl ran, and with it the one copy of the pending token, which
// the refusal that followed told the operator to use. --out FILE decides before
// anything is minted: a file that holds data is refused (exit 2, nothing touched)
// unless --replace; the token goes to a new file, mode 0600, that takes the name
// only once the token is in it (commit(true)) and is dropped otherwise; a name made
// by another meanwhile is not written over.
func TestTokenOutWritesOnlyAMintedToken(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "token.txt")
	first, second := tokenText(t, "web-1", 1)+"\n", tokenText(t, "web-1", 2)+"\n"
	write := func(out tokenOutput, text string, ok bool) error {
		t.Helper()
		if _, err := io.WriteString(out.w, text); err != nil {
			t.Fatal(err)
		}
		return out.commit(ok)
	}
	leftovers := func() {
		t.Helper()
		if m, _ := filepath.Glob(filepath.Join(dir, ".*meshctl-*")); len(m) > 0 {
			t.Fatalf("temporary files left: %v", m)
		}
	}
	// A mint that failed: nothing at the name.
	out, err := fileOutput(name, false, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, "mesh1_failed\n", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a mint that failed left %s: %v", name, err)
	}
	leftovers()
	// A mint that succeeded: the token, 0600, whatever the umask.
	out, err = fileOutput(name, false, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, first, true); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(name)
	if data, _ := os.ReadFile(name); err != nil || string(data) != first || fi.Mode().Perm() != 0o600 {
		t.Fatalf("written: %q, %v, %v", data, fi.Mode(), err)
	}
	leftovers()
	// Run again: refused before anything is minted, exit 2, the file as it was.
	_, err = fileOutput(name, false, "web-1")
	var held *outputHoldsDataError
	if !errors.As(err, &held) || !strings.Contains(err.Error(), "holds data already") || !strings.Contains(err.Error(), "--replace") {
		t.Fatalf("a file holding a token: %v, want it refused naming --replace", err)
	}
	if code := exitCode(io.Discard, "meshctl token", err); code != exitUsage {
		t.Fatalf("a file holding a token: exit %d, want %d", code, exitUsage)
	}
	if data, _ := os.ReadFile(name); string(data) != first {
		t.Fatalf("the refusal changed the file: %q", data)
	}
	leftovers()
	// --replace: written over, once minted.
	out, err = fileOutput(name, true, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(name); string(data) != first {
		t.Fatalf("the file changed before the mint: %q", data)
	}
	if err := write(out, second, true); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(name); string(data) != second {
		t.Fatalf("--replace: %q", data)
	}
	// --replace over anything but a token of the node (a notes file, mesh.json,
	// another node's token, perhaps its one copy): refused, exit 2, nothing
	// minted and the file as it was; it wrote over any file (a docs walkthrough).
	notes := filepath.Join(dir, "notes.txt")
	other := filepath.Join(dir, "web-12.txt")
	for _, c := range []struct{ file, data, says string }{
		{notes, "important notes\nline2\n", "not a join token"},
		{other, tokenText(t, "web-12", 1) + "\n", "the token of web-12, another node"},
		{notes, first + "and a note after it\n", "not a join token"},
	} {
		if err := os.WriteFile(c.file, []byte(c.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := fileOutput(c.file, true, "web-1")
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "no token was minted") {
			t.Errorf("--replace over %q: %v, want it refused saying %q", c.data, err, c.says)
		}
		if code := exitCode(io.Discard, "meshctl token", err); code != exitUsage {
			t.Errorf("--replace over %q: exit %d, want %d", c.data, code, exitUsage)
		}
		if data, _ := os.ReadFile(c.file); string(data) != c.data {
			t.Errorf("the refusal changed the file: %q", data)
		}
	}
	// A file changed between the check and the mint's end (a mint waits up to
	// minutes for a leader): left as it is, the token not written over it.
	out, err = fileOutput(name, true, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	theirs := tokenText(t, "web-12", 1) + "\n"
	time.Sleep(10 * time.Millisecond) // another modification time
	if err := os.WriteFile(name, []byte(theirs), 0o600); err != nil {
		t.Fatal(err)
	}
	var changed *outputChangedError
	if err := write(out, first, true); !errors.As(err, &changed) || !strings.Contains(err.Error(), "left as it is") {
		t.Errorf("--replace over a file changed meanwhile: %v, want it left", err)
	}
	if data, _ := os.ReadFile(name); string(data) != theirs {
		t.Errorf("a file changed meanwhile was written over: %q", data)
	}
	if err := os.WriteFile(name, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	leftovers()
	// An expired token of the node is its file still.
	expired := filepath.Join(dir, "expired.txt")
	if err := os.WriteFile(expired, []byte(tokenText(t, "web-1", -1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := fileOutput(expired, true, "web-1"); err != nil {
		t.Errorf("--replace over the node's expired token: %v", err)
	} else if err := write(out, second, true); err != nil {
		t.Fatal(err)
	}
	// An empty file (touched first, or emptied by a `>`): written.
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = fileOutput(empty, false, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := write(out, "mesh1_third\n", true); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(empty); fi.Mode().Perm() != 0o600 {
		t.Fatalf("an empty file of mode 0644 became %v, want the new 0600 file", fi.Mode())
	}
	// A name made by another while the token was minted: left as it is.
	raced := filepath.Join(dir, "raced.txt")
	out, err = fileOutput(raced, false, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(raced, []byte("theirs"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(out, "mesh1_fourth\n", true); err == nil {
		t.Fatal("a name made meanwhile was written over")
	}
	if data, _ := os.ReadFile(raced); string(data) != "theirs" {
		t.Fatalf("a name made meanwhile: %q", data)
	}
	leftovers()
	// Not a regular file: refused.
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(name, link); err != nil {
		t.Fatal(err)
	}
	// Said in words, exit 2 as the other --out refusals (a walkthrough: exit 1,
	// "(L---------)").
	for bad, kind := range map[string]string{link: "is a symbolic link", dir: "is a directory"} {
		_, err := fileOutput(bad, true, "web-1")
		if !errors.Is(err, errOutputExposed) || !strings.Contains(err.Error(), "--out "+bad+" "+kind) {
			t.Fatalf("--out %s: %v, want it refused saying it %s", bad, err, kind)
		}
		if code := exitCode(io.Discard, "meshctl token", err); code != exitUsage {
			t.Fatalf("--out %s: exit %d, want %d", bad, code, exitUsage)
		}
	}
}

// tokenText is a worker token of node whose expiry is hours from now (negative:
// past).
func tokenText(t *testing.T, node string, hours int) string {
	t.Helper()
	tok := tokenfmt.Token{Mesh: "m", Node: node, Role: tokenfmt.RoleWorker, Expiry: time.Now().Add(time.Duration(hours) * time.Hour).Truncate(time.Second),
		Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300")}, SigningKey: make(ed25519.PublicKey, ed25519.PublicKeySize)}
	tok.Secret[0], tok.CAPin[0], tok.SigningKey[0] = 0x5a, 0x5b, 0x5c
	if err := tok.Validate(); err != nil {
		t.Fatal(err)
	}
	return tok.Encode()
}

// TestAMintRefusedSaysWhatTheRerunNeeds (audit of commands run twice, findings 1 and
// 9): refused token_pending while stdout is an empty file, which `> token.txt` run
// again leaves, the refusal said "use that token" with no word that the shell had
// just emptied the file holding it; it now says so, and to mint again with --replace
// or write with --out. A mint without an answer (exit 3) said to look, not that the
// rerun is refused token_pending and --replace is the way, as the exit 9 said.
func TestAMintRefusedSaysWhatTheRerunNeeds(t *testing.T) {
	pending := &api.Error{Code: api.CodeTokenPending, Message: "a token for this node is pending: web-2 has token aff2f6185939 ...: use that token, cancel it ..."}
	err := mintFailed(pending, "web-2", true)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeTokenPending || !strings.Contains(err.Error(), "the shell emptied it before meshctl ran") ||
		!strings.Contains(err.Error(), "--replace") || !strings.Contains(err.Error(), "--out FILE") {
		t.Fatalf("token_pending with stdout an empty file: %v", err)
	}
	if code := exitCode(io.Discard, "meshctl token", err); code != exitRefused {
		t.Fatalf("exit %d, want %d", code, exitRefused)
	}
	if got := mintFailed(pending, "web-2", false); got != error(pending) {
		t.Fatalf("token_pending with stdout elsewhere became %v", got)
	}
	for _, lost := range []error{
		fmt.Errorf("%w token.create within 3s; look (`meshctl token list`) before running it again", operator.ErrNoAnswer),
		fmt.Errorf("%w while token.create waited for its answer", operator.ErrConnectionLost),
	} {
		err := mintFailed(lost, "web-2", false)
		if !strings.Contains(err.Error(), "--replace") || !strings.Contains(err.Error(), "meshctl token list --node web-2") {
			t.Fatalf("%v: %v, want --replace named", lost, err)
		}
		if code := exitCode(io.Discard, "meshctl token", err); code != exitUnreachable {
			t.Fatalf("%v: exit %d, want %d", lost, code, exitUnreachable)
		}
	}
}

// TestATokenLeftInATempFileIsSwept (audit of secrets, finding 7): meshctl token
// killed between the mint and the rename left a live token in
// .NAME.meshctl-<hex>, under a name nobody was told, for good. The next run that
// writes beside it removes such files of this user once they are older than any
// run lasts; a younger one (a run still writing) and other files are left.
func TestATokenLeftInATempFileIsSwept(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "token.txt")
	stale := filepath.Join(dir, ".token.txt.meshctl-0123456789abcdef")
	young := filepath.Join(dir, ".token.txt.meshctl-fedcba9876543210")
	other := filepath.Join(dir, ".other.txt.meshctl-0123456789abcdef")
	for _, f := range []string{stale, young, other} {
		if err := os.WriteFile(f, []byte("mesh1_..."), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-staleTemp - time.Minute)
	for _, f := range []string{stale, other} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	out, err := fileOutput(name, false, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := out.commit(false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the stale temp file is still there: %v", err)
	}
	for _, f := range []string{young, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}
