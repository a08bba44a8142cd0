package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// privateDir is a data directory laid out as bootstrap leaves it.
func privateDir(t *testing.T) Dir {
	t.Helper()
	d := Dir(filepath.Join(t.TempDir(), "cp"))
	if err := os.Mkdir(string(d), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{CAKeyFile, 0o600}, {TLSKeyFile, 0o600}, {SigningKeyFile, 0o600}, {CurveKeyFile, 0o600}, {AdminCredsFile, 0o600},
		{AccountKeyFile, 0o600}, {ConfigFile, 0o644}, {CACertFile, 0o644}, {TLSCertFile, 0o644}} {
		if err := os.WriteFile(d.Path(f.name), []byte("x"), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d.Path(f.name), f.mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(d.Path(RaftDir), 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCheckPrivate(t *testing.T) {
	if err := privateDir(t).CheckPrivate(); err != nil {
		t.Fatalf("a directory as bootstrap makes it: %v", err)
	}
	for name, tc := range map[string]struct {
		spoil func(t *testing.T, d Dir) string // returns the path at fault
		want  []string
	}{
		"a key others may read": {func(t *testing.T, d Dir) string { chmod(t, d.Path(TLSKeyFile), 0o644); return d.Path(TLSKeyFile) },
			[]string{"may read it", "chmod 600 "}},
		"credentials the group may read": {func(t *testing.T, d Dir) string {
			chmod(t, d.Path(AdminCredsFile), 0o640)
			return d.Path(AdminCredsFile)
		},
			[]string{"may read it", "chmod 600"}},
		"the Raft directory others may enter": {func(t *testing.T, d Dir) string { chmod(t, d.Path(RaftDir), 0o755); return d.Path(RaftDir) },
			[]string{"may read it", "chmod 700"}},
		"the CA others may change": {func(t *testing.T, d Dir) string { chmod(t, d.Path(CACertFile), 0o666); return d.Path(CACertFile) },
			[]string{"may write it", "chmod 644"}},
		"the directory others may write": {func(t *testing.T, d Dir) string { chmod(t, string(d), 0o777); return string(d) },
			[]string{"may write it", "chmod 755"}},
		"a key that is a link": {func(t *testing.T, d Dir) string {
			os.Remove(d.Path(SigningKeyFile))
			if err := os.Symlink("/etc/hostname", d.Path(SigningKeyFile)); err != nil {
				t.Fatal(err)
			}
			return d.Path(SigningKeyFile)
		}, []string{"symbolic link"}},
		"a key of another user": {func(t *testing.T, d Dir) string {
			if os.Geteuid() != 0 {
				t.Skip("changing a file's owner needs root")
			}
			if err := os.Chown(d.Path(CAKeyFile), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return d.Path(CAKeyFile)
		}, []string{"belongs to", "uid 65534", "chown 0 "}},
	} {
		t.Run(name, func(t *testing.T) {
			d := privateDir(t)
			at := tc.spoil(t, d)
			err := d.CheckPrivate()
			var ue *UnprotectedError
			if !errors.Is(err, ErrUnprotected) || !errors.As(err, &ue) || ue.Path != at {
				t.Fatalf("CheckPrivate = %v, want ErrUnprotected at %s", err, at)
			}
			if !strings.HasSuffix(err.Error(), " "+at) && !strings.Contains(err.Error(), "symbolic link") {
				t.Errorf("the fix does not name %s: %q", at, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func TestCheckKeysPrivate(t *testing.T) {
	d := privateDir(t)
	if err := d.CheckKeysPrivate(CAKeyFile, AccountKeyFile); err != nil {
		t.Fatalf("keys as bootstrap writes them: %v", err)
	}
	// Whoever owns it: an operator may run meshctl as another user than serve's.
	if os.Geteuid() == 0 {
		if err := os.Chown(d.Path(CAKeyFile), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := d.CheckKeysPrivate(CAKeyFile); err != nil {
			t.Fatalf("a private key of another user: %v", err)
		}
	}
	chmod(t, d.Path(AccountKeyFile), 0o640)
	var ue *UnprotectedError
	if err := d.CheckKeysPrivate(CAKeyFile, AccountKeyFile); !errors.As(err, &ue) || ue.Path != d.Path(AccountKeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("an account key the group may read: %v", err)
	}
	if err := d.CheckKeysPrivate("missing.pem"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key that is not there: %v", err)
	}
}
