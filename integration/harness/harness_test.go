package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recordingTB is a test that records what the harness logs and runs its cleanups
// when told, so that a failure can be staged without failing the real test.
type recordingTB struct {
	testing.TB
	failed   bool
	logs     []string
	cleanups []func()
}

func (r *recordingTB) Helper()                 {}
func (r *recordingTB) Failed() bool            { return r.failed }
func (r *recordingTB) Cleanup(f func())        { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Logf(f string, a ...any) { r.logs = append(r.logs, fmt.Sprintf(f, a...)) }

func (r *recordingTB) end() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestFailedTestShowsEachProcessOutput(t *testing.T) {
	for _, failed := range []bool{false, true} {
		r := &recordingTB{TB: t, failed: failed}
		p := Start(r, nil, "sh", "-c", "for i in $(seq 1 200); do echo line $i; done; exec sleep 30")
		p.WaitOutput(t, "line 200", 10*time.Second)
		r.end()
		if !failed {
			if len(r.logs) != 0 {
				t.Fatalf("a passing test logged the process's output: %q", r.logs)
			}
			continue
		}
		if len(r.logs) != 1 {
			t.Fatalf("a failed test logged %d entries, want the process's output once", len(r.logs))
		}
		log := r.logs[0]
		for _, want := range []string{"sh -c", "[120 earlier lines]", "line 121\n", "line 200"} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %q:\n%s", want, log)
			}
		}
		if strings.Contains(log, "line 120\n") {
			t.Errorf("the log shows more than the last %d lines:\n%s", failureLines, log)
		}
	}
}

func TestLastLines(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 3, ""},
		{"a\nb\n", 3, "a\nb"},
		{"a\nb\nc\nd", 2, "[2 earlier lines]\nc\nd"},
	} {
		if got := lastLines(tt.in, tt.n); got != tt.want {
			t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
