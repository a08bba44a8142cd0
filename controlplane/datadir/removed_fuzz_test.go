package datadir

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// FuzzRemoved: whatever removed.json holds (cut short, garbage, over the cap, not
// UTF-8, a record of another node), it says the node was removed: Removed never
// reads it as "not removed" nor fails, CheckNotRemoved is a *RemovedError that
// errors.Is ErrRemoved and prints without panicking, a record that decodes as
// JSON is the one given back, and MarkRemoved keeps the first record rather than
// writing over it.
func FuzzRemoved(f *testing.F) {
	f.Add([]byte(`{"node":"cp-2","at":"2026-12-06T09:52:21Z"}` + "\n"))
	f.Add([]byte(`{"node":"cp-2","at":"2026-`))
	f.Add([]byte(``))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"node":"cp-2","at":"0000-01-01T00:00:00+23:59"}`))
	f.Add([]byte(`{"node":"\u001b[2J","at":"9999-12-31T23:59:59-23:59"}`))
	f.Add([]byte(`{"node":"cp-2","node":"cp-3","Node":"x"}`))
	f.Add([]byte("\xff\xfe{}"))
	f.Add([]byte(`{"node":"` + strings.Repeat("x", maxRemovedSize) + `"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := Dir(t.TempDir())
		if err := os.WriteFile(d.Path(RemovedFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, ok, err := d.Removed()
		if err != nil || !ok {
			t.Fatalf("removed.json of %d bytes read as %+v, %v, %v: want removed", len(data), r, ok, err)
		}
		var want Removal
		switch {
		case len(data) > maxRemovedSize:
			want = Removal{Node: "?"}
		case json.Unmarshal(data, &want) != nil:
			want = Removal{Node: "?"}
		}
		if r.Node != want.Node || !r.At.Equal(want.At) {
			t.Fatalf("read %+v, the file says %+v", r, want)
		}
		err = d.CheckNotRemoved()
		var re *RemovedError
		if !errors.Is(err, ErrRemoved) || !errors.As(err, &re) || re.Removal.Node != r.Node {
			t.Fatalf("CheckNotRemoved = %v", err)
		}
		_ = err.Error()
		if err := d.MarkRemoved("cp-9", time.Unix(1, 0)); err != nil {
			t.Fatal(err)
		}
		if after, err := os.ReadFile(d.Path(RemovedFile)); err != nil || string(after) != string(data) {
			t.Fatalf("MarkRemoved wrote over the first record: %v", err)
		}
	})
}
