package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"mesh/host/agent"
	"mesh/host/dirlock"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/host/statedir"
	"mesh/host/wire"
)

// Bounds of `hooks retry --timeout`: hooks run one after another, each for at most
// an hour, but a wait past that is a typo.
const (
	defaultRetryTimeout = 5 * time.Minute
	maxRetryTimeout     = 2 * time.Hour
)

// errHooksFailed is `meshhost hooks retry`'s outcome when a hook failed again.
var errHooksFailed = errors.New("a hook failed again")

// errHooksFileUnusable: the agent read the hooks file again for the retry, and
// cannot use it.
var errHooksFileUnusable = errors.New("the hooks file, read again, cannot be used")

// cmdHooks is `meshhost hooks retry`: the one subcommand of hooks.
func cmdHooks(args []string, cio *cliIO) error {
	if len(args) == 0 || args[0] != "retry" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			// hooks has one command: its help is retry's, flags and exit codes too.
			return cmdHooks([]string{"retry", "--help"}, cio)
		}
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			// As for a misspelt command: `hooks retyr` is retry's.
			hint := ""
			if len(suggest(args[0], []string{"retry"})) > 0 {
				hint = " (did you mean hooks retry?)"
			}
			return usageError{fmt.Sprintf("unknown command %q%s; usage: meshhost hooks retry --state DIR [--timeout D] [--json]", "hooks "+args[0], hint)}
		}
		return usageError{"usage: meshhost hooks retry --state DIR [--timeout D] [--json]"}
	}
	fs := newFlags("hooks retry", cio)
	stateDir := fs.String("state", "", "state directory of the running agent (required)")
	timeout := durationFlag(fs, "timeout", defaultRetryTimeout, "how long to wait for the hooks to run, 1s to 2h (a hook's own timeout is at most 1h)")
	asJSON := fs.Bool("json", false, "print the outcome as JSON")
	if err := parse(fs, args[1:], cio); err != nil {
		return err
	}
	if *stateDir == "" {
		return usageError{"--state is required"}
	}
	if err := checkBetween("timeout", *timeout, time.Second, maxRetryTimeout, defaultRetryTimeout); err != nil {
		return err
	}
	// As run and status: a control node's data directory is not an agent's.
	if err := refuseControlDir(*stateDir); err != nil {
		return err
	}
	// A directory that does not exist is identity.Load's to say, as for status and
	// run: not enrolled, and how to enrol (it said "stat DIR: no such file or
	// directory", exit 1).
	if err := statedir.Check(*stateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// A directory that holds no enrolled node is not an agent's (a mistyped
	// --state): said as status says it (exit 5), not "nothing to run" (exit 0).
	if _, err := identity.Load(*stateDir); err != nil {
		return err
	}
	applied, err := state.Load(*stateDir)
	if err != nil {
		return err
	}
	// The agent records what it owes before it runs it. Nothing on record, it is
	// asked all the same: it reads the hooks file again (it answered "nothing to
	// run" without, and an operator who had edited the file believed it live).
	owed := len(applied.HooksPending) > 0 || len(applied.HooksFailed) > 0 || applied.LastErrorCode == wire.StatusHookFailed
	if owed {
		// The wait lasts as long as the hooks run, up to --timeout: said before it
		// starts, on stderr, so a terminal shows what it waits for (it was silent).
		fmt.Fprintf(cio.stderr, "asking the agent to run the hooks %s (waiting up to %s for their outcome)\n", owedText(applied), *timeout)
	}
	out, err := retryInterruptibly(*stateDir, *timeout)
	if errors.Is(err, agent.ErrNoAgent) {
		return noAgentAnswers(cio, err, *stateDir, applied, owed, *asJSON)
	}
	if err != nil {
		return err
	}
	if out.ConfigError != "" {
		if *asJSON {
			if err := writeJSONTo(cio, out); err != nil {
				return err
			}
		}
		return fmt.Errorf("%w: %s; nothing ran, and the agent keeps the hooks it read before: mend the file, then run this again", errHooksFileUnusable, out.ConfigError)
	}
	if *asJSON {
		if err := writeJSONTo(cio, out); err != nil {
			return err
		}
	} else {
		printRetried(cio, out)
	}
	if len(out.Failed) > 0 {
		return fmt.Errorf("%w: %s", errHooksFailed, out.Error)
	}
	return nil
}

// notReadNoAgent is NotReloaded when no agent runs: nothing owed, nothing to ask.
const notReadNoAgent = "meshhost run is not running: it reads the hooks file as it starts"

// noAgentAnswers is hooks retry's outcome when no agent answers on the state
// directory's socket: with nothing owed and no agent running, there is nothing to
// run and no file to read again (exit 0); otherwise whether an agent runs at all,
// and what runs the owed hooks or reads the file.
func noAgentAnswers(cio *cliIO, err error, stateDir string, applied state.Applied, owed, asJSON bool) error {
	lock, lerr := dirlock.AcquireExisting("state directory", stateDir, "meshhost hooks retry")
	if lerr == nil {
		lock.Release()
		if !owed {
			if asJSON {
				return writeJSONTo(cio, agent.HooksOutcome{Nothing: true, NotReloaded: notReadNoAgent})
			}
			fmt.Fprintf(cio.stdout, "no hook is owed or failed: nothing to run; meshhost run is not running on %s: it reads the hooks file as it starts\n", stateDir)
			return nil
		}
		return fmt.Errorf("meshhost run is not running on %s: it runs the owed hooks (for %s) when it starts (systemctl start meshhost)",
			stateDir, listShort(applied.HooksPending, 5))
	}
	restart := "restarting it runs the owed hooks"
	if !owed {
		restart = "no hook is owed or failed, and the hooks file was not read again: restarting it reads the file"
	}
	return fmt.Errorf("%w; the agent holding the state directory does not answer (one that could not make its socket says why in its log; or a version from before meshhost hooks retry): %s", err, restart)
}

