package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	id := validIdentity(t)
	if err := Save(state, id); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(Path(state))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity file mode %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(state)
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v, want 0700", di.Mode().Perm())
	}
	raw, _ := os.ReadFile(Path(state))
	if !bytes.Contains(raw, []byte(id.Seed)) {
		t.Fatal("the file does not hold the seed")
	}

	got, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if !got.EnrolledAt.Equal(id.EnrolledAt) {
		t.Fatalf("enrolled_at %v, want %v", got.EnrolledAt, id.EnrolledAt)
	}
	got.EnrolledAt = id.EnrolledAt
	if fmt.Sprintf("%#v", fileIdentity(got)) != fmt.Sprintf("%#v", fileIdentity(id)) {
		t.Fatalf("loaded\n%#v\nwant\n%#v", fileIdentity(got), fileIdentity(id))
	}
	if names, _ := os.ReadDir(state); len(names) != 1 {
		t.Fatalf("state directory holds %v, want only %s", names, FileName)
	}
}

func TestSaveFillsFormat(t *testing.T) {
	state := t.TempDir()
	id := validIdentity(t)
	id.Format = 0
	if err := Save(state, id); err != nil {
		t.Fatal(err)
	}
	got, err := Load(state)
	if err != nil {
		t.Fatal(err)
	}
	if got.Format != FormatVersion {
		t.Fatalf("format %d", got.Format)
	}
}

// TestLoadAbsent: no identity file is the ordinary "not enrolled", a
// *NotEnrolledError matching ErrNotEnrolled, whose text names the enrolment to run
// on that state directory, without the package's prefix (meshhost names the
// command it comes from: "meshhost status: identity: this machine has not
// enrolled (there is no …)" gave no next step).
func TestLoadAbsent(t *testing.T) {
	for name, dir := range map[string]string{
		"empty state dir":   t.TempDir(),
		"missing state dir": filepath.Join(t.TempDir(), "nope"),
	} {
		_, err := Load(dir)
		if got := outcome(t, err); got != "absent" {
			t.Errorf("%s: %v is %s, want absent", name, err, got)
		}
		var ne *NotEnrolledError
		if !errors.As(err, &ne) || ne.Path != Path(dir) || ne.Pending {
			t.Errorf("%s: %#v, want a *NotEnrolledError for %s, no enrolment pending", name, err, Path(dir))
		}
		msg := err.Error()
		if want := "meshhost enrol --state " + dir + " < token.txt"; !strings.Contains(msg, want) || strings.HasPrefix(msg, "identity:") {
			t.Errorf("%s: %q; want it to name %q, with no package prefix", name, msg, want)
		}
		if err := CheckAbsent(dir); err != nil {
			t.Errorf("%s: CheckAbsent: %v", name, err)
		}
	}
}

