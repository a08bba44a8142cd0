package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/fstest"
)

func sample() Applied {
	return Applied{
		Format:           FormatVersion,
		HaveApplied:      true,
		Version:          7,
		BodyDigest:       strings.Repeat("ab", 32),
		IssuedAt:         time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC),
		ExpiresAt:        time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC),
		KeyringEpoch:     2,
		Keyring:          []byte(`{"payloadType":"application/vnd.mesh.keyring+json","payload":"e30=","signatures":[]}`),
		Managed:          []string{"etc/app.conf", "motd"},
		LastError:        "the declaration expired",
		LastErrorCode:    "expired",
		LastErrorVersion: 8,
	}
}

func fileOf(t testing.TB, a Applied) []byte {
	t.Helper()
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// outcome names which state err is, failing if it matches more than one.
func outcome(t testing.TB, err error) string {
	t.Helper()
	if err == nil {
		return "ok"
	}
	var got []string
	for name, s := range map[string]error{"unreadable": ErrUnreadable, "truncated": ErrTruncated, "corrupt": ErrCorrupt} {
		if errors.Is(err, s) {
			got = append(got, name)
		}
	}
	if len(got) != 1 {
		t.Fatalf("error %q matches %v, want exactly one state", err, got)
	}
	return got[0]
}

func TestLoadAbsent(t *testing.T) {
	for _, dir := range []string{t.TempDir(), filepath.Join(t.TempDir(), "missing")} {
		a, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, Applied{}) {
			t.Fatalf("absent file gave %+v, want the zero Applied", a)
		}
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	for _, a := range []Applied{
		sample(),
		{Format: FormatVersion}, // nothing applied yet
		{KeyringEpoch: 1, Keyring: []byte(`{"a":1}`)},                                // keyring accepted, nothing applied; Format filled in
		func() Applied { a := sample(); a.Version = 0; a.Managed = nil; return a }(), // version 0 is a real version
	} {
		if err := Save(state, a); err != nil {
			t.Fatal(err)
		}
		got, err := Load(state)
		if err != nil {
			t.Fatal(err)
		}
		if a.Format == 0 {
			a.Format = FormatVersion
		}
		if !reflect.DeepEqual(got, a) {
			t.Fatalf("loaded\n%+v\nwant\n%+v", got, a)
		}
		if fi, _ := os.Stat(Path(state)); fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
		}
	}
	if di, _ := os.Stat(state); di.Mode().Perm() != 0o700 {
		t.Fatalf("state directory mode %v, want 0700", di.Mode().Perm())
	}
	// The state file, and the marker that turns away an older agent; no temp file.
	if names, _ := os.ReadDir(state); len(names) != 2 || names[0].Name() != LegacyFileName || names[1].Name() != FileName {
		t.Fatalf("state directory holds %v", names)
	}
}

