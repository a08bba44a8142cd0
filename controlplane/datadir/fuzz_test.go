package datadir

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// testKeys returns n Ed25519 keys from fixed seeds.
func testKeys(t testing.TB, n int) []ed25519.PrivateKey {
	t.Helper()
	var keys []ed25519.PrivateKey
	for i := range n {
		keys = append(keys, ed25519.NewKeyFromSeed(bytes.Repeat([]byte{byte(i + 1)}, ed25519.SeedSize)))
	}
	return keys
}

// TestSigningKeysCutShort: a signing-key file cut within its newest key is refused
// as cut short. Before, the keys before the cut were returned and the node took
// the older key for the newest, signing with a key the mesh may have retired.
func TestSigningKeysCutShort(t *testing.T) {
	keys := testKeys(t, 2)
	data, err := EncodeSigningKeys(keys)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := EncodeSigningKey(keys[0])
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"white space", []byte("\n\n"), ErrTruncated},
		{"cut within the second key", data[:len(first)+40], ErrTruncated},
		{"cut before the second key's end line", data[:len(data)-10], ErrTruncated},
		{"cut within the first key", data[:30], ErrTruncated},
		{"garbage after the keys", append(bytes.Clone(data), "garbage\n"...), ErrCorrupt},
		{"no PEM at all", []byte("garbage"), ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSigningKeys(tc.data)
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("%d keys, %v; want %v", len(got), err, tc.want)
			}
		})
	}
	// The whole file, with the white space an editor leaves, is read.
	got, err := ParseSigningKeys(append(append([]byte("\n"), data...), "\n\n"...))
	if err != nil || len(got) != 2 || !got[1].Equal(keys[1]) {
		t.Fatalf("the whole file: %d keys, %v", len(got), err)
	}
	// Through the directory, a cut file is refused and stays as it was.
	d := Dir(t.TempDir())
	cut := data[:len(data)-10]
	if err := os.WriteFile(d.Path(SigningKeyFile), cut, 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := d.LoadSigningKey(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("LoadSigningKey of a cut file: %x, %v", k, err)
	}
	if after, _ := os.ReadFile(d.Path(SigningKeyFile)); !bytes.Equal(after, cut) {
		t.Fatal("the refused file was changed")
	}
}

