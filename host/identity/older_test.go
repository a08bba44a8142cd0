package identity

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoadFilesOfTheReleasePoint: identity.json and enrol-pending.json as the agent
// of the release point 7132ef2 wrote them (testdata/0.1.0-7132ef2: an enrolled host,
// and an enrolment killed after its key was saved) load with this version's
// readers, which since refuse a member twice, a name in another case and bytes that
// are not UTF-8 (decision 0024): an upgraded agent must run on the state directory
// the older one left, and a re-run of the enrolment must present the same key.
func TestLoadFilesOfTheReleasePoint(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{FileName, PendingFileName} {
		data, err := os.ReadFile(filepath.Join("testdata", "0.1.0-7132ef2", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	id, kp, err := LoadKeyPair(dir)
	if err != nil {
		t.Fatalf("the older identity file is refused: %v", err)
	}
	if id.Node != "web-1" || id.Mesh != "fixture" || kp == nil {
		t.Fatalf("loaded %v", id)
	}
	p, err := LoadPending(dir)
	if err != nil {
		t.Fatalf("the older pending enrolment is refused: %v", err)
	}
	if p.Node != "db-1" || p.Mesh != "fixture" {
		t.Fatalf("loaded %v", p)
	}
	if _, err := p.KeyPair(); err != nil {
		t.Fatal(err)
	}
}
