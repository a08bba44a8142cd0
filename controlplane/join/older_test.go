package join

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
)

// TestResumesAJoinOfTheReleasePoint: join-pending.json as `meshctl join` of the
// release point 7132ef2 left it when killed after admission began
// (testdata/0.1.0-7132ef2, with the control token it was run with) is read by this
// version's strict reader (decision 0024) and its keys are presented again, so that
// the join resumes across the upgrade: it is neither refused as unusable
// (ErrDataDir) nor replaced by new keys, which the mesh would refuse as a token used
// already. Its brokers (127.0.0.1:27101, ...) do not answer here: the join stops at
// the connection, after the keys were taken.
func TestResumesAJoinOfTheReleasePoint(t *testing.T) {
	fixture := filepath.Join("testdata", "0.1.0-7132ef2")
	pending, err := os.ReadFile(filepath.Join(fixture, pendingFile))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(fixture, "control.token"))
	if err != nil {
		t.Fatal(err)
	}
	d := datadir.Dir(t.TempDir())
	write(t, d.Path(pendingFile), string(pending))
	// The token was minted at 15:49:31 for 15 minutes.
	minted := time.Date(2026, 12, 3, 15, 50, 0, 0, time.UTC)
	var out strings.Builder
	err = Join(t.Context(), Options{Dir: d, Token: string(tok), Out: &out, Now: func() time.Time { return minted }})
	if err == nil || errors.Is(err, ErrDataDir) || errors.Is(err, ErrToken) {
		t.Fatalf("want the join to stop at the connection, got %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "unreachable") {
		t.Fatalf("the join did not reach the connection step:\n%s", out.String())
	}
	if after, _ := os.ReadFile(d.Path(pendingFile)); !bytes.Equal(after, pending) {
		t.Fatal("the older pending join was replaced: its keys would be refused by the mesh that recorded them")
	}
}
