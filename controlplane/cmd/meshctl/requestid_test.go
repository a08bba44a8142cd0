package main

import (
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestADeclarationWhoseOutcomeIsUnknownNamesItsRequestID (audit of commands run
// twice, interrupted and concurrent, finding 7): a declaration without an answer
// (exit 3) or interrupted after it was sent (exit 9) said to look before running it
// again, and run again it declared again: the control plane carries a request id out
// once, but meshctl made a new one for each run. Both now name the id it was sent
// under and the rerun with --request-id; --request-id itself is checked before
// anything is sent (exit 2).
func TestADeclarationWhoseOutcomeIsUnknownNamesItsRequestID(t *testing.T) {
	id := "3f6c0e5a9b1d2c4e8f7a6b5c4d3e2f1a"
	lost := fmt.Errorf("%w declare within 15s; it may have been carried out, or may still be (a leader waiting for a quorum that can write commits it once there is one): look (`meshctl nodes`) before running it again, and meshctl control status for the voters", operator.ErrNoAnswer)
	err := declareFailed(lost, declareRerun(id))
	if !strings.Contains(err.Error(), "sent under request id "+id) || !strings.Contains(err.Error(), "--request-id "+id) || !strings.Contains(err.Error(), "at most once") {
		t.Fatalf("no answer: %v", err)
	}
	if code := exitCode(io.Discard, "meshctl declare", err); code != exitUnreachable {
		t.Fatalf("no answer: exit %d, want %d", code, exitUnreachable)
	}
	refused := &api.Error{Code: api.CodeNotFound, Message: "no such node: web-9"}
	if got := declareFailed(refused, declareRerun(id)); got != error(refused) {
		t.Fatalf("a refusal became %v", got)
	}
	// Interrupted once sent: the exit 9 names it too.
	sent, rerun := new(atomic.Pointer[string]), new(atomic.Pointer[string])
	op, how := api.OpDeclare, declareRerun(id)
	sent.Store(&op)
	rerun.Store(&how)
	blocked := make(chan struct{})
	defer close(blocked)
	time.AfterFunc(200*time.Millisecond, func() { syscall.Kill(syscall.Getpid(), syscall.SIGINT) })
	err = stopOnSignal(true, new(atomic.Bool), sent, rerun, func() error { <-blocked; return nil })
	if err == nil || !strings.Contains(err.Error(), "may have been carried out") || !strings.Contains(err.Error(), "--request-id "+id) {
		t.Fatalf("interrupted: %v", err)
	}
	if code := exitCode(io.Discard, "meshctl declare", err); code != exitInterrupted {
		t.Fatalf("interrupted: exit %d, want %d", code, exitInterrupted)
	}
	// --request-id checked first.
	dir := t.TempDir()
	for _, args := range [][]string{
		{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--request-id", "3f6c"},
		{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--request-id", strings.Repeat("g", 32)},
		{"declare", "--data", dir, "--node", "web-1", "--file", "x.json", "--dry-run", "--request-id", id},
	} {
		if code, _, stderr := runCLI(args...); code != exitUsage || !strings.Contains(stderr, "request-id") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	older := fmt.Errorf("%w: older", operator.ErrRequestIDRefused)
	if code := exitCode(io.Discard, "meshctl declare", older); code != exitRefused {
		t.Fatalf("a control plane older than given ids: exit %d, want %d", code, exitRefused)
	}
}
