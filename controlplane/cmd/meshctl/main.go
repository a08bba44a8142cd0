// Command meshctl is the mesh's operator tool and control-plane daemon.
//
//	meshctl bootstrap --mesh demo --listen 127.0.0.1:7300 --data ./cp
//	meshctl serve     --data ./cp
//	meshctl token     --data ./cp --node web-1 --ttl 15m --out token.txt
//	meshctl declare   --data ./cp --node web-1 --file web.json
//	meshctl nodes     --data ./cp [--json]
//	meshctl revoke    --data ./cp web-1
//	meshctl demo
//
// Exit codes: 0 success; 1 failure; 2 usage error; 3 the control plane could not be
// reached, has no leader, did not answer, or its broker refused the login (a control
// node older than this meshctl, or another mesh's credentials); 4 the control plane refused the request
// (also: a join token refused or no broker proving its CA pin, operator credentials
// that may only read, a control token minted or a certificate renewed away from
// the CA key); 5 not
// converged (declare --wait, status, signing-key status), or a voter that does not
// answer or follow the leader (control status); 6 this control node was removed and will not
// serve again; 7 the data directory is not one the command can use (not a control
// node's: not bootstrapped or joined, or a join that did not complete; one of its
// files missing, corrupt, cut short or not a regular file; one this user cannot write; for
// serve, one whose keys, credentials or raft/ group or others may read, or that
// another user owns or others may write, or whose Raft log holds an entry of a newer
// meshctl or whose Raft store is damaged or lost, or whose certificate (tls.pem,
// ca.pem) expired or is not valid yet by this machine's clock; for bootstrap and join, one holding another mesh, another node,
// a joined node or unrelated files);
// 8 the data directory is in use by another process (serve, bootstrap, join); 9
// interrupted by SIGINT or SIGTERM before the command completed (serve: before it
// was ready); running it again resumes.
//
// The command line is parsed by cobra (docs/decisions/0007-the-command-line.md).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/operator"
	"mesh/controlplane/operatorcreds"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/host/dirlock"
	"mesh/host/statedir"
	"mesh/host/terminal"
	hosttoken "mesh/host/token"
	"mesh/host/writeerr"
	"mesh/tokenfmt"
)

// Exit codes. docs/operations.md lists them, and the systemd units name the ones
// that mean a person must act (RestartPreventExitStatus).
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitUnreachable  = 3
	exitRefused      = 4
	exitNotConverged = 5
	exitRemoved      = 6
	exitDataDir      = 7
	exitInUse        = 8
	exitInterrupted  = 9
)

// command is one meshctl subcommand.
type command struct {
	name    string
	aliases []string
	summary string
	usage   string // argument synopsis after the name
	// setup declares the command's flags (and completions) on c and returns the
	// function that runs it.
	setup func(c *cobra.Command, io *cliIO) func(args []string) error
	// ownSignals: the command stops by itself on SIGINT and SIGTERM, at a step a
	// new run resumes from (serve, bootstrap, join); any other returns at once,
	// exit 9, without waiting for what it was waiting for (stopOnSignal).
	ownSignals bool
	// changes: the command may change the mesh, so an interrupted one says to look
	// before running it again.
	changes bool
}

// cliIO is the command's standard streams and its view of the process.
type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// stderrIsTTY says whether progress may redraw a line in place.
	stderrIsTTY bool
	// stdinIsTTY says whether stdin is a terminal, where a token is pasted as one
	// line; hideInput then turns its echo off and returns what turns it back on
	// (nil: it cannot).
	stdinIsTTY bool
	hideInput  func() (restore func(), err error)
	// notify tells the service manager about the daemon's state (sd_notify); nil
	// means nobody is listening.
	notify func(state string) error
	// exit ends the process at once with a code, for what cannot unwind (Raft,
	// unable to record its term, would panic); nil leaves it to what comes next.
	exit func(code int)
	// carried records that the command's change was carried out and its result
	// shown (a token written out, a declaration's versions printed): a signal
	// after it interrupts only what follows (stopOnSignal). Shared by copies.
	carried *atomic.Bool
	// sent is the op of the first request that may change the mesh the
	// command sent (nil: none yet): a signal before it interrupts a command
	// that changed nothing. Shared by copies.
	sent *atomic.Pointer[string]
	// rerun is how the change sent may be sent again safely, once the command
	// knows it (the token ids a cancellation named, a declaration's request id):
	// an interrupted command says it (stopOnSignal), as its exit 3 does. Shared by
	// copies.
	rerun *atomic.Pointer[string]
}

// rerunWith records how the command's change may be sent again safely.
func (cio *cliIO) rerunWith(how string) {
	if cio.rerun != nil {
		cio.rerun.Store(&how)
	}
}

