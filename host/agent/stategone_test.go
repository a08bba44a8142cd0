package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"testing"

	"mesh/host/state"
	"mesh/host/wire"
)

// TestAStateDirectoryRemovedIsSaidNotMadeAgain: the state directory removed while
// the agent runs (rm -rf to "reset" the machine, a clean-up script) was made again
// by the next save with applied.state alone, and nothing said so: the agent stayed
// healthy, and its next start failed, not enrolled. Now the save (of a change, or
// tried at a heartbeat without one) is refused, the directory is not made, the log
// says once what happened and what it means, and the node reports state_not_saved;
// the directory put back, the next heartbeat saves and the report clears.
func TestAStateDirectoryRemovedIsSaidNotMadeAgain(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "declared")); err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	f.a.noticeStateGone() // a heartbeat, the directory in place
	if logged.Len() != 0 || f.a.unsaved {
		t.Fatalf("a heartbeat with the directory in place: unsaved %t, logged:\n%s", f.a.unsaved, logged.String())
	}

	away := f.dir + ".away"
	if err := os.Rename(f.dir, away); err != nil {
		t.Fatal(err)
	}
	f.a.noticeStateGone() // the next heartbeat
	st := reported(t, f.a)
	if st.Error == nil || st.Error.Code != wire.StatusStateNotSaved || !strings.Contains(st.Error.Message, "identity.json") ||
		!strings.Contains(st.Error.Message, "removed or moved away") {
		t.Fatalf("the mesh is told %+v, want state_not_saved saying the directory and identity.json are gone", st.Error)
	}
	if u := f.a.linkStatus().Unsaved; u == nil || !strings.Contains(u.Error, "removed or moved away") {
		t.Fatalf("the agent's status says %+v, want it unsaved and why", u)
	}
	f.a.applied.HooksPending = []string{"etc/app.conf"} // a change to save
	f.a.save()
	for range 3 {
		f.a.saveAgain()
		f.a.noticeStateGone()
	}
	if _, err := os.Lstat(f.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the state directory was made again: %v", err)
	}
	out := logged.String()
	if n := strings.Count(out, "the state directory was removed or replaced while the agent ran"); n != 1 ||
		!strings.Contains(out, "will not start again") || strings.Contains(out, "could not persist the applied state") {
		t.Fatalf("logged %d times, want once, saying what it means:\n%s", n, out)
	}

	if err := os.Rename(away, f.dir); err != nil {
		t.Fatal(err)
	}
	f.a.saveAgain()
	if st := reported(t, f.a); st.Error != nil || f.a.unsaved {
		t.Fatalf("the directory back: reported %+v, unsaved %t", st.Error, f.a.unsaved)
	}
	if on, err := state.Load(f.dir); err != nil || len(on.HooksPending) != 1 {
		t.Fatalf("the directory back, on record: %+v, %v", on, err)
	}
}
