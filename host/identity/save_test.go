package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mesh/host/fstest"
)

func TestSaveNeverReplaces(t *testing.T) {
	state := t.TempDir()
	first := validIdentity(t)
	if err := Save(state, first); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(Path(state))

	second := validIdentity(t)
	second.Node = "db-1"
	err := Save(state, second)
	var ee *EnrolledError
	if !errors.As(err, &ee) || !errors.Is(err, ErrAlreadyEnrolled) {
		t.Fatalf("second Save: %v, want *EnrolledError", err)
	}
	if ee.Mesh != "demo" || ee.Node != "web-1" {
		t.Fatalf("EnrolledError names %q/%q, want the existing identity demo/web-1", ee.Mesh, ee.Node)
	}
	after, _ := os.ReadFile(Path(state))
	if !bytes.Equal(before, after) {
		t.Fatal("the existing identity changed")
	}

	cerr := CheckAbsent(state)
	if !errors.As(cerr, &ee) || ee.Node != "web-1" {
		t.Fatalf("CheckAbsent: %v", cerr)
	}
	if strings.Contains(cerr.Error(), string(first.Seed)) {
		t.Fatal("message quotes the seed")
	}
	// Said as meshhost's other answers are: meshhost names the command, no
	// package prefix follows.
	if strings.HasPrefix(cerr.Error(), "identity:") || !strings.HasPrefix(cerr.Error(), "this machine is already enrolled: ") {
		t.Fatalf("CheckAbsent: %q, want it to begin \"this machine is already enrolled: \"", cerr)
	}
}