// carriedOut records that the command's change was carried out and shown.
func (cio *cliIO) carriedOut() {
	if cio.carried != nil {
		cio.carried.Store(true)
	}
}

// withStdout returns a copy of cio writing its standard output to w.
func (cio *cliIO) withStdout(w io.Writer) *cliIO {
	c := *cio
	c.stdout = w
	return &c
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func commands() []command {
	return []command{
		bootstrapCommand(),
		serveCommand(),
		checkCommand(),
		tokenCommand(),
		declareCommand(),
		nodesCommand(),
		statusCommand(),
		revokeCommand(),
		labelCommand(),
		joinCommand(),
		controlCommand(),
		signingKeyCommand(),
		operatorCommand(),
		demoCommand(),
		completionCommand(),
		versionCommand(),
	}
}

func main() {
	cio := &cliIO{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv,
		stderrIsTTY: isTerminal(os.Stderr),
		stdinIsTTY:  terminal.IsTerminal(os.Stdin),
		notify:      sdNotify,
		exit:        os.Exit,
	}
	if cio.stdinIsTTY {
		cio.hideInput = func() (func(), error) { return terminal.HideEcho(os.Stdin) }
	}
	os.Exit(run(os.Args[1:], cio))
}

// isTerminal reports whether f is a character device, as a terminal is.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// commandError is an error returned by a command's own code, as opposed to one
// cobra returns for a command line it cannot parse.
type commandError struct{ err error }

func (e commandError) Error() string { return e.err.Error() }
func (e commandError) Unwrap() error { return e.err }

// run executes a command line and returns the exit code.
func run(args []string, cio *cliIO) int {
	if cio.carried == nil {
		cio.carried = new(atomic.Bool)
	}
	if cio.sent == nil {
		cio.sent = new(atomic.Pointer[string])
	}
	if cio.rerun == nil {
		cio.rerun = new(atomic.Pointer[string])
	}
	out := &writeerr.Writer{W: cio.stdout}
	cio = cio.withStdout(out)
	root := newRoot(cio)
	if len(args) == 0 {
		return rootUsageError(root, cio)
	}
	if (args[0] == "--version" || args[0] == "-v") && len(args) == 2 && args[1] == "--json" {
		// What README offers beside `version --json`: the same.
		args = []string{"version", "--json"}
	} else if (args[0] == "--version" || args[0] == "-v") && len(args) > 1 {
		// Cobra prints the version and ignores the rest, which meshhost refuses.
		return exitCode(cio.stderr, "meshctl", usagef("unexpected argument %q after %s (it takes only --json; see meshctl version --help)", args[1], args[0]))
	}
	// Before any of them is parsed: a flag's error, a path that cannot be used, a
	// step naming the data directory would quote it (a walkthrough: `join
	// --data=TOKEN` made a directory named after the token and printed it).
	for i, a := range args {
		if holdsToken(a) {
			return exitCode(cio.stderr, "meshctl", usagef("argument %d holds a join token, or the end of one with its secret; it is not shown. "+
				"A token is never given on the command line, where other users and the shell's history see it: meshctl join reads it from stdin, --token-file or MESH_TOKEN", i+1))
		}
	}
	if holdsToken(strings.Join(args, "\n")) {
		// A wrapped token pasted unquoted: the shell made each line an argument,
		// none of which holds a whole field (a second review).
		return exitCode(cio.stderr, "meshctl", usagef("the arguments, read together, hold a join token wrapped over several lines; it is not shown. "+
			"A token is never given on the command line, where other users and the shell's history see it: meshctl join reads it from stdin, --token-file or MESH_TOKEN"))
	}
	root.SetArgs(joinOptionalValues(root, args))
	cmd, err := root.ExecuteC()
	name := "meshctl"
	if cmd != nil && cmd != root {
		name = cmd.CommandPath()
	}
	if err == nil {
		if werr := out.Err(); werr != nil {
			if op := cio.sent.Load(); op != nil {
				return exitCode(cio.stderr, name, fmt.Errorf("the change was sent, but its output could not be written (%w): look at what it did (%s) before running it again", werr, operator.LookAt(*op)))
			}
			return exitCode(cio.stderr, name, fmt.Errorf("the output could not be written (%w): what was shown is incomplete", werr))
		}
		return exitOK
	}
	var ce commandError
	if errors.As(err, &ce) {
		return exitCode(cio.stderr, name, ce.err)
	}
	// Anything cobra itself refused is a malformed command line.
	fmt.Fprintf(cio.stderr, "%s: %s\nrun `%s --help` for usage\n", name, tokenfmt.HideTokens(err.Error()), name)
	return exitUsage
}

// madeOutput is what a command that made a data directory (bootstrap, join) says
// when its output could not be written, err (nil: it could): the work finished,
// and what it made stands. w is the command's stdout, run's writeerr.Writer, whose
// first failure counts too.
func madeOutput(w io.Writer, err error, dir string) error {
	if o, ok := w.(*writeerr.Writer); ok && err == nil {
		err = o.Err()
	}
	if err == nil {
		return nil
	}
	return fmt.Errorf("it finished, but its output could not be written (%w): what it made in %s stands (meshctl check --data %s looks at it)", err, dir, dir)
}

// newRoot builds the command tree, writing to cio.
func newRoot(cio *cliIO) *cobra.Command {
	root := &cobra.Command{
		Use:               "meshctl",
		Short:             "meshctl operates a mesh: bootstrap it, serve its control plane, mint tokens, declare state, watch nodes.",
		Version:           readVersion("meshctl").String(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetIn(cio.stdin)
	root.SetOut(cio.stdout)
	root.SetErr(cio.stderr)
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return flagError(err) })
	root.SetHelpCommand(helpCommand(root))
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		if c == root {
			printUsage(c.OutOrStdout(), root)
			return
		}
		fmt.Fprintf(c.OutOrStdout(), "usage: %s %s\n\n%s\n", c.CommandPath(), c.Annotations["usage"], c.Long)
		if c.HasAvailableLocalFlags() {
			fmt.Fprintf(c.OutOrStdout(), "\nflags:\n%s", c.LocalFlags().FlagUsages())
		}
	})
	for _, spec := range commands() {
		c := &cobra.Command{
			Use:         spec.name,
			Aliases:     spec.aliases,
			Short:       firstLine(spec.summary),
			Long:        spec.summary,
			Annotations: map[string]string{"usage": spec.usage},
			// Positional arguments are checked by each command, which says what
			// it expected.
			Args: cobra.ArbitraryArgs,
		}
		exec := spec.setup(c, cio)
		onceOnly(c.Flags())
		if !spec.ownSignals {
			own, changes := exec, spec.changes
			exec = func(args []string) error {
				return stopOnSignal(changes, cio.carried, cio.sent, cio.rerun, func() error { return own(args) })
			}
		}
		catchPipe := spec.changes || spec.ownSignals
		c.RunE = func(_ *cobra.Command, args []string) error {
			if catchPipe {
				defer failOnClosedPipe()()
			}
			if err := exec(args); err != nil {
				return commandError{err}
			}
			return nil
		}
		root.AddCommand(c)
	}
	return root
}