// TestLoadFileStates reads every kind of legacy applied.json (an agent before the
// two-slot file wrote it), there being no applied.state.
func TestLoadFileStates(t *testing.T) {
	good := fileOf(t, sample())
	edit := func(f func(*Applied)) []byte {
		a := sample()
		f(&a)
		return fileOf(t, a)
	}
	replace := func(old, new string) []byte {
		if !bytes.Contains(good, []byte(old)) {
			t.Fatalf("sample file lacks %q", old)
		}
		return bytes.Replace(good, []byte(old), []byte(new), 1)
	}
	tests := []struct {
		name, want, reason string
		data               []byte
	}{
		{"valid", "ok", "", good},
		{"empty", "truncated", "", nil},
		{"zero-filled", "truncated", "", make([]byte, 4096)},
		{"cut", "truncated", "", good[:len(good)/2]},
		{"cut then zero-filled", "truncated", "", append(append([]byte{}, good[:40]...), make([]byte, 100)...)},
		{"NUL after", "corrupt", "NUL", append(append([]byte{}, good...), 0)},
		{"trailing garbage", "corrupt", "after the JSON", append(append([]byte{}, good...), "]"...)},
		{"not JSON", "corrupt", "not valid JSON", []byte("version=7")},
		{"array", "corrupt", "not an object", []byte("[]")},
		{"newer format", "corrupt", "format version 2", replace(`"format": 1`, `"format": 2`)},
		{"no format", "corrupt", "no format version", replace(`"format": 1,`, ``)},
		{"unknown field", "corrupt", "unknown field", replace(`"format": 1,`, `"format": 1, "versoin": 9,`)},
		{"negative version", "corrupt", "field version", replace(`"version": 7`, `"version": -7`)},
		{"version too big", "corrupt", "field version", replace(`"version": 7`, `"version": 18446744073709551616`)},
		{"bad base64", "corrupt", "cannot be decoded", replace(`"keyring": "`, `"keyring": "!!`)},
		{"bad digest", "corrupt", "body_digest", edit(func(a *Applied) { a.BodyDigest = "abc" })},
		{"window inverted", "corrupt", "expires_at", edit(func(a *Applied) { a.ExpiresAt = a.IssuedAt.Add(-time.Second) })},
		{"keyring not JSON", "corrupt", "keyring", edit(func(a *Applied) { a.Keyring = []byte("{") })},
		{"managed escapes", "corrupt", "managed[1]", edit(func(a *Applied) { a.Managed = []string{"a", "../etc/passwd"} })},
		{"managed absolute", "corrupt", "managed[0]", edit(func(a *Applied) { a.Managed = []string{"/etc/passwd"} })},
		{"managed repeated", "corrupt", "managed[1]", edit(func(a *Applied) { a.Managed = []string{"a", "a"} })},
		{"applied flag lost", "corrupt", "have_applied", edit(func(a *Applied) { a.HaveApplied = false })},
		{"too big", "corrupt", "larger than", append(append([]byte{}, good...), bytes.Repeat([]byte(" "), MaxFileSize)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			if err := os.WriteFile(LegacyPath(state), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			checkLoad(t, state, LegacyPath(state), tc.want, tc.reason)
		})
	}
}

// checkLoad loads the state in dir and checks the outcome: want ("ok", "truncated",
// "corrupt"), a valid state with "ok", and otherwise the zero Applied with a message
// that names path and says why the agent stops, and for "corrupt" a reason that
// mentions reason. It returns what Load gave.
func checkLoad(t *testing.T, dir, path, want, reason string) Applied {
	t.Helper()
	got, err := Load(dir)
	if o := outcome(t, err); o != want {
		t.Fatalf("got %s (%v), want %s", o, err, want)
	}
	if err == nil {
		if verr := got.Validate(); verr != nil {
			t.Fatal(verr)
		}
		return got
	}
	if !reflect.DeepEqual(got, Applied{}) {
		t.Fatal("an error came with a non-zero Applied")
	}
	if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "will not run") {
		t.Fatalf("message does not say what is wrong and why the agent stops: %s", msg)
	}
	var ce *CorruptError
	if want == "corrupt" && (!errors.As(err, &ce) || !strings.Contains(ce.Reason, reason)) {
		t.Fatalf("reason of %v does not mention %q", err, reason)
	}
	return got
}

func TestLoadEveryTruncation(t *testing.T) {
	good := fileOf(t, sample())
	for n := 0; n < len(good)-1; n++ {
		_, err := loadLegacy("state", func(string, int64) ([]byte, error) { return good[:n], nil })
		if o := outcome(t, err); o != "truncated" {
			t.Fatalf("cut at %d of %d: %s (%v)", n, len(good), o, err)
		}
	}
}

