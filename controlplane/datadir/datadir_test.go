package datadir

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/pki"
)

func validConfig() Config {
	return Config{
		Mesh:          "demo",
		Node:          "cp-1",
		Listen:        "127.0.0.1:7300",
		RaftListen:    "127.0.0.1:7301",
		ClusterListen: "127.0.0.1:7302",
		Brokers:       []string{"127.0.0.1:7300"},
		CAPin:         strings.Repeat("ab", 32),
		AdminAccount:  "AABC",
	}
}

func TestConfigRoundTrip(t *testing.T) {
	d := Dir(t.TempDir())
	c := validConfig()
	c.Format = 99 // SaveConfig writes the format this program reads, whatever it is given
	if err := d.SaveConfig(c); err != nil {
		t.Fatal(err)
	}
	got, err := d.LoadConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := validConfig()
	want.Format = ConfigFormat
	if got.Format != want.Format || got.Mesh != want.Mesh || got.Node != want.Node || got.Listen != want.Listen ||
		got.RaftListen != want.RaftListen || got.ClusterListen != want.ClusterListen || !slices.Equal(got.Brokers, want.Brokers) ||
		got.CAPin != want.CAPin || got.AdminAccount != want.AdminAccount {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}
	info, err := os.Stat(d.Path(ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o644 {
		t.Fatalf("mesh.json mode %v, want 0644 (it holds nothing secret)", info.Mode().Perm())
	}
}

func TestLoadConfigErrors(t *testing.T) {
	write := func(t *testing.T, content string) Dir {
		d := Dir(t.TempDir())
		if err := os.WriteFile(d.Path(ConfigFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	incomplete := func(edit func(*Config)) string {
		c := validConfig()
		c.Format = ConfigFormat
		edit(&c)
		var b strings.Builder
		b.WriteString(`{"format":1`)
		if c.Mesh != "" {
			b.WriteString(`,"mesh":"` + c.Mesh + `"`)
		}
		if c.Node != "" {
			b.WriteString(`,"node":"` + c.Node + `"`)
		}
		if c.Listen != "" {
			b.WriteString(`,"listen":"` + c.Listen + `"`)
		}
		if len(c.Brokers) > 0 {
			b.WriteString(`,"brokers":["` + c.Brokers[0] + `"]`)
		}
		if c.CAPin != "" {
			b.WriteString(`,"ca_pin":"` + c.CAPin + `"`)
		}
		b.WriteString("}")
		return b.String()
	}
	tests := []struct {
		name    string
		dir     func(t *testing.T) Dir
		noConf  bool
		mention string
		is      error // the error it must match, besides ErrNoConfig
	}{
		{name: "missing", dir: func(t *testing.T) Dir { return Dir(t.TempDir()) }, noConf: true, mention: "meshctl bootstrap"},
		{name: "directory missing", dir: func(t *testing.T) Dir { return Dir(filepath.Join(t.TempDir(), "nope")) }, noConf: true, mention: "meshctl bootstrap"},
		{name: "cut short", dir: func(t *testing.T) Dir { return write(t, `{"format":1,"mesh":`) }, mention: "cut short", is: ErrTruncated},
		{name: "not json", dir: func(t *testing.T) Dir { return write(t, "mesh = demo\n") }, mention: "corrupt", is: ErrCorrupt},
		{name: "empty file", dir: func(t *testing.T) Dir { return write(t, "") }, mention: "empty", is: ErrTruncated},
		{name: "wrong type", dir: func(t *testing.T) Dir { return write(t, `{"format":"1"}`) }, mention: "corrupt", is: ErrCorrupt},
		{name: "trailing brace", dir: func(t *testing.T) Dir { return write(t, incomplete(func(*Config) {})+"}") }, mention: "after its JSON object", is: ErrCorrupt},
		{name: "not an object", dir: func(t *testing.T) Dir { return write(t, `["demo"]`) }, mention: "not a JSON object", is: ErrCorrupt},
		{name: "over the cap", dir: func(t *testing.T) Dir {
			return write(t, incomplete(func(*Config) {})+strings.Repeat(" ", MaxFileSize))
		}, mention: "larger", is: ErrTooLarge},
		{name: "format 2", dir: func(t *testing.T) Dir {
			return write(t, strings.Replace(incomplete(func(*Config) {}), `"format":1`, `"format":2`, 1))
		}, mention: "format 2", is: ErrFormat},
		{name: "format missing", dir: func(t *testing.T) Dir {
			return write(t, strings.Replace(incomplete(func(*Config) {}), `"format":1,`, ``, 1))
		}, mention: "format 0", is: ErrFormat},
		{name: "no mesh", dir: func(t *testing.T) Dir { return write(t, incomplete(func(c *Config) { c.Mesh = "" })) }, mention: "incomplete", is: ErrCorrupt},
		{name: "no node", dir: func(t *testing.T) Dir { return write(t, incomplete(func(c *Config) { c.Node = "" })) }, mention: "incomplete", is: ErrCorrupt},
		{name: "no listen", dir: func(t *testing.T) Dir { return write(t, incomplete(func(c *Config) { c.Listen = "" })) }, mention: "incomplete", is: ErrCorrupt},
		{name: "no brokers", dir: func(t *testing.T) Dir { return write(t, incomplete(func(c *Config) { c.Brokers = nil })) }, mention: "incomplete", is: ErrCorrupt},
		{name: "no pin", dir: func(t *testing.T) Dir { return write(t, incomplete(func(c *Config) { c.CAPin = "" })) }, mention: "incomplete", is: ErrCorrupt},
		// encoding/json reads both, the last "ca_pin" winning and "Listen" taken
		// for "listen"; SaveConfig writes neither.
		{name: "pin twice", dir: func(t *testing.T) Dir {
			return write(t, strings.Replace(incomplete(func(*Config) {}), `{"format":1`, `{"format":1,"ca_pin":"`+strings.Repeat("cd", 32)+`"`, 1))
		}, mention: `"ca_pin" appears twice`, is: ErrCorrupt},
		{name: "a member in another case", dir: func(t *testing.T) Dir {
			return write(t, strings.Replace(incomplete(func(*Config) {}), `"listen"`, `"Listen"`, 1))
		}, mention: `"Listen" is field "listen"`, is: ErrCorrupt},
		{name: "format twice", dir: func(t *testing.T) Dir {
			return write(t, strings.Replace(incomplete(func(*Config) {}), `{"format":1`, `{"format":2,"format":1`, 1))
		}, mention: `"format" appears twice`, is: ErrCorrupt},
		{name: "is a directory", dir: func(t *testing.T) Dir {
			d := Dir(t.TempDir())
			if err := os.Mkdir(d.Path(ConfigFile), 0o700); err != nil {
				t.Fatal(err)
			}
			return d
		}, mention: ConfigFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.dir(t)
			_, err := d.LoadConfig()
			if err == nil {
				t.Fatal("LoadConfig accepted it")
			}
			if errors.Is(err, ErrNoConfig) != tt.noConf {
				t.Fatalf("errors.Is(err, ErrNoConfig) = %v for %v", !tt.noConf, err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want it to match %v", err, tt.is)
			}
			for _, other := range []error{ErrTruncated, ErrCorrupt, ErrTooLarge, ErrFormat} {
				if other != tt.is && errors.Is(err, other) {
					t.Fatalf("err = %v also matches %v", err, other)
				}
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.mention)
			}
		})
	}
	// The one valid file of the table's builder loads, so the cases above fail for
	// the reason they name.
	if _, err := write(t, incomplete(func(*Config) {})).LoadConfig(); err != nil {
		t.Fatalf("the complete config is refused: %v", err)
	}
}

func TestPin(t *testing.T) {
	c := validConfig()
	pin, err := c.Pin()
	if err != nil || pin[0] != 0xab || pin[31] != 0xab {
		t.Fatalf("Pin() = %x, %v", pin, err)
	}
	for _, bad := range []string{"", "ab", strings.Repeat("ab", 31), strings.Repeat("ab", 33), strings.Repeat("zz", 32), "sha256:" + strings.Repeat("ab", 32)} {
		c.CAPin = bad
		if _, err := c.Pin(); err == nil {
			t.Errorf("Pin accepted %q", bad)
		}
	}
}

func TestSigningKeyRoundTrip(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	data, err := EncodeSigningKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("-----BEGIN PRIVATE KEY-----")) {
		t.Fatalf("not PKCS#8 PEM: %q", data[:30])
	}
	got, err := ParseSigningKey(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(key) {
		t.Fatal("round trip changed the key")
	}
	d := Dir(t.TempDir())
	if err := WriteFile(d.Path(SigningKeyFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := d.LoadSigningKey()
	if err != nil || !loaded.Equal(key) {
		t.Fatalf("LoadSigningKey: %v", err)
	}
}

func TestParseSigningKeyRefuses(t *testing.T) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	good, _ := EncodeSigningKey(key)
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("garbage")},
		{"truncated", good[:len(good)/2]},
		{"wrong PEM type", bytes.Replace(good, []byte("PRIVATE KEY"), []byte("PUBLIC KEY"), 2)},
		{"corrupt DER", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{0x30, 0x01, 0x00}})},
		{"ECDSA key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})},
		{"raw seed", key.Seed()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseSigningKey(tt.data)
			if err == nil || k != nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "signing key") {
				t.Fatalf("err = %v does not say which key", err)
			}
		})
	}
	if _, err := Dir(t.TempDir()).LoadSigningKey(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing signing key: err = %v, want fs.ErrNotExist", err)
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	// A strict umask must not change the modes asked for: they are set explicitly.
	old := syscallUmask(0o077)
	defer syscallUmask(old)
	for _, perm := range []fs.FileMode{0o600, 0o644, 0o640} {
		p := filepath.Join(dir, "f"+perm.String())
		if err := WriteFile(p, []byte("one"), perm); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != perm {
			t.Errorf("mode %v, want %v", info.Mode().Perm(), perm)
		}
	}
	// Overwriting replaces content and mode.
	p := filepath.Join(dir, "secret")
	if err := WriteFile(p, []byte("public"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	info, _ := os.Stat(p)
	if string(got) != "secret" || info.Mode().Perm() != 0o600 {
		t.Fatalf("after overwrite: %q mode %v", got, info.Mode().Perm())
	}
	// Missing parents are made, private.
	deep := filepath.Join(dir, "a", "b", "c.pem")
	if err := WriteFile(deep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if info, _ := os.Stat(filepath.Join(dir, "a")); info.Mode().Perm() != 0o700 {
		t.Errorf("new parent mode %v, want 0700", info.Mode().Perm())
	}
	assertNoTemp(t, dir)
	assertNoTemp(t, filepath.Join(dir, "a", "b"))
}

func TestWriteFileFailureLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	// The target is a non-empty directory: the rename fails after the temp file was
	// written, and nothing may be left behind.
	target := filepath.Join(dir, "ca.pem")
	if err := os.MkdirAll(filepath.Join(target, "keep"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(target, []byte("new"), 0o644); err == nil {
		t.Fatal("WriteFile over a directory succeeded")
	}
	if info, err := os.Stat(filepath.Join(target, "keep")); err != nil || !info.IsDir() {
		t.Fatal("the failed write damaged what was there")
	}
	assertNoTemp(t, dir)

	// The parent is a file: nothing can be created.
	file := filepath.Join(dir, "plain")
	os.WriteFile(file, []byte("x"), 0o600)
	if err := WriteFile(filepath.Join(file, "child"), []byte("y"), 0o600); err == nil {
		t.Fatal("WriteFile under a file succeeded")
	}
}

func TestWriteFileReadersSeeWholeFiles(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mesh.json")
	a := bytes.Repeat([]byte("a"), 64<<10)
	b := bytes.Repeat([]byte("b"), 96<<10)
	if err := WriteFile(p, a, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			data := a
			if i%2 == 1 {
				data = b
			}
			if err := WriteFile(p, data, 0o644); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	reads := 0
	for time.Now().Before(deadline) {
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read during rewrite: %v", err)
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Fatalf("a reader saw a partial file of %d bytes", len(got))
		}
		reads++
	}
	close(stop)
	wg.Wait()
	if reads == 0 {
		t.Fatal("no read happened")
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left behind", e.Name())
		}
	}
}

func TestExistsAndReadFile(t *testing.T) {
	d := Dir(t.TempDir())
	if d.Exists(CAKeyFile) {
		t.Fatal("Exists on a missing file")
	}
	if err := WriteFile(d.Path(CAKeyFile), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !d.Exists(CAKeyFile) {
		t.Fatal("Exists on a present file")
	}
	_, err := d.ReadFile(TLSCertFile)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), d.Path(TLSCertFile)) {
		t.Fatalf("ReadFile of a missing file: %v (must say which file)", err)
	}
	if d.Path("x") != filepath.Join(string(d), "x") {
		t.Fatal("Path")
	}
}

func TestLoadCAAndLeaf(t *testing.T) {
	d := Dir(t.TempDir())
	ca, keyPEM, err := pki.NewCA("demo", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.LoadCA(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadCA with nothing: %v", err)
	}
	WriteFile(d.Path(CACertFile), ca.CertPEM, 0o644)
	// A control node that joined holds the CA certificate but not its key.
	_, err = d.LoadCA()
	if err == nil || !strings.Contains(err.Error(), "only the machine that ran bootstrap") {
		t.Fatalf("LoadCA without the key: %v", err)
	}
	// A key cut short, garbled or of another CA is named, with where its copy is.
	_, otherKey, _ := pki.NewCA("other", time.Now())
	for name, c := range map[string]struct {
		data []byte
		want error
	}{
		"empty":     {nil, ErrTruncated},
		"cut short": {keyPEM[:len(keyPEM)/2], ErrTruncated},
		"garbage":   {[]byte("\x8fnot a key\n"), ErrCorrupt},
		"another":   {otherKey, ErrCorrupt},
	} {
		WriteFile(d.Path(CAKeyFile), c.data, 0o600)
		_, err := d.LoadCA()
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), d.Path(CAKeyFile)) || !strings.Contains(err.Error(), "offline backup taken at bootstrap") {
			t.Errorf("LoadCA with a key %s: %v, want %v naming the file and its backup", name, err, c.want)
		}
	}
	WriteFile(d.Path(CAKeyFile), keyPEM, 0o600)
	got, err := d.LoadCA()
	if err != nil || got.Pin() != ca.Pin() {
		t.Fatalf("LoadCA: %v", err)
	}
	if _, err := d.LoadLeaf(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadLeaf with nothing: %v", err)
	}
	leaf, _ := ca.IssueLeaf("cp-1", nil, time.Now())
	WriteFile(d.Path(TLSCertFile), leaf.CertPEM, 0o644)
	if _, err := d.LoadLeaf(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadLeaf without the key: %v", err)
	}
	WriteFile(d.Path(TLSKeyFile), leaf.KeyPEM, 0o600)
	l, err := d.LoadLeaf()
	if err != nil || !bytes.Equal(l.CertPEM, leaf.CertPEM) || !bytes.Equal(l.KeyPEM, leaf.KeyPEM) {
		t.Fatalf("LoadLeaf: %v", err)
	}
}

// TestJoinedNode: a directory made by join is known as such, finished or not, and
// one joined before Joined was recorded by its CA holder being another node.
func TestJoinedNode(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
		want bool
	}{
		{"bootstrapped", Config{Node: "cp-1", CAHolder: "cp-1"}, false},
		{"bootstrapped, holder not recorded", Config{Node: "cp-1"}, false},
		{"joined", Config{Node: "cp-2", CAHolder: "cp-1", Joined: true}, true},
		{"joining", Config{Node: "cp-2", CAHolder: "cp-1", Joining: true, Joined: true}, true},
		{"joined, CA key restored here", Config{Node: "cp-2", CAHolder: "cp-2", Joined: true}, true},
		{"joined by an earlier version", Config{Node: "cp-2", CAHolder: "cp-1"}, true},
	} {
		if got := c.cfg.JoinedNode(); got != c.want {
			t.Errorf("%s: JoinedNode() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLoadConfigOfADirectoryThatDoesNotExist (a walkthrough): a mistyped --data was
// told to run `meshctl bootstrap` there, which makes a second, unrelated mesh. A
// directory that does not exist is said so; an empty one is still told how to
// bootstrap or join.
func TestLoadConfigOfADirectoryThatDoesNotExist(t *testing.T) {
	missing := Dir(filepath.Join(t.TempDir(), "cpX"))
	_, err := missing.LoadConfig()
	if !errors.Is(err, ErrNoConfig) || !strings.Contains(err.Error(), "does not exist: check the path") || strings.Contains(err.Error(), "bootstrap --data "+string(missing)) {
		t.Fatalf("a directory that does not exist: %v", err)
	}
	empty := Dir(t.TempDir())
	if _, err := empty.LoadConfig(); !errors.Is(err, ErrNoConfig) || !strings.Contains(err.Error(), "bootstrap --data "+string(empty)) {
		t.Fatalf("an empty directory: %v", err)
	}
}