// TestReadFileCap: every file the directory reads is refused past MaxFileSize,
// after reading one byte more than the cap, and left as it is.
func TestReadFileCap(t *testing.T) {
	d := Dir(t.TempDir())
	for _, name := range []string{CACertFile, SigningKeyFile, AdminCredsFile, CurveKeyFile, ConfigFile} {
		path := d.Path(name)
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		// A gigabyte, sparse: it costs no disk, and reading it whole would show.
		if err := os.Truncate(path, 1<<30); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	checks := map[string]func() error{
		"ReadFile":        func() error { _, err := d.ReadFile(CACertFile); return err },
		"LoadSigningKeys": func() error { _, err := d.LoadSigningKeys(); return err },
		"LoadOperatorKey": func() error { _, err := d.LoadOperatorKey(); return err },
		"LoadCurveKey":    func() error { _, err := d.LoadCurveKey(); return err },
		"LoadConfig":      func() error { _, err := d.LoadConfig(); return err },
		"ReadConfigRaw":   func() error { _, err := d.ReadConfigRaw(); return err },
	}
	for name, check := range checks {
		if err := check(); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s of a huge file: %v, want ErrTooLarge", name, err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("refusing huge files took %v: were they read whole?", took)
	}
	if fi, err := os.Stat(d.Path(ConfigFile)); err != nil || fi.Size() != 1<<30 {
		t.Fatalf("the refused file changed: %v", err)
	}
	// At the cap is not over it.
	if err := os.WriteFile(d.Path(CACertFile), make([]byte, MaxFileSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := d.ReadFile(CACertFile); err != nil || len(data) != MaxFileSize {
		t.Fatalf("a file of exactly the cap: %d bytes, %v", len(data), err)
	}
}

// FuzzParseSigningKeys: arbitrary bytes as signing-key.pem. It must not panic, must
// refuse only with ErrTruncated or ErrCorrupt, and what it accepts encodes back
// into a file that parses to the same keys.
func FuzzParseSigningKeys(f *testing.F) {
	keys := testKeys(f, 3)
	all, _ := EncodeSigningKeys(keys)
	one, _ := EncodeSigningKey(keys[0])
	f.Add(all)
	f.Add(one)
	f.Add(all[:len(all)-20])
	f.Add(append(bytes.Clone(one), "trailing"...))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseSigningKeys(data)
		if err != nil {
			if got != nil || !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%d keys, error of no known kind: %v", len(got), err)
			}
			return
		}
		if len(got) == 0 {
			t.Fatal("accepted no key")
		}
		for _, k := range got {
			if len(k) != ed25519.PrivateKeySize {
				t.Fatalf("accepted a key of %d bytes", len(k))
			}
		}
		enc, err := EncodeSigningKeys(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseSigningKeys(enc)
		if err != nil || len(again) != len(got) {
			t.Fatalf("re-encoded keys: %d, %v", len(again), err)
		}
		for i := range got {
			if !again[i].Equal(got[i]) {
				t.Fatalf("key %d changed in the round trip", i)
			}
		}
	})
}

// FuzzParseConfig: arbitrary bytes as mesh.json. It must not panic, must refuse
// only with ErrTruncated or ErrCorrupt, and what it accepts is one JSON object
// whose configuration encodes and parses back unchanged.
func FuzzParseConfig(f *testing.F) {
	c := validConfig()
	c.Format = ConfigFormat
	good, _ := json.MarshalIndent(c, "", "  ")
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(bytes.Clone(good), '}'))
	f.Add([]byte(`{"format":1,"joining":true,"brokers":null}`))
	f.Add([]byte(`null`))
	f.Add([]byte(` `))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if errors.Is(err, ErrTruncated) && errors.Is(err, ErrCorrupt) {
				t.Fatalf("both cut short and corrupt: %v", err)
			}
			return
		}
		if !json.Valid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			t.Fatalf("accepted what is not one JSON object: %q", data)
		}
		enc, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseConfig(enc)
		if err != nil || !reflect.DeepEqual(got, again) {
			t.Fatalf("round trip: %+v, %v; was %+v", again, err, got)
		}
	})
}

// FuzzKeyFiles: arbitrary bytes as admin.creds and as control-curve.nk. Neither
// reader may panic; each refuses with ErrCorrupt (a curve key file with nothing in
// it but space: ErrTruncated), naming the file; an accepted creds file names a user
// key, and an accepted curve key is one.
func FuzzKeyFiles(f *testing.F) {
	f.Add([]byte("-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.sig\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\nSUAAVDT3FW6QOAD5NBNWBTRBI3RQSF5EKZHSXKMTQJVN7ZKHLSKL6RUOEI\n------END USER NKEY SEED------\n"))
	f.Add([]byte("SXAAXMRAEP6JWWHNB6IKFL554IE6LZVT6EY5MBRICPILTLOPHAG73I3YX4\n"))
	f.Add([]byte{})
	dir := Dir(f.TempDir())
	f.Fuzz(func(t *testing.T, data []byte) {
		if pub, err := CredsUserKey(data); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("creds: error of no known kind: %v", err)
			}
		} else if !nkeys.IsValidPublicUserKey(pub) {
			t.Fatalf("creds accepted with key %q", pub)
		}
		if err := os.WriteFile(dir.Path(CurveKeyFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		kp, err := dir.LoadCurveKey()
		if err != nil {
			empty := len(bytes.TrimSpace(data)) == 0
			if !errors.Is(err, ErrCorrupt) && !(empty && errors.Is(err, ErrTruncated)) || !strings.Contains(err.Error(), dir.Path(CurveKeyFile)) {
				t.Fatalf("curve key: error of no known kind: %v", err)
			}
			return
		}
		if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicCurveKey(pub) {
			t.Fatalf("curve key accepted: %q, %v", pub, err)
		}
	})
}