// failOnClosedPipe makes a write to a pipe whose reader is gone fail (EPIPE), as any
// write that fails, where SIGPIPE's default killed the process with no word, exit
// 141: `meshctl token | reader` whose reader had exited left a pending token nobody
// held, unsaid. A command that changes the mesh or makes a data directory says what
// it did instead. Read-only commands keep the default, as other tools do, so that
// `meshctl nodes | head` ends quietly. stop restores it.
func failOnClosedPipe() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGPIPE)
	return func() { signal.Stop(ch) }
}

// exitCode reports err and maps it to meshctl's exit codes.
func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	// A token pasted as an argument, echoed by a usage error, never reaches the
	// terminal or the journal.
	msg := err.Error()
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code != "" && !strings.Contains(msg, ae.Code) {
		// The code the docs and scripts know it by, as meshhost shows its refusals.
		msg += " (" + ae.Code + ")"
	}
	fmt.Fprintf(stderr, "%s: %s\n", name, api.TerminalText(tokenfmt.HideTokens(msg)))
	var ue usageError
	var oe *bootstrap.OptionError
	var ie *interruptedError
	var held *outputHoldsDataError
	var notAFile *outputNotAFileError
	var notToken *notATokenFileError
	switch {
	case errors.As(err, &ie), errors.Is(err, terminal.ErrInterrupted):
		return exitInterrupted
	case errors.Is(err, datadir.ErrInUse):
		return exitInUse
	case errors.As(err, &ue), errors.As(err, &oe), errors.As(err, &held), errors.As(err, &notAFile), errors.As(err, &notToken):
		fmt.Fprintf(stderr, "run `%s --help` for usage\n", name)
		return exitUsage
	case errors.Is(err, daemon.ErrRemoved):
		return exitRemoved
	case errors.Is(err, datadir.ErrNoConfig), errors.Is(err, datadir.ErrJoinIncomplete), errors.Is(err, datadir.ErrUnprotected),
		errors.Is(err, bootstrap.ErrConflict), errors.Is(err, join.ErrDataDir), errors.Is(err, daemon.ErrNewerRules),
		errors.Is(err, dirlock.ErrNotWritable), errors.Is(err, dirlock.ErrNotALock), errors.Is(err, datadir.ErrUnreadable), errors.Is(err, replication.ErrDamaged),
		// A file of the data directory that cannot be read as one: running again
		// will not mend it (and systemd does not restart serve for it).
		errors.Is(err, datadir.ErrCorrupt), errors.Is(err, datadir.ErrTruncated), errors.Is(err, datadir.ErrTooLarge), errors.Is(err, datadir.ErrMissing),
		errors.Is(err, datadir.ErrFormat), errors.Is(err, datadir.ErrNotAFile),
		// A certificate expired, or not valid yet: serve would be refused by every
		// peer and host, and restarting it will not mend it.
		errors.Is(err, datadir.ErrCertificateTime),
		// An operator's credentials file others may read: as serve refuses its own;
		// a control token's file another user could have written, likewise.
		errors.Is(err, operator.ErrCredsExposed), errors.Is(err, statedir.ErrUnsafePath):
		return exitDataDir
	case errors.Is(err, pki.ErrPinMismatch), errors.Is(err, operator.ErrPinMismatch):
		// A broker of another CA: the address is wrong or the mesh substituted, which
		// waiting does not mend (operator.ErrUnreachable wraps it too, so before that).
		return exitRefused
	case errors.Is(err, operator.ErrUnreachable), errors.Is(err, operator.ErrNoLeader), errors.Is(err, operator.ErrNoAnswer), errors.Is(err, operator.ErrConnectionLost),
		errors.Is(err, join.ErrUnavailable), errors.Is(err, join.ErrConfirmLater),
		// A join's login refused by the mesh's brokers, or its certificates out
		// of their validity by this machine's clock: the same join run again (a
		// minute later, once the clock is set) goes on, as after an unreachable
		// broker.
		errors.Is(err, join.ErrLoginRefused), errors.Is(err, join.ErrClock):
		return exitUnreachable
	case errors.Is(err, join.ErrRefused), errors.Is(err, join.ErrToken), errors.Is(err, join.ErrRemoved),
		errors.Is(err, operator.ErrReadOnly), errors.Is(err, join.ErrNotCAHolder), errors.Is(err, operator.ErrRequestIDRefused),
		errors.Is(err, operatorcreds.ErrNoAccountKey), errors.Is(err, operator.ErrCredsExpired):
		return exitRefused
	case errors.As(err, &ae):
		switch ae.Code {
		case api.CodeUnavailable:
			return exitUnreachable
		case api.CodeInternal, api.CodeTooLarge:
			// The control plane failed to answer (its log says why; or its answer
			// did not fit in one message, even for one node), which is not a
			// refusal: scripts take exit 4 to mean the request must change.
			return exitFailure
		}
		return exitRefused
	}
	var ex exitError
	if errors.As(err, &ex) {
		return ex.code
	}
	return exitFailure
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// optionalValue is a flag whose value may be left out (--wait alone), and that
// says which following argument it would take as its value.
type optionalValue interface {
	pflag.Value
	accepts(arg string) bool
}

