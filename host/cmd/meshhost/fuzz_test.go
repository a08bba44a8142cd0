package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/host/agent"
)

// TestRevocationRecordDamaged: a revocation record cut short, over its cap or not a
// record is refused as unusable, by status and by run, and left as it is.
func TestRevocationRecordDamaged(t *testing.T) {
	dir, id := enrolled(t)
	if err := recordRevocation(dir, id, &agent.RevokedError{At: time.Now()}, time.Now()); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(revokedPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"cut short":          good[:len(good)/2],
		"over the cap":       append(bytes.Clone(good), bytes.Repeat([]byte(" "), maxRevokedFile)...),
		"not JSON":           []byte("revoked\n"),
		"an array":           []byte("[]"),
		"signed as a string": bytes.Replace(good, []byte(`"signed": true`), []byte(`"signed": "yes"`), 1),
		// encoding/json alone reads these, the last member winning and a name
		// matched whatever its case: not a record this agent wrote.
		"signed twice":             bytes.Replace(good, []byte(`{`), []byte(`{"signed": false,`), 1),
		"a member in another case": bytes.Replace(good, []byte(`"signed"`), []byte(`"Signed"`), 1),
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(revokedPath(dir), data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, _, err := loadRevocation(dir, id); !errors.Is(err, errRecordUnusable) {
				t.Fatalf("loadRevocation: %v, want errRecordUnusable", err)
			}
			if code, _, stderr := runCLI("", nil, "status", "--state", dir); code == exitOK || code == exitRevoked || !strings.Contains(stderr, "remove it") {
				t.Fatalf("status: exit %d: %s", code, stderr)
			}
			if after, _ := os.ReadFile(revokedPath(dir)); !bytes.Equal(after, data) {
				t.Fatal("the unusable record was changed")
			}
		})
	}
}

// FuzzLoadRevocation: arbitrary bytes as revoked.json. loadRevocation must not
// panic, must refuse only as unusable, and a record it returns is about this very
// identity and encodes back into one it reads the same.
func FuzzLoadRevocation(f *testing.F) {
	dir, id := enrolled(f)
	if err := recordRevocation(dir, id, &agent.RevokedError{At: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}, time.Now()); err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(revokedPath(dir))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"public_key":"` + id.PublicKey + `","signed":false}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(revokedPath(dir), data, 0o600); err != nil {
			t.Fatal(err)
		}
		r, ok, err := loadRevocation(dir, id)
		if err != nil {
			if !errors.Is(err, errRecordUnusable) || ok {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		if !ok {
			return
		}
		if r.PublicKey != id.PublicKey {
			t.Fatalf("a record about key %q taken for this identity's", r.PublicKey)
		}
		out, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(revokedPath(dir), out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, ok, err := loadRevocation(dir, id)
		if err != nil || !ok || again.Signed != r.Signed || !again.At.Equal(r.At) || again.Reason != r.Reason {
			t.Fatalf("round trip: %+v, %v, %v; was %+v", again, ok, err, r)
		}
	})
}