func TestLoadUnreadable(t *testing.T) {
	t.Run("directory", func(t *testing.T) {
		state := t.TempDir()
		os.Mkdir(Path(state), 0o700)
		_, err := Load(state)
		if outcome(t, err) != "unreadable" || !errors.Is(err, syscall.EISDIR) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		state := t.TempDir()
		if err := syscall.Mkfifo(Path(state), 0o600); err != nil {
			t.Skipf("cannot make a FIFO here: %v", err)
		}
		if _, err := Load(state); outcome(t, err) != "unreadable" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("dangling symlink", func(t *testing.T) {
		// Not the same as absent: reading it as "nothing applied" would
		// forget the applied version.
		state := t.TempDir()
		os.Symlink("gone", Path(state))
		if _, err := Load(state); outcome(t, err) != "unreadable" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any file; the injected case covers this path")
		}
		state := t.TempDir()
		if err := Save(state, sample()); err != nil {
			t.Fatal(err)
		}
		os.Chmod(Path(state), 0)
		if _, err := Load(state); !errors.Is(err, fs.ErrPermission) || outcome(t, err) != "unreadable" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("injected", func(t *testing.T) {
		for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EIO} {
			_, _, err := load("/s", func(p string, _ int64) ([]byte, error) {
				return nil, &fs.PathError{Op: "read", Path: p, Err: errno}
			})
			if outcome(t, err) != "unreadable" || !errors.Is(err, errno) {
				t.Fatalf("got %v", err)
			}
		}
	})
}

func TestValidate(t *testing.T) {
	if err := sample().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Applied)
	}{
		{"format", func(a *Applied) { a.Format = 0 }},
		{"body_digest", func(a *Applied) { a.BodyDigest = "" }},
		{"body_digest", func(a *Applied) { a.BodyDigest = strings.Repeat("zz", 32) }},
		{"issued_at", func(a *Applied) { a.IssuedAt = time.Time{} }},
		{"issued_at", func(a *Applied) { a.ExpiresAt = time.Time{} }},
		{"expires_at", func(a *Applied) { a.ExpiresAt = a.IssuedAt.Add(-1) }},
		{"have_applied", func(a *Applied) { a.HaveApplied = false }},
		{"keyring", func(a *Applied) { a.Keyring = []byte("not json") }},
		{"managed[0]", func(a *Applied) { a.Managed = []string{""} }},
		{"managed[0]", func(a *Applied) { a.Managed = []string{"."} }},
		{"managed[0]", func(a *Applied) { a.Managed = []string{"a//b"} }},
		{"managed[0]", func(a *Applied) { a.Managed = []string{"a/"} }},
		{"managed[0]", func(a *Applied) { a.Managed = []string{"./a"} }},
		{"managed[1]", func(a *Applied) { a.Managed = []string{"a", "a/../b"} }},
	} {
		a := sample()
		tc.edit(&a)
		err := a.Validate()
		var ie *InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) || ie.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
		if serr := Save(t.TempDir(), a); !errors.Is(serr, ErrInvalid) && a.Format != 0 {
			t.Errorf("%s: Save accepted an invalid state: %v", tc.field, serr)
		}
	}
	// The files about to be written are on record before the first declaration is
	// applied (the agent saves them first).
	if err := (Applied{Format: FormatVersion, Managed: []string{"etc/app.conf"}}).Validate(); err != nil {
		t.Errorf("files on record before anything applied: %v", err)
	}
}

func TestSaveFullDiskKeepsPrevious(t *testing.T) {
	state := fstest.Small(t, fstest.Options{Mode: 0o700})
	prev := sample()
	if err := Save(state, prev); err != nil {
		t.Fatal(err)
	}
	filler, _ := os.Create(filepath.Join(state, "filler"))
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()

	next := sample()
	next.Version = 8
	next.Managed = nil
	for i := 0; i < 2000; i++ {
		next.Managed = append(next.Managed, "dir/file-"+strings.Repeat("x", 20)+"-"+string(rune('a'+i%26))+"/"+time.Duration(i).String())
	}
	err := Save(state, next)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("got %v, want ENOSPC and a full-disk message", err)
	}
	got, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != 7 {
		t.Fatalf("after a failed save the applied version is %d, want 7", got.Version)
	}
}