// TestLoadFileStates writes each kind of damaged file and checks it lands in
// the right one of the four states.
func TestLoadFileStates(t *testing.T) {
	id := validIdentity(t)
	good := fileBytes(t, id)
	other := validIdentity(t)
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()

	tests := []struct {
		name    string
		data    []byte
		want    string
		reason  string // substring of the corrupt reason
		notWant string // must not appear in the message
	}{
		{name: "valid", data: good, want: "ok"},
		{name: "empty", data: nil, want: "truncated"},
		{name: "white space", data: []byte(" \n\t"), want: "truncated"},
		{name: "zero-filled", data: make([]byte, 512), want: "truncated"},
		{name: "cut then zero-filled", data: append(append([]byte{}, good[:200]...), make([]byte, 300)...), want: "truncated"},
		{name: "cut inside an escape", data: []byte(`{"format":1,"mesh":"a\`), want: "truncated"},
		{name: "NUL after the object", data: append(append([]byte{}, good...), 0), want: "corrupt", reason: "NUL"},
		{name: "garbage after the object", data: append(append([]byte{}, good...), "xyz"...), want: "corrupt", reason: "after the JSON"},
		{name: "second object", data: append(append([]byte{}, good...), good...), want: "corrupt", reason: "after the JSON"},
		{name: "not JSON", data: []byte("hello"), want: "corrupt", reason: "not valid JSON"},
		{name: "binary", data: []byte{0xff, 0xfe, 0x01, 0x02}, want: "corrupt", reason: "not valid JSON"},
		{name: "array", data: []byte(`[1,2]`), want: "corrupt", reason: "not an object"},
		{name: "null", data: []byte(`null`), want: "corrupt", reason: "not an object"},
		{name: "string", data: []byte(`"SU"`), want: "corrupt", reason: "not an object"},
		{name: "syntax error", data: []byte(`{"format":1,}`), want: "corrupt", reason: "not valid JSON"},
		{name: "newer format", data: withField(t, id, "format", "2"), want: "corrupt", reason: "format version 2"},
		{name: "no format", data: withField(t, id, "format", ""), want: "corrupt", reason: "no format version"},
		{name: "format as string", data: withField(t, id, "format", `"1"`), want: "corrupt", reason: "format version is not"},
		{name: "unknown field", data: withField(t, id, "extra", `true`), want: "corrupt", reason: "unknown field"},
		{name: "wrong type", data: withField(t, id, "brokers", `"127.0.0.1:1"`), want: "corrupt", reason: "field brokers"},
		{name: "seed of another key", data: withField(t, id, "nkey_seed", fmt.Sprintf("%q", string(other.Seed))),
			want: "corrupt", reason: "nkey_seed does not match", notWant: string(other.Seed)},
		{name: "seed of wrong type", data: withField(t, id, "nkey_seed", fmt.Sprintf("%q", acctSeed)),
			want: "corrupt", reason: "not a user seed", notWant: string(acctSeed)},
		{name: "seed mangled", data: withField(t, id, "nkey_seed", fmt.Sprintf("%q", mangle(string(id.Seed), 20))),
			want: "corrupt", reason: "not a valid nkeys seed"},
		{name: "seed missing", data: withField(t, id, "nkey_seed", ""), want: "corrupt", reason: "nkey_seed is missing"},
		{name: "pin of another CA", data: withField(t, id, "ca_pin", fmt.Sprintf("%q", other.CAPin)), want: "corrupt", reason: "ca_pin does not match"},
		{name: "CA of another mesh", data: withField(t, id, "ca_pem", mustJSON(t, other.CAPEM)), want: "corrupt", reason: "ca_pin does not match"},
		{name: "broker is a name", data: withField(t, id, "brokers", `["localhost:7300"]`), want: "corrupt", reason: "host names are not accepted"},
		{name: "node id invalid", data: withField(t, id, "node", `"Web_1"`), want: "corrupt", reason: "node is"},
		{name: "enrolled_at bad", data: withField(t, id, "enrolled_at", `"yesterday"`), want: "corrupt", reason: "cannot be decoded"},
		// encoding/json would read these, the last member winning and names
		// matched whatever their case: a file meshhost never writes.
		{name: "seed twice", data: bytes.Replace(good, []byte(`{`), []byte(fmt.Sprintf(`{"nkey_seed":%q,`, string(other.Seed))), 1),
			want: "corrupt", reason: `"nkey_seed" appears twice`, notWant: string(other.Seed)},
		{name: "node twice", data: bytes.Replace(good, []byte(`{`), []byte(`{"node":"db-9",`), 1), want: "corrupt", reason: `"node" appears twice`},
		{name: "node in another case", data: bytes.Replace(good, []byte(`"node":`), []byte(`"Node":`), 1), want: "corrupt", reason: `"Node" is field "node"`},
		{name: "too big", data: append(append([]byte{}, good...), bytes.Repeat([]byte(" "), MaxFileSize)...), want: "corrupt", reason: "larger than"},
		{name: "exactly the cap", data: append(append([]byte{}, good...), bytes.Repeat([]byte(" "), MaxFileSize-len(good))...), want: "ok"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			if err := os.WriteFile(Path(state), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := Load(state)
			if o := outcome(t, err); o != tc.want {
				t.Fatalf("got %s (%v), want %s", o, err, tc.want)
			}
			if err == nil {
				if verr := got.Validate(); verr != nil {
					t.Fatalf("Load succeeded with an invalid identity: %v", verr)
				}
				return
			}
			checkDamagedMessage(t, err, Path(state), string(id.Seed))
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Fatalf("message quotes a seed: %v", err)
			}
			var ce *CorruptError
			if tc.want == "corrupt" {
				if !errors.As(err, &ce) {
					t.Fatalf("%v is not a *CorruptError", err)
				}
				if !strings.Contains(ce.Reason, tc.reason) {
					t.Fatalf("reason %q does not mention %q", ce.Reason, tc.reason)
				}
			}
			// CheckAbsent refuses every one of these with Load's error, and
			// never as "already enrolled".
			cerr := CheckAbsent(state)
			if errors.Is(cerr, ErrAlreadyEnrolled) || outcome(t, cerr) != tc.want {
				t.Fatalf("CheckAbsent: %v", cerr)
			}
		})
	}
}

// checkDamagedMessage asserts what every unreadable, truncated or corrupt
// identity message must say.
func checkDamagedMessage(t *testing.T, err error, path, seed string) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, path) {
		t.Errorf("message does not name the file: %s", msg)
	}
	if !strings.Contains(msg, "Do not enrol again") || !strings.Contains(msg, "revoke") || !strings.Contains(msg, "backup") {
		t.Errorf("message does not warn against enrolling again over the file: %s", msg)
	}
	if seed != "" && strings.Contains(msg, seed) {
		t.Errorf("message quotes the seed: %s", msg)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLoadEveryTruncation cuts a valid file at every length: each prefix must
// read as truncated, never as corrupt and never as absent.
func TestLoadEveryTruncation(t *testing.T) {
	id := validIdentity(t)
	good := fileBytes(t, id)
	// The last byte is the newline after the object: without it the file is
	// still whole.
	for n := 0; n < len(good)-1; n++ {
		_, err := load("identity.json", func(string, int64) ([]byte, error) { return good[:n], nil })
		if o := outcome(t, err); o != "truncated" {
			t.Fatalf("cut at %d of %d: %s (%v)", n, len(good), o, err)
		}
		var te *TruncatedError
		if !errors.As(err, &te) || te.Size != n {
			t.Fatalf("cut at %d: %#v", n, err)
		}
	}
}

func TestLoadUnreadable(t *testing.T) {
	t.Run("directory in its place", func(t *testing.T) {
		state := t.TempDir()
		if err := os.Mkdir(Path(state), 0o700); err != nil {
			t.Fatal(err)
		}
		assertUnreadable(t, state, syscall.EISDIR)
	})
	t.Run("fifo in its place", func(t *testing.T) {
		// Opening a FIFO would block until a writer came; Load must not.
		state := t.TempDir()
		if err := syscall.Mkfifo(Path(state), 0o600); err != nil {
			t.Skipf("cannot make a FIFO here: %v", err)
		}
		assertUnreadable(t, state, nil)
	})
	t.Run("dangling symlink", func(t *testing.T) {
		state := t.TempDir()
		if err := os.Symlink(filepath.Join(state, "gone"), Path(state)); err != nil {
			t.Fatal(err)
		}
		assertUnreadable(t, state, nil)
	})
	t.Run("state dir is a file", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "state")
		if err := os.WriteFile(state, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		assertUnreadable(t, state, syscall.ENOTDIR)
	})
	t.Run("permission denied", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root reads any file; the injected EACCES case below covers this path")
		}
		state := t.TempDir()
		if err := Save(state, validIdentity(t)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(Path(state), 0); err != nil {
			t.Fatal(err)
		}
		assertUnreadable(t, state, syscall.EACCES)
	})
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EIO} {
		t.Run("injected "+errno.Error(), func(t *testing.T) {
			read := func(p string, _ int64) ([]byte, error) {
				return nil, &fs.PathError{Op: "read", Path: p, Err: errno}
			}
			_, err := load("/state/identity.json", read)
			if o := outcome(t, err); o != "unreadable" {
				t.Fatalf("got %s: %v", o, err)
			}
			if !errors.Is(err, errno) {
				t.Fatalf("%v does not wrap %v", err, errno)
			}
			var ue *UnreadableError
			if !errors.As(err, &ue) || ue.Path != "/state/identity.json" {
				t.Fatalf("%#v", err)
			}
			checkDamagedMessage(t, err, "/state/identity.json", "")
		})
	}
}

func assertUnreadable(t *testing.T, state string, errno error) {
	t.Helper()
	_, err := Load(state)
	if o := outcome(t, err); o != "unreadable" {
		t.Fatalf("got %s: %v", o, err)
	}
	if errno != nil && !errors.Is(err, errno) {
		t.Fatalf("%v does not wrap %v", err, errno)
	}
	checkDamagedMessage(t, err, Path(state), "")
	if cerr := CheckAbsent(state); !errors.Is(cerr, ErrUnreadable) {
		t.Fatalf("CheckAbsent: %v", cerr)
	}
}

func TestValidate(t *testing.T) {
	base := validIdentity(t)
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	baseKP, err := base.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	other := validIdentity(t)
	acct, _ := nkeys.CreateAccount()
	acctSeed, _ := acct.Seed()
	acctPub, _ := acct.PublicKey()
	tests := []struct {
		field string
		edit  func(*Identity)
	}{
		{"format", func(id *Identity) { id.Format = 2 }},
		{"format", func(id *Identity) { id.Format = 0 }},
		{"mesh", func(id *Identity) { id.Mesh = "" }},
		{"mesh", func(id *Identity) { id.Mesh = strings.Repeat("a", 64) }},
		{"mesh", func(id *Identity) { id.Mesh = "-demo" }},
		{"mesh", func(id *Identity) { id.Mesh = "demo-" }},
		{"mesh", func(id *Identity) { id.Mesh = "de.mo" }},
		{"node", func(id *Identity) { id.Node = "Web" }},
		{"node", func(id *Identity) { id.Node = "web_1" }},
		{"node", func(id *Identity) { id.Node = "web>" }},
		{"role", func(id *Identity) { id.Role = "" }},
		{"role", func(id *Identity) { id.Role = "admin" }},
		{"nkey_seed", func(id *Identity) { id.Seed = "" }},
		{"nkey_seed", func(id *Identity) { id.Seed = "SUnotaseed" }},
		{"nkey_seed", func(id *Identity) { id.Seed = other.Seed }},
		{"nkey_seed", func(id *Identity) { id.Seed, id.PublicKey = Secret(acctSeed), acctPub }},
		{"public_key", func(id *Identity) { id.PublicKey = "" }},
		{"public_key", func(id *Identity) { id.PublicKey = acctPub }},
		{"ca_pem", func(id *Identity) { id.CAPEM = "" }},
		{"ca_pem", func(id *Identity) { id.CAPEM = "not pem" }},
		{"ca_pem", func(id *Identity) {
			id.CAPEM = strings.Replace(id.CAPEM, "CERTIFICATE", "PRIVATE KEY", 2)
		}},
		{"ca_pem", func(id *Identity) { id.CAPEM += other.CAPEM }},
		{"ca_pem", func(id *Identity) {
			id.CAPEM = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		}},
		{"ca_pin", func(id *Identity) { id.CAPin = "" }},
		{"ca_pin", func(id *Identity) { id.CAPin = id.CAPin[:62] }},
		{"ca_pin", func(id *Identity) { id.CAPin = "zz" + id.CAPin[2:] }},
		{"ca_pin", func(id *Identity) { id.CAPin = other.CAPin }},
		{"brokers", func(id *Identity) { id.Brokers = nil }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"127.0.0.1"} }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"broker.example:7300"} }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"127.0.0.1:0"} }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"127.0.0.1:65536"} }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"0.0.0.0:7300"} }},
		// What a token refuses, which the agent would fail to dial forever.
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"[fe80::1%eth0]:7300"} }},
		{"brokers[0]", func(id *Identity) { id.Brokers = []string{"224.0.0.1:7300"} }},
		{"brokers[1]", func(id *Identity) { id.Brokers = []string{"127.0.0.1:1", ""} }},
		{"subjects.declarations", func(id *Identity) { id.Subjects.Declarations = "" }},
		{"subjects.status", func(id *Identity) { id.Subjects.Status = "mesh.node.*.status" }},
		{"subjects.sync", func(id *Identity) { id.Subjects.Sync = "mesh..sync" }},
		{"subjects.inbox_prefix", func(id *Identity) { id.Subjects.InboxPrefix = "_INBOX.>" }},
		{"subjects.inbox_prefix", func(id *Identity) { id.Subjects.InboxPrefix = "_INBOX node" }},
		{"signing_keys", func(id *Identity) { id.SigningKeys = nil }},
		{"signing_keys[0]", func(id *Identity) { id.SigningKeys = []string{"abcd"} }},
		{"signing_keys[1]", func(id *Identity) { id.SigningKeys = []string{id.SigningKeys[0], id.SigningKeys[0]} }},
		{"signing_keys[1]", func(id *Identity) {
			id.SigningKeys = []string{id.SigningKeys[0], strings.ToUpper(id.SigningKeys[0])}
		}},
		{"enrolled_at", func(id *Identity) { id.EnrolledAt = time.Time{} }},
	}
	for i, tc := range tests {
		id := base
		id.Brokers = append([]string(nil), base.Brokers...)
		id.SigningKeys = append([]string(nil), base.SigningKeys...)
		tc.edit(&id)
		err := id.Validate()
		var ie *InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%d (%s): got %v, want an *InvalidError", i, tc.field, err)
			continue
		}
		if ie.Field != tc.field {
			t.Errorf("%d: field %q (%v), want %q", i, ie.Field, err, tc.field)
		}
		for _, secret := range []string{string(base.Seed), string(other.Seed), string(acctSeed)} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%d: message quotes a seed: %v", i, err)
			}
		}
		// ValidateWith, given the key pair base was made with, finds the same field.
		err = id.ValidateWith(baseKP)
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%d: ValidateWith: %v, want an *InvalidError on %q", i, err, tc.field)
		}
	}
}

// TestValidateWith: an identity checked against the key pair it was made with, or
// against another, a wiped or no key pair.
func TestValidateWith(t *testing.T) {
	id := validIdentity(t)
	kp, err := id.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ValidateWith(kp); err != nil {
		t.Fatalf("the identity with its own key pair: %v", err)
	}
	other, _ := NewKeyPair()
	var ie *InvalidError
	if err := id.ValidateWith(other); !errors.As(err, &ie) || ie.Field != "nkey_seed" {
		t.Fatalf("with another key pair: %v, want an *InvalidError on nkey_seed", err)
	}
	// The other's public key with this seed: still not that key pair's.
	mixed := id
	mixed.PublicKey = other.pub
	if err := mixed.ValidateWith(kp); !errors.As(err, &ie) || ie.Field != "nkey_seed" {
		t.Fatalf("a public key that is not the seed's: %v", err)
	}
	if err := id.ValidateWith(nil); err == nil {
		t.Fatal("no key pair: accepted")
	}
	other.Wipe()
	if err := id.ValidateWith(other); err == nil {
		t.Fatal("a wiped key pair: accepted")
	}
}

// mangle changes the character at i to a different one (always: a fixed replacement
// would leave the seed intact when it is already that character).
func mangle(s string, i int) string {
	c := byte('A')
	if s[i] == c {
		c = 'B'
	}
	return s[:i] + string(c) + s[i+1:]
}

// LoadKeyPair hands on the key Load derived to check the seed: the node's own key,
// and nothing at all when the file is refused.
func TestLoadKeyPair(t *testing.T) {
	state := t.TempDir()
	id := validIdentity(t)
	if err := Save(state, id); err != nil {
		t.Fatal(err)
	}
	got, kp, err := LoadKeyPair(state)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil || pub != id.PublicKey || got.PublicKey != id.PublicKey {
		t.Fatalf("key pair of %q (%v), identity of %q; want %q", pub, err, got.PublicKey, id.PublicKey)
	}
	kp.Wipe()

	other := validIdentity(t)
	if err := os.WriteFile(Path(state), withField(t, id, "nkey_seed", fmt.Sprintf("%q", string(other.Seed))), 0o600); err != nil {
		t.Fatal(err)
	}
	_, kp, err = LoadKeyPair(state)
	_, lerr := Load(state)
	if !errors.Is(err, ErrCorrupt) || kp != nil || lerr == nil || err.Error() != lerr.Error() {
		t.Fatalf("a seed of another key: LoadKeyPair gives %v and %v, Load %v", kp, err, lerr)
	}
}

// TestUnreadableForThisUserSaysWhoShouldRead: an identity file this user may not
// read (meshhost status run without sudo on the root-owned state directory) is
// most likely fine. Before, the message was the one for a damaged file: restore it
// from a backup, or have the node revoked.
func TestUnreadableForThisUserSaysWhoShouldRead(t *testing.T) {
	err := error(&UnreadableError{Path: "/var/lib/meshhost/identity.json",
		Err: &fs.PathError{Op: "open", Path: "/var/lib/meshhost/identity.json", Err: syscall.EACCES}})
	if os.Geteuid() != 0 {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte("{}"), 0o000); err != nil {
			t.Fatal(err)
		}
		_, err = Load(dir)
	}
	if !errors.Is(err, ErrUnreadable) {
		t.Fatalf("got %v", err)
	}
	msg := err.Error()
	who, damaged := strings.Index(msg, "as the user the agent runs as"), strings.Index(msg, "backup")
	if who < 0 || damaged >= 0 && damaged < who {
		t.Fatalf("the first advice is for a damaged file, not for the wrong user: %s", msg)
	}
}
