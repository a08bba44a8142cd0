//go:build unix

package dirlock

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLockHolderRecordIsReadWithinItsCap: a refused process reads the holder's
// record from the lock file it opened, at most a few KiB of it. A huge lock file, a
// record that is not one, or one that names no pid gives an InUseError without a
// pid, at once, and the file is left as it is.
func TestLockHolderRecordIsReadWithinItsCap(t *testing.T) {
	cases := []struct {
		name    string
		content string
		size    int64 // the file is then extended (sparsely) to this size
	}{
		{"a gigabyte", `{"pid":42,"command":"meshctl serve"}`, 1 << 30},
		{"just over the cap", `{"pid":42,"command":"meshctl serve"}` + strings.Repeat(" ", maxRecord), 0},
		{"cut short", `{"pid":42,"comm`, 0},
		{"not JSON", "42\n", 0},
		{"negative pid", `{"pid":-1,"command":"x"}`, 0},
		{"a command no holder writes", `{"pid":42,"command":"` + strings.Repeat("x", 300) + `"}`, 0},
		{"trailing data", `{"pid":42,"command":"meshctl serve"} {}`, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := dir(t.TempDir())
			mustLock(t, d, "meshctl serve")
			if err := os.WriteFile(d.Path(File), []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.size > 0 {
				if err := os.Truncate(d.Path(File), tc.size); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.Stat(d.Path(File))
			start := time.Now()
			_, err := d.Lock("meshctl join")
			var in *InUseError
			if !errors.As(err, &in) || in.PID != 0 || in.Command != "" {
				t.Fatalf("err = %#v", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("the refusal took %v: was the file read whole?", took)
			}
			if after, _ := os.Stat(d.Path(File)); after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
				t.Fatal("the refused process changed the lock file")
			}
		})
	}
	// The record as a holder writes it is read.
	d := dir(t.TempDir())
	mustLock(t, d, "meshctl serve")
	_, err := d.Lock("meshctl join")
	var in *InUseError
	if !errors.As(err, &in) || in.PID != os.Getpid() || in.Command != "meshctl serve" {
		t.Fatalf("err = %#v", err)
	}
}
