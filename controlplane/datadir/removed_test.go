package datadir

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestRemovalRecord(t *testing.T) {
	d := Dir(t.TempDir())
	if err := d.CheckNotRemoved(); err != nil {
		t.Fatalf("a directory without the record: %v", err)
	}
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	if err := d.MarkRemoved("cp-2", at); err != nil {
		t.Fatal(err)
	}
	// A second mark keeps the first record.
	if err := d.MarkRemoved("cp-2", at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	err := d.CheckNotRemoved()
	var re *RemovedError
	if !errors.Is(err, ErrRemoved) || !errors.As(err, &re) || re.Removal.Node != "cp-2" || !re.Removal.At.Equal(at) {
		t.Fatalf("CheckNotRemoved = %v (%+v), want the first record", err, re)
	}

	// Whatever stands in the file, it says the node was removed: only MarkRemoved
	// writes it.
	for name, content := range map[string]string{
		"truncated": `{"node":"cp-2","at":"2026-`,
		"empty":     "",
		"oversized": `{"node":"` + strings.Repeat("x", 1<<20) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			d := Dir(t.TempDir())
			if err := os.WriteFile(d.Path(RemovedFile), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := d.CheckNotRemoved(); !errors.Is(err, ErrRemoved) {
				t.Fatalf("CheckNotRemoved = %v, want ErrRemoved", err)
			}
		})
	}
}
