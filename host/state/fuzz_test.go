package state

import (
	"os"
	"testing"
)

// FuzzStateLoad writes arbitrary bytes as applied.json. Load must not panic,
// must give exactly one of valid, unreadable, truncated or corrupt for a file
// that exists, and must only succeed with a state that passes Validate.
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
		if err := os.WriteFile(Path(state), data, 0o600); err != nil {
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
			if _, err := Load(state); err != nil {
				t.Fatalf("reload: %v", err)
			}
		}
	})
}
