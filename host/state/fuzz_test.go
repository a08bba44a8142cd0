package state

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// FuzzStateLoad writes arbitrary bytes as the legacy applied.json. Load must not panic,
// must give exactly one of valid, unreadable, truncated or corrupt for a file
// that exists, and must only succeed with a state that passes Validate and that
// Save writes into a file Load reads back unchanged.
func FuzzStateLoad(f *testing.F) {
	good := fileOf(f, sample())
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add(fileOf(f, Applied{Format: FormatVersion}))
	f.Add([]byte(`{"format":1,"have_applied":true}`))
	f.Add([]byte(`{"format":1,"managed":["../x"]}`))
	f.Add([]byte{})
	f.Add([]byte("\x00"))
	// One directory for all inputs: inputs run one at a time per process.
	state := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		os.Remove(Path(state)) // what an earlier input's Save wrote
		if err := os.WriteFile(LegacyPath(state), data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := Load(state)
		if outcome(t, err) == "ok" {
			if verr := a.Validate(); verr != nil {
				t.Fatalf("Load succeeded with an invalid state: %v", verr)
			}
			// What Load accepts, Save must write back and Load read again.
			if err := Save(state, a); err != nil {
				t.Fatalf("Save of a loaded state: %v", err)
			}
			back, err := Load(state)
			if err != nil {
				t.Fatalf("reload: %v", err)
			}
			// Compared as encoding/json writes them: the same times in the same
			// zones, an empty list and none told apart where the file tells them.
			want, _ := json.Marshal(a)
			if got, _ := json.Marshal(back); !bytes.Equal(got, want) {
				t.Fatalf("reload changed the state:\n%s\nwas\n%s", got, want)
			}
		}
	})
}

// FuzzStateFile writes arbitrary bytes as applied.state. Load must not panic, must
// give exactly one of valid, truncated or corrupt, and must only succeed with a state
// that passes Validate; a Store must then write on from it, and Load read that back.
func FuzzStateFile(f *testing.F) {
	js := mustJSONf(f, sample())
	one := make([]byte, 2*pageSize)
	appendRecord(one[:0], 1, js)
	two := append([]byte(nil), one...)
	appendRecord(two[pageSize:pageSize], 2, js)
	f.Add(one)
	f.Add(two)
	f.Add(one[:pageSize+10])
	f.Add(appendRecord(nil, 1, js))
	f.Add([]byte{})
	state := fuzzDir(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(Path(state), data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := Load(state)
		if o := outcome(t, err); o == "unreadable" {
			t.Fatalf("bytes in a regular file read as unreadable: %v", err)
		} else if o != "ok" {
			return
		}
		if verr := a.Validate(); verr != nil {
			t.Fatalf("Load succeeded with an invalid state: %v", verr)
		}
		s := NewStore(state)
		a.Version++
		if err := s.Save(a); err != nil {
			t.Fatalf("Save after a loaded state: %v", err)
		}
		if got, err := Load(state); err != nil || got.Version != a.Version {
			t.Fatalf("reload: v%d, %v", got.Version, err)
		}
	})
}

func mustJSONf(f *testing.F, a Applied) []byte {
	js, err := NewStore(f.TempDir()).encode(a)
	if err != nil {
		f.Fatal(err)
	}
	return js
}

// fuzzDir is a directory on tmpfs when there is one: an input that loads is saved
// again, and flushes to a real disk would slow the fuzzer a hundredfold.
func fuzzDir(f *testing.F) string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "state-fuzz-"); err == nil {
			f.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return f.TempDir()
}