// printRetried says a retry's outcome in words: what ran, what failed again, whose
// failure is cleared though it did not run, and whether the hooks file was read
// again.
func printRetried(cio *cliIO, out agent.HooksOutcome) {
	switch {
	case out.Nothing:
		fmt.Fprintln(cio.stdout, "no hook is owed or failed: nothing to run")
	case len(out.Ran) == 0 && len(out.Cleared) > 0:
		// The agent's log said so, and the answer said nothing (a walkthrough).
		fmt.Fprintf(cio.stdout, "no hook ran: the hooks file no longer runs %s for the paths that had failed; their failure is cleared\n", strings.Join(out.Cleared, ", "))
	case len(out.Ran) == 0:
		fmt.Fprintln(cio.stdout, "no hook matched the owed paths: nothing ran")
	case len(out.Failed) > 0:
		// "ran X" alone read as a success beside exit 1 (a docs walkthrough).
		fmt.Fprintf(cio.stdout, "ran %s; failed again: %s\n", strings.Join(out.Ran, ", "), strings.Join(out.Failed, ", "))
	default:
		fmt.Fprintf(cio.stdout, "ran %s\n", strings.Join(out.Ran, ", "))
	}
	if len(out.Ran) > 0 && len(out.Cleared) > 0 {
		fmt.Fprintf(cio.stdout, "not run: the hooks file no longer runs %s for the paths that had failed; their failure is cleared\n", strings.Join(out.Cleared, ", "))
	}
	if len(out.Owed) > 0 && len(out.Failed) == 0 {
		fmt.Fprintf(cio.stdout, "still owed: hooks for %s (queued since)\n", listShort(out.Owed, 5))
	}
	fmt.Fprintln(cio.stdout, hooksFileText(out))
	for _, w := range out.Warnings {
		fmt.Fprintf(cio.stdout, "warning: %s\n", w)
	}
	if out.Unreported {
		fmt.Fprintln(cio.stdout, "the agent cannot reach the mesh now: it reports this outcome once it does (meshhost status shows since when it has not)")
	}
}

// hooksFileText says whether the agent read the hooks file again for the retry, so
// that an operator who edited it knows whether it is live.
func hooksFileText(out agent.HooksOutcome) string {
	switch {
	case out.Reloaded:
		return "the hooks file was read again: the agent runs its hooks as the file has them now"
	case out.NotReloaded != "":
		return "the hooks file was not read again: " + out.NotReloaded
	default:
		// An agent older than this meshhost (upgraded, not restarted) does not
		// say, and reads the file only when something is owed.
		return "the agent did not say whether it read the hooks file again (it is older than this meshhost): restarting it (systemctl restart meshhost) reads the file"
	}
}

// owedText names what a retry runs, as the state on record says it: the hooks owed
// for the paths written, and those that failed.
func owedText(applied state.Applied) string {
	var parts []string
	if len(applied.HooksPending) > 0 {
		parts = append(parts, "owed for "+listShort(applied.HooksPending, 5))
	}
	if len(applied.HooksFailed) > 0 {
		parts = append(parts, "that failed ("+listShort(applied.HooksFailed, 5)+")")
	}
	if len(parts) == 0 {
		return "that failed"
	}
	return strings.Join(parts, " and ")
}

// errRetryInterrupted is `hooks retry` stopped by SIGINT or SIGTERM while it waited
// for the agent's answer (exit 9).
var errRetryInterrupted = errors.New("interrupted before the agent answered")

// retryInterruptibly is agent.RetryHooks, given up on SIGINT or SIGTERM: the agent
// runs the hooks on whatever the client does, so the wait is all that ends (it died
// with 130, saying nothing of the hooks).
func retryInterruptibly(stateDir string, timeout time.Duration) (agent.HooksOutcome, error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	type answer struct {
		out agent.HooksOutcome
		err error
	}
	got := make(chan answer, 1)
	go func() {
		out, err := agent.RetryHooks(stateDir, timeout)
		got <- answer{out, err}
	}()
	select {
	case a := <-got:
		return a.out, a.err
	case <-ctx.Done():
		return agent.HooksOutcome{}, fmt.Errorf("%w: the agent runs the hooks on; meshhost status --state %s shows their outcome", errRetryInterrupted, stateDir)
	}
}

// listShort joins the first n items of list, and says how many more there are.
func listShort(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(list[:n], ", "), len(list)-n)
}

// writeJSONTo writes v to stdout. v always encodes: an error is the output's, which
// run says as "the output could not be written", as for the text form.
func writeJSONTo(cio *cliIO, v any) error {
	enc := json.NewEncoder(cio.stdout)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return nil
}
