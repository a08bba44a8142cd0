package identity

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

// FuzzIdentityLoad writes arbitrary bytes as the identity file. Load must not
// panic, must land in exactly one of the states a present file can be in
// (valid, unreadable, truncated, corrupt), must only succeed with an identity
// that passes Validate, and must never quote a seed in its error.
func FuzzIdentityLoad(f *testing.F) {
	id := validIdentity(f)
	good := fileBytes(f, id)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(append(append([]byte{}, good...), good...))
	f.Add(withField(f, id, "format", "2"))
	f.Add(withField(f, id, "ca_pin", `"00"`))
	f.Add(withField(f, id, "nkey_seed", `"`+validIdentity(f).Seed+`"`))
	f.Add([]byte{})
	f.Add([]byte("\x00\x00\x00"))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`[]`))

	// One directory for every input: a fresh one per input costs more than
	// the Load it surrounds, and inputs run one at a time in each process.
	state := f.TempDir()
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
