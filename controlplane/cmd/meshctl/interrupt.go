package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// interruptGrace is how long a command has, after SIGINT or SIGTERM, to stop by
// itself; then it exits anyway. Every file it writes is written whole (atomically),
// Raft's stores are crash-safe, and the data directory's lock is the kernel's, so an
// exit at any point leaves what a new run resumes.
const interruptGrace = 3 * time.Second

// interruptedError is the cause a signal cancels a command's context with; errors of a
// command stopped by it wrap it, and exit with exitInterrupted.
type interruptedError struct{ sig os.Signal }

func (e *interruptedError) Error() string { return "interrupted by " + signalName(e.sig) }

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return sig.String()
}

// signalContext is a context cancelled, with an *interruptedError as its cause, when
// SIGINT or SIGTERM arrives, or one of also. stop restores the signals' default
// behaviour.
func signalContext(also ...os.Signal) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM}, also...)...)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			cancel(&interruptedError{sig: sig})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

// interruptible runs f, which should return soon after ctx ends. An error f returns
// after a signal says it was interrupted. If f has not returned interruptGrace after
// the signal, interruptible returns without it: the caller exits, and with the
// process go f, whatever it was waiting for, and the locks it holds.
func interruptible(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return asInterrupted(ctx, err)
	case <-ctx.Done():
	}
	grace := time.NewTimer(interruptGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return asInterrupted(ctx, err)
	case <-grace.C:
		return &overdueError{cause: context.Cause(ctx)}
	}
}

// overdueError is interruptible's answer when f had not returned interruptGrace
// after the signal (cause): the command exits without it.
type overdueError struct{ cause error }

func (e *overdueError) Error() string {
	return fmt.Sprintf("%v; it did not stop within %s, so it exits anyway (every file it writes is whole: running it again resumes)", e.cause, interruptGrace)
}

// Unwrap is the signal's *interruptedError: exit 9, as a command interrupted.
func (e *overdueError) Unwrap() error { return e.cause }

// asInterrupted makes an error returned after a signal wrap the signal's
// *interruptedError (once), so that it exits with exitInterrupted.
func asInterrupted(ctx context.Context, err error) error {
	var ie *interruptedError
	if err == nil || errors.As(err, &ie) || !errors.As(context.Cause(ctx), &ie) {
		return err
	}
	return fmt.Errorf("%w: %w", ie, err)
}

// stopOnSignal runs f and returns when it does, or soon after SIGINT or SIGTERM
// arrives, without waiting for f longer than signalGrace: what it waits for (the
// control plane's answer, a node's convergence) is not the caller's to finish, and
// the process exits with f. Before, the signal's default killed the process with no
// word and status 130, where the exit codes promise 9. f finishing within the grace
// is its own outcome (an answer on its way in, a token being written out: exit 0 with
// the token shown, where it exited 9 "may have been carried out" after printing a
// good token). Otherwise a command that changes the mesh says that its change was
// carried out (carried, set once its result was shown), or may have been, and where
// to look (the op sent: sent), or that it changed nothing, when it sent no change
// (a body still being read, a dry run, a connection still being made). A change the
// command knows how to send again safely (rerun: a token cancellation with the ids it
// named) says so, as its exit 3 does.
func stopOnSignal(changes bool, carried *atomic.Bool, sent, rerun *atomic.Pointer[string], f func() error) error {
	ctx, stop := signalContext()
	defer stop()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	grace := time.NewTimer(signalGrace)
	defer grace.Stop()
	select {
	case err := <-done:
		return err
	case <-grace.C:
	}
	var op *string
	if sent != nil {
		op = sent.Load()
	}
	again := ""
	if rerun != nil {
		if how := rerun.Load(); how != nil {
			again = "; " + *how
		}
	}
	switch {
	case changes && carried != nil && carried.Load() && op != nil && *op == api.OpDeclare:
		// Interrupted while --wait waits: what it says must not read as "run it
		// again", which declares another version.
		return fmt.Errorf("%w after the change was carried out: the declaration stands (its versions are above), and waiting for its nodes did not finish: "+
			"to see where they are, run meshctl status, not declare again (that would declare another version)", context.Cause(ctx))
	case changes && carried != nil && carried.Load():
		return fmt.Errorf("%w after the change was carried out: what followed it did not finish", context.Cause(ctx))
	case changes && op != nil && *op == api.OpTokenCreate:
		return fmt.Errorf("%w before the command completed: the token may have been minted already, and never shown: look (%s); meshctl token --node NODE --replace mints another and cancels it", context.Cause(ctx), operator.LookAt(*op))
	case changes && op != nil && againIsSafe(*op):
		return fmt.Errorf("%w before the command completed: the change may have been carried out already; running it again is safe: it says what it finds done (or look: %s)%s",
			context.Cause(ctx), operator.LookAt(*op), againIsSafeExcept(*op))
	case changes && op != nil:
		return fmt.Errorf("%w before the command completed: the change may have been carried out already; look (%s) before running it again%s", context.Cause(ctx), operator.LookAt(*op), again)
	case changes && sent == nil:
		return fmt.Errorf("%w before the command completed: the change may have been carried out already; look (meshctl nodes, meshctl token list, meshctl signing-key status, meshctl control status) before running it again; "+
			"a token minted but never shown is pending: meshctl token --node NODE --replace mints another and cancels it", context.Cause(ctx))
	}
	return fmt.Errorf("%w before the command completed; it changed nothing", context.Cause(ctx))
}

// againIsSafe reports whether a change of op, run again after it was carried out,
// changes nothing more and says so (decision 0033: "nothing left to do"), so that an
// interrupted one is simply run again: a label set to the same values, a revocation
// of a node revoked, a control node removed, a retirement with nothing left to
// retire. (An operations audit found them telling the operator only to look first.)
func againIsSafe(op string) bool {
	switch op {
	case api.OpLabel, api.OpRevoke, api.OpControlRemove, api.OpSigningKeyRetire:
		return true
	}
	return false
}

// againIsSafeExcept is what running op again does beyond saying what it finds.
func againIsSafeExcept(op string) string {
	if op == api.OpRevoke {
		// Revoked since: another machine enrolled under the id is revoked too.
		return "; --key KEY revokes the node only while it holds KEY, not a machine enrolled under its id since"
	}
	return ""
}

// signalGrace is how long a command interrupted by a signal still has to finish by
// itself: an answer already on its way, a token being written out.
const signalGrace = 500 * time.Millisecond
