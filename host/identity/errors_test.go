package identity

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnrollingAfreshRemovesTheStateDirectory (a docs walkthrough): an identity in
// the way, or a damaged one, was said to go by removing identity.json alone, and the
// revoked node's applied declaration, its secrets included, stayed in the state
// directory beside the next enrolment's identity. The advice names the whole
// directory, as the revocation's does.
func TestEnrollingAfreshRemovesTheStateDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir), []byte(`{"version":`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, damaged := Load(dir)
	for name, err := range map[string]error{
		"already enrolled": &EnrolledError{Path: Path(dir), Mesh: "demo", Node: "web-1"},
		"damaged":          damaged,
	} {
		msg := err.Error()
		if !strings.Contains(msg, "remove the state directory "+dir+" (or move it away: it holds the node's applied declaration, secrets included") ||
			strings.Contains(msg, "remove "+Path(dir)) || strings.Contains(msg, "remove the file") {
			t.Errorf("%s: %s", name, msg)
		}
	}
	if got := StartOver(filepath.Join("/var", "lib", "meshhost")); !strings.HasPrefix(got, "remove the state directory /var/lib/meshhost ") {
		t.Errorf("StartOver: %s", got)
	}
}