// joinOptionalValues lets a flag whose value is optional take it as the next
// argument, like every other flag: `--wait 30s` becomes `--wait=30s` when 30s is a
// value --wait accepts. (pflag takes an optional value only after "=".)
func joinOptionalValues(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == root {
		return args
	}
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if name, ok := strings.CutPrefix(a, "--"); ok && i+1 < len(args) {
			if f := cmd.Flags().Lookup(name); f != nil && f.NoOptDefVal != "" {
				if v, ok := f.Value.(optionalValue); ok && v.accepts(args[i+1]) {
					out = append(out, a+"="+args[i+1])
					i++
					continue
				}
			}
		}
		out = append(out, a)
	}
	return out
}

func printUsage(w io.Writer, root *cobra.Command) {
	fmt.Fprintln(w, root.Short)
	fmt.Fprintln(w, "\nusage: meshctl <command> [flags]\n\ncommands:")
	for _, c := range root.Commands() {
		if c.Hidden || c.Name() == "help" {
			continue
		}
		fmt.Fprintf(w, "  %-12s %s\n", c.Name(), c.Short)
	}
	fmt.Fprintln(w, "\nrun `meshctl <command> --help` for a command's flags; `meshctl --version` for the version.")
	fmt.Fprintln(w, "exit codes: 0 ok, 1 failure, 2 usage, 3 control plane unreachable, 4 refused by the control plane,")
	fmt.Fprintln(w, "5 not converged (declare --wait, status, signing-key status) or a voter not answering or following (control status),")
	fmt.Fprintln(w, "6 this control node was removed, 7 data directory not usable here,")
	fmt.Fprintln(w, "8 data directory in use by another process, 9 interrupted (SIGINT, SIGTERM) before it completed")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func noPositional(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// holdsToken reports whether a command-line argument holds a join token or the end
// of one with its secret (host/token.InArgument, which meshhost refuses by too).
func holdsToken(arg string) bool { return hosttoken.InArgument(arg) }
