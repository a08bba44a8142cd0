package identity

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
)

// FuzzIdentityLoad writes arbitrary bytes as the identity file. Load must not
// panic, must land in exactly one of the states a present file can be in
// (valid, unreadable, truncated, corrupt), must only succeed with an identity
// that passes Validate and saves and loads back unchanged, and must never quote
// a seed in its error.
func FuzzIdentityLoad(f *testing.F) {
	id := validIdentity(f)
	good := fileBytes(f, id)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(append([]byte{}, good...), good...))
	f.Add(withField(f, id, "format", "2"))
	f.Add(withField(f, id, "ca_pin", `"00"`))
	f.Add(withField(f, id, "nkey_seed", `"`+string(validIdentity(f).Seed)+`"`))
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00"))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`[]`))

	// One directory for every input: a fresh one per input costs more than
	// the Load it surrounds, and inputs run one at a time in each process.
	state := f.TempDir()
	again := filepath.Join(f.TempDir(), "again")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(Path(state), data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Load(state)
		switch o := outcome(t, err); o {
		case "ok":
			if verr := got.Validate(); verr != nil {
				t.Fatalf("Load succeeded with an identity that fails Validate: %v", verr)
			}
			// What Load accepts, Save writes and Load reads back unchanged.
			if err := os.RemoveAll(again); err != nil {
				t.Fatal(err)
			}
			if err := Save(again, got); err != nil {
				t.Fatalf("Save of a loaded identity: %v", err)
			}
			back, err := Load(again)
			if err != nil || !back.EnrolledAt.Equal(got.EnrolledAt) {
				t.Fatalf("reload: %v, %v", back, err)
			}
			back.EnrolledAt, got.EnrolledAt = time.Time{}, time.Time{}
			if !reflect.DeepEqual(back, got) {
				t.Fatalf("reload changed the identity: %#v, was %#v", back, got)
			}
		case "truncated", "corrupt", "unreadable":
			if seed := seedIn(data); seed != "" && strings.Contains(err.Error(), seed) {
				t.Fatalf("error quotes the seed: %v", err)
			}
		default:
			t.Fatalf("a present file gave state %s: %v", o, err)
		}
	})
}

// seedIn returns the nkey_seed value of data if it is a real nkeys seed.
func seedIn(data []byte) string {
	var m struct {
		Seed string `json:"nkey_seed"`
	}
	if json.Unmarshal(data, &m) != nil {
		return ""
	}
	if _, err := nkeys.FromSeed([]byte(m.Seed)); err != nil {
		return ""
	}
	return m.Seed
}

// FuzzPendingLoad writes arbitrary bytes as the pending-enrolment file. LoadPending
// must not panic, must land in exactly one of the states a present file can be in,
// must only succeed with a pending enrolment that passes Validate and saves and
// loads back unchanged, and must never quote a seed in its error.
func FuzzPendingLoad(f *testing.F) {
	p := validPending(f)
	good, err := json.Marshal(filePending(p))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(append([]byte{}, good...), '}'))
	f.Add(append(append([]byte{}, good...), 0, 0))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte{})
	state := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(PendingPath(state), data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadPending(state)
		switch o := outcome(t, err); o {
		case "ok":
			if verr := got.Validate(); verr != nil {
				t.Fatalf("LoadPending succeeded with a pending enrolment that fails Validate: %v", verr)
			}
			if err := SavePending(state, got); err != nil {
				t.Fatalf("SavePending of a loaded pending enrolment: %v", err)
			}
			again, err := LoadPending(state)
			if err != nil || !again.CreatedAt.Equal(got.CreatedAt) {
				t.Fatalf("reload: %+v, %v", again, err)
			}
			again.CreatedAt, got.CreatedAt = time.Time{}, time.Time{}
			if again != got {
				t.Fatalf("reload changed the pending enrolment: %+v, was %+v", again, got)
			}
		case "truncated", "corrupt", "unreadable":
			if seed := seedIn(data); seed != "" && strings.Contains(err.Error(), seed) {
				t.Fatalf("error quotes the seed: %v", err)
			}
		default:
			t.Fatalf("a present file gave state %s: %v", o, err)
		}
	})
}

// TestPendingOverTheCap: a pending-enrolment file over MaxFileSize is corrupt (not
// read whole), and one at the cap loads.
func TestPendingOverTheCap(t *testing.T) {
	p := validPending(t)
	good, err := json.Marshal(filePending(p))
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	over := append(append([]byte{}, good...), make([]byte, MaxFileSize)...)
	for i := len(good); i < len(over); i++ {
		over[i] = ' '
	}
	if err := os.WriteFile(PendingPath(state), over, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPending(state); outcome(t, err) != "corrupt" {
		t.Fatalf("over the cap: %v", err)
	}
	if err := os.WriteFile(PendingPath(state), over[:MaxFileSize], 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadPending(state); err != nil || got.Seed != p.Seed {
		t.Fatalf("at the cap: %v", err)
	}
}