func TestSaveOverDamagedFile(t *testing.T) {
	// A corrupt file is still something the mesh may believe: Save must not
	// replace it either.
	state := t.TempDir()
	if err := os.WriteFile(Path(state), []byte(`{"format":1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Save(state, validIdentity(t))
	if !errors.Is(err, ErrAlreadyEnrolled) {
		t.Fatalf("got %v, want ErrAlreadyEnrolled", err)
	}
	if got, _ := os.ReadFile(Path(state)); string(got) != `{"format":1,` {
		t.Fatalf("damaged file replaced by %q", got)
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	state := t.TempDir()
	id := validIdentity(t)
	id.CAPin = strings.Repeat("0", 64)
	err := Save(state, id)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if _, err := os.Lstat(Path(state)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("an invalid identity was written: %v", err)
	}
}

func TestSaveStateDirIsFile(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Save(state, validIdentity(t)); err == nil || errors.Is(err, ErrAlreadyEnrolled) {
		t.Fatalf("got %v, want a plain failure", err)
	}
}

func TestSaveFullDisk(t *testing.T) {
	state := fstest.Small(t, fstest.Options{Mode: 0o700})
	filler, err := os.Create(filepath.Join(state, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := filler.Write(make([]byte, 4096)); err != nil {
			break
		}
	}
	filler.Close()

	id := validIdentity(t)
	err = Save(state, id)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v, want ENOSPC", err)
	}
	if !strings.Contains(err.Error(), "disk is full") {
		t.Fatalf("message does not say the disk is full: %v", err)
	}
	if strings.Contains(err.Error(), string(id.Seed)) {
		t.Fatal("message quotes the seed")
	}
	if _, err := Load(state); !errors.Is(err, ErrNotEnrolled) {
		t.Fatalf("after a failed save Load gives %v, want ErrNotEnrolled", err)
	}
	if err := CheckAbsent(state); err != nil {
		t.Fatalf("after a failed save the enrolment cannot be retried: %v", err)
	}

	p := validPending(t)
	if err := SavePending(state, p); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("SavePending: %v, want ENOSPC", err)
	}
}

func TestKeyPair(t *testing.T) {
	id := validIdentity(t)
	kp, err := id.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Wipe()
	pub, _ := kp.PublicKey()
	if pub != id.PublicKey {
		t.Fatalf("public key %s, want %s", pub, id.PublicKey)
	}
	sig, err := kp.Sign([]byte("nonce"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.Verify([]byte("nonce"), sig); err != nil {
		t.Fatal(err)
	}
	id.PublicKey = validIdentity(t).PublicKey
	if _, err := id.KeyPair(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("mismatched key pair: %v", err)
	}
}

// TestSeedNeverPrinted formats identities and pending enrolments every way a
// log line might, and checks the seed never shows while the rest does.
func TestSeedNeverPrinted(t *testing.T) {
	id := validIdentity(t)
	p := validPending(t)
	outs := printedEveryWay(t,
		[]any{id, &id, p, &p, struct{ ID Identity }{id}, []Identity{id}, map[string]Pending{"x": p}},
		"id", id, "pending", p, "ptr", &id, "pptr", &p)
	for _, out := range outs {
		for _, seed := range []string{string(id.Seed), string(p.Seed)} {
			if strings.Contains(out, seed) || strings.Contains(out, fmt.Sprintf("%x", seed)) {
				t.Fatalf("output quotes a seed: %s", out)
			}
		}
		// The other fields do show, so this test would notice if formatting
		// printed nothing at all (%x prints them in hex).
		if !strings.Contains(out, "web-1") && !strings.Contains(out, fmt.Sprintf("%x", "web-1")) {
			t.Fatalf("output lost the node id: %s", out)
		}
	}
	if !strings.Contains(fmt.Sprint(id), id.PublicKey) {
		t.Fatal("String omits the public key")
	}
}

// printedEveryWay is each of values as a log line might show it: every fmt verb that
// prints a value, JSON, and the attributes logged through slog's JSON and text
// handlers.
func printedEveryWay(t *testing.T, values []any, logged ...any) []string {
	t.Helper()
	var outs []string
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(b))
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", logged...)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", logged...)
	return append(outs, buf.String())
}

func TestMarshalJSONOmitsOnlySeed(t *testing.T) {
	id := validIdentity(t)
	b, err := json.Marshal(id)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var file map[string]json.RawMessage
	if err := json.Unmarshal(fileBytes(t, id), &file); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["nkey_seed"]; ok {
		t.Fatal("nkey_seed present")
	}
	delete(file, "nkey_seed")
	if len(m) != len(file) {
		t.Fatalf("marshalled fields %d, file fields without the seed %d", len(m), len(file))
	}
	for k, v := range file {
		var c bytes.Buffer
		if err := json.Compact(&c, v); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m[k], c.Bytes()) {
			t.Fatalf("field %s: %s, want %s", k, m[k], v)
		}
	}
}

func TestPendingRoundTrip(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if _, err := LoadPending(state); !errors.Is(err, ErrNoPending) {
		t.Fatalf("absent: %v, want ErrNoPending", err)
	}
	p := validPending(t)
	p.Format = 0
	if err := SavePending(state, p); err != nil {
		t.Fatal(err)
	}
	p.Format = FormatVersion
	if fi, _ := os.Stat(PendingPath(state)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
	}
	got, err := LoadPending(state)
	if err != nil {
		t.Fatal(err)
	}
	if got.Seed != p.Seed || got.TokenHash != p.TokenHash || got.Node != p.Node || !got.CreatedAt.Equal(p.CreatedAt) {
		t.Fatalf("loaded %v, want %v", got, p)
	}
	kp, err := got.KeyPair()
	if err != nil {
		t.Fatal(err)
	}
	kp.Wipe()

	// A re-run replaces the pending file (unlike the identity).
	q := validPending(t)
	if err := SavePending(state, q); err != nil {
		t.Fatal(err)
	}
	if got, _ := LoadPending(state); got.Seed != q.Seed {
		t.Fatal("SavePending did not replace the earlier pending file")
	}

	if err := RemovePending(state); err != nil {
		t.Fatal(err)
	}
	if err := RemovePending(state); err != nil {
		t.Fatalf("removing an absent pending file: %v", err)
	}
	if _, err := LoadPending(state); !errors.Is(err, ErrNoPending) {
		t.Fatalf("after remove: %v", err)
	}
}

func TestPendingDamaged(t *testing.T) {
	p := validPending(t)
	good, err := json.Marshal(filePending(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"cut", good[:len(good)/2], ErrTruncated},
		{"garbage", []byte("#!"), ErrCorrupt},
		{"bad token hash", bytes.Replace(good, []byte(p.TokenHash), []byte("abc"), 1), ErrCorrupt},
		{"bad seed", bytes.Replace(good, []byte(p.Seed), []byte("SUAAAA"), 1), ErrCorrupt},
		{"newer format", bytes.Replace(good, []byte(`"format":1`), []byte(`"format":7`), 1), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			if err := os.WriteFile(PendingPath(state), tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadPending(state)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			msg := err.Error()
			if strings.Contains(msg, string(p.Seed)) {
				t.Fatal("message quotes the seed")
			}
			if !strings.Contains(msg, "pending enrolment") || !strings.Contains(msg, "Remove "+PendingPath(state)) {
				t.Fatalf("message does not say what to do about a pending file: %s", msg)
			}
		})
	}
	t.Run("directory in its place", func(t *testing.T) {
		state := t.TempDir()
		os.Mkdir(PendingPath(state), 0o700)
		if _, err := LoadPending(state); !errors.Is(err, ErrUnreadable) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestSavePendingRefusesInvalid(t *testing.T) {
	state := t.TempDir()
	p := validPending(t)
	p.TokenHash = "secret-looking"
	if err := SavePending(state, p); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Lstat(PendingPath(state)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("an invalid pending file was written")
	}
}
