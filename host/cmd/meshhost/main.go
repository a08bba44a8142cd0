// Command meshhost is the host agent: it adopts this machine into a mesh from one
// token, then keeps it in line with the declarations the mesh signs.
//
//	meshhost enrol --state ./h1 < token.txt     (or --token-file F, MESH_TOKEN, or the systemd credential mesh-token)
//	meshhost run   --state ./h1 --root ./managed
//	meshhost status --state ./h1 [--json]
//	meshhost hooks retry --state ./h1 [--timeout 5m] [--json]
//	meshhost version [--json]
//
// Exit codes: 0 success; 1 failure; 2 usage (also: --state inside --root); 3 the token
// cannot be used or the mesh refused it; 4 the broker is not the mesh the token names
// (retrying will not help); 5 the identity file or the state directory is in the way
// (already enrolled, not enrolled, unreadable, truncated, corrupt; a directory another
// user owns or may write, a state file that is a symbolic link or another user's, a
// state directory that is not one; a
// directory above the state directory or the managed root, or the hooks file or a
// directory above it, that another user could change; a managed root or a token file
// another user owns or could write);
// 6 this node was revoked (or its key is refused); 7 the mesh could not be reached,
// or its broker refused the enrolment's login, or this machine's clock is off
// (retrying may help, once the clock is set); 8 the state
// directory is in use by another meshhost (run, enrol), or the managed root, or one
// inside or above it, by another running agent (run); 9 enrol interrupted (SIGINT,
// SIGTERM) before it finished, or hooks retry before the agent answered. The systemd unit names the ones that mean a person must act
// (RestartPreventExitStatus in dist/systemd/meshhost.service).
//
// The command line uses the standard flag package, which accepts --flag value and
// --flag=value (docs/decisions/0007-the-command-line.md says why not cobra here).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"mesh/host/agent"
	"mesh/host/atomicfile"
	"mesh/host/dirlock"
	"mesh/host/enrol"
	"mesh/host/hangup"
	"mesh/host/hooks"
	"mesh/host/identity"
	"mesh/host/link"
	"mesh/host/readfile"
	"mesh/host/state"
	"mesh/host/statedir"
	"mesh/host/terminal"
	"mesh/host/token"
	"mesh/host/writeerr"
)

const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitToken       = 3
	exitSubstituted = 4
	exitIdentity    = 5
	exitRevoked     = 6
	exitUnreachable = 7
	exitInUse       = 8
	exitInterrupted = 9
)

// maxTokenInput bounds what is read as a token: a token is a few hundred bytes.
const maxTokenInput = 16 << 10

// credentialName is the systemd credential enrolment reads the token from
// (LoadCredential=mesh-token:FILE in dist/systemd/meshhost-enrol.service).
const credentialName = "mesh-token"

type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinIsTTY     bool
	// hideInput turns the echo of the terminal on stdin off and returns what turns
	// it back on; nil when stdin is no terminal whose echo can be turned off.
	hideInput func() (restore func(), err error)
	// notify tells the service manager about the agent's state (sd_notify); nil
	// means nobody is listening.
	notify func(state string) error
	// now is the clock; nil means time.Now.
	now func() time.Time
}

func (c *cliIO) notifyState(state string) error {
	if c.notify == nil {
		return nil
	}
	return c.notify(state)
}

func (c *cliIO) clock() time.Time {
	if c.now == nil {
		return time.Now()
	}
	return c.now()
}

func main() {
	tty := terminal.IsTerminal(os.Stdin)
	cio := &cliIO{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, stdinIsTTY: tty, notify: sdNotify}
	if tty {
		cio.hideInput = func() (func(), error) { return terminal.HideEcho(os.Stdin) }
	}
	os.Exit(run(os.Args[1:], cio))
}

// run executes a command line and returns the exit code: a command that succeeded
// but whose output could not be written (a full disk under `meshhost status >
// F`) fails.
func run(args []string, cio *cliIO) int {
	if len(args) > 0 && args[0] == "run" {
		// run's stdout is no output of its own: whatever writes there (nothing
		// does) is no reason for the agent to stop.
		return dispatch(args, cio)
	}
	out := &writeerr.Writer{W: cio.stdout}
	c := *cio
	c.stdout = out
	code := dispatch(args, &c)
	werr := out.Err()
	if code != exitOK || werr == nil {
		return code
	}
	name := "help"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name = args[0]
	}
	return exitCode(cio.stderr, name, fmt.Errorf("the output could not be written (%w): what was shown is incomplete", werr))
}

// dispatch runs the command args names.
func dispatch(args []string, cio *cliIO) int {
	switch {
	case len(args) == 0:
		// No command is a mistake in the command line: the overview goes where
		// errors go, and stdout stays empty for whatever reads it.
		fmt.Fprint(cio.stderr, "meshhost: say which command\n\n")
		usage(cio.stderr)
		return exitUsage
	case args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		usage(cio.stdout)
		return exitOK
	case args[0] == "help":
		return helpFor(args[1:], cio)
	}
	var err error
	switch args[0] {
	case "enrol", "enroll":
		err = cmdEnrol(args[1:], cio)
	case "run":
		err = cmdRun(args[1:], cio)
	case "status":
		err = cmdStatus(args[1:], cio)
	case "hooks":
		err = cmdHooks(args[1:], cio)
	case "version":
		err = cmdVersion(args[1:], cio)
	case "--version", "-version":
		switch {
		case len(args) == 2 && args[1] == "--json":
			// What README and `version --help` offer: the same as version --json.
			err = cmdVersion(args[1:], cio)
		case len(args) > 1:
			// Said as version's, whose --help is the usage: "--version --help" was
			// refused the same way, a hint that led back to itself.
			return exitCode(cio.stderr, "version", usageError{fmt.Sprintf("unexpected argument %q after --version (--version takes only --json)", args[1])})
		default:
			fmt.Fprintln(cio.stdout, readVersion())
		}
	default:
		unknownCommand(cio.stderr, args[0])
		return exitUsage
	}
	name := args[0]
	if name == "hooks" && len(args) > 1 && args[1] == "retry" {
		// "meshhost hooks retry: …", not "meshhost hooks: …". Its own name only:
		// anything else given there may be a token, never echoed.
		name += " retry"
	}
	return exitCode(cio.stderr, name, err)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `meshhost adopts this machine into a mesh from one token and applies what the mesh declares.

usage:
  meshhost enrol   --state DIR [--token-file F] [--json]   read the token from stdin, F, MESH_TOKEN
                                                 or the systemd credential mesh-token
  meshhost run     --state DIR --root DIR [--hooks F] [--log-format text|json]
                                                 stay connected and apply declarations
  meshhost status  --state DIR [--json]          show this node's identity, applied version, owed hooks
                                                 and whether the running agent reaches the mesh
  meshhost hooks retry --state DIR [--timeout D] [--json]
                                                 run again the hooks that failed (the running agent does)
  meshhost version [--json]                      the version and the commit it was built from (also --version)

run meshhost <command> --help for all of a command's flags (enrol: --timeout; run: --metrics-listen,
--metrics-textfile, --heartbeat, --broker-ping, --return-home, --check-files, --broker, --log-level)
and its exit codes.
exit codes: 0 ok, 1 failure, 2 usage, 3 token unusable or refused, 4 not the mesh (retrying
will not help), 5 identity file or state directory in the way (or not safe), 6 revoked,
7 mesh unreachable, or its broker refused the login (retrying may help; refused again a
minute later, ask for a new token), or enrol found this machine's clock off (set it, run again), 8 state directory (or, for run, the managed root, or one inside or above it) in use by another meshhost,
9 enrol interrupted before it finished (run it again: it resumes), or hooks retry
before the agent answered (the agent runs the hooks on)
`)
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	// A token pasted as an argument, echoed by a usage error, never reaches the
	// terminal or the journal.
	fmt.Fprintf(stderr, "meshhost %s: %s\n", name, shown(token.HideTokens(err.Error())))
	var ue usageError
	switch {
	case errors.As(err, &ue), errors.Is(err, errTokenArgument):
		fmt.Fprintf(stderr, "run `meshhost %s --help` for usage\n", name)
		return exitUsage
	case errors.Is(err, dirlock.ErrInUse):
		return exitInUse
	case errors.Is(err, enrol.ErrSubstituted):
		return exitSubstituted
	case errors.Is(err, agent.ErrRevoked), errors.Is(err, agent.ErrIdentityRefused):
		return exitRevoked
	case errors.Is(err, identity.ErrAlreadyEnrolled), errors.Is(err, identity.ErrUnreadable),
		errors.Is(err, identity.ErrTruncated), errors.Is(err, identity.ErrCorrupt), errors.Is(err, identity.ErrNotEnrolled),
		errors.Is(err, identity.ErrInvalid),
		errors.Is(err, state.ErrUnreadable), errors.Is(err, state.ErrTruncated), errors.Is(err, state.ErrCorrupt),
		errors.Is(err, statedir.ErrUnsafe), errors.Is(err, statedir.ErrSymlink), errors.Is(err, statedir.ErrNotOwned),
		errors.Is(err, statedir.ErrNotDir), errors.Is(err, statedir.ErrUnreachable),
		errors.Is(err, statedir.ErrUnsafePath), errors.Is(err, dirlock.ErrNotWritable), errors.Is(err, dirlock.ErrNotALock),
		errors.Is(err, hooks.ErrConfig), errors.Is(err, errRecordUnusable), errors.Is(err, statedir.ErrRootUnusable),
		errors.Is(err, errForeignFiles):
		return exitIdentity
	case errors.Is(err, agent.ErrStateInRoot), errors.Is(err, hooks.ErrInRoot):
		return exitUsage
	case errors.Is(err, enrol.ErrToken):
		return exitToken
	case errors.Is(err, enrol.ErrRefused):
		var re *enrol.RefusedError
		if errors.As(err, &re) && re.Retryable() {
			return exitUnreachable
		}
		return exitToken
	case errors.Is(err, enrol.ErrUnreachable), errors.Is(err, enrol.ErrNoAnswer),
		// This machine's clock, by which the broker's certificate or the mesh's
		// answer is out of its validity: enrol run again with the same token goes
		// on once it is set, as meshctl join's exit 3 says for the same fault.
		errors.Is(err, enrol.ErrClock), errors.Is(err, enrol.ErrAnswerTime):
		return exitUnreachable
	case errors.Is(err, enrol.ErrInterrupted), errors.Is(err, errRetryInterrupted), errors.Is(err, terminal.ErrInterrupted):
		return exitInterrupted
	}
	return exitFailure
}

// synopsis is a subcommand's usage line and description.
func synopsis(name string) string {
	switch name {
	case "enrol":
		return "--state DIR [--token-file F] [--json]   (the token in F, in MESH_TOKEN, in the systemd credential mesh-token, or on stdin)\n\nAdopt this machine into the mesh the token names: pin checked before any credential\nleaves, a key generated here (it logs in by signing the broker's nonce), the answer\nverified (its first declaration is signed for this key), the identity saved. One\nconnection; `meshhost run` then connects as the node. Each step is printed."
	case "run":
		return "--state DIR --root DIR [--hooks F] [--log-format text|json]\n\nStay connected as this node and keep the managed root in line with its declarations:\nevery one verified (signature, audience, version, validity) before it is applied.\nUnder systemd (Type=notify) it reports ready once connected and synced with the mesh.\nSIGTERM or SIGINT stops it (logged: agent stopping, with the signal, then agent stopped)."
	case "status":
		return "--state DIR [--json]\n\nShow this node's identity, applied version, last error, and the hooks owed or failed\n(run again by meshhost hooks retry), and whether the running agent reaches the mesh."
	case "hooks retry":
		return "--state DIR [--timeout D] [--json]\n\nAsk the agent running on DIR (meshhost run) to run again the hooks that failed, and\nthose still owed, once what they run is fixed on this host; print their outcome. A\nsuccess clears the node's hook_failed at the control plane (the node's own report).\nWhile no hook runs, the agent first reads its hooks file (--hooks) again, owed or not,\nand says so."
	case "version":
		return "[--json]\n\nPrint the version and the commit this binary was built from, as Go recorded it."
	}
	return ""
}

// exitCodes is what each exit code a subcommand can return means for it, as its
// --help lists them: TestHelpListsEveryExit holds each list to the codes exitCode
// gives the errors that command can meet, and docs/operations.md's exit table says
// the same for every command at once.
func exitCodes(name string) string {
	switch name {
	case "enrol":
		return `  0  enrolled (or found enrolled, by an earlier run of this enrolment)
  1  another failure: the enrolment could not be saved here (a full disk: free space, then
     run it again with the same token), or the mesh's answer does not verify
  2  usage: the command line is wrong (a token given as an argument is refused,
     never shown), or a token in MESH_TOKEN and another on stdin
  3  the token cannot be used (cut short, expired, a --token-file that does not
     exist), or the mesh refused it for good (used, unknown, cancelled): ask for a new one
  4  the broker is not the mesh the token names: retrying will not help
  5  this machine is enrolled already, or the state directory (or the token file) is
     not safe to use, or holds files that are none of meshhost's
  7  no broker answered, no answer came, the mesh could not take it now (unavailable,
     internal), or its broker refused the login (login_refused: retrying a minute
     later may help; refused again, the token is not one the mesh knows: ask for a
     new one), or the broker's certificate or the mesh's answer is not valid at this
     machine's time (set the clock, then run it again with the same token)
  8  another meshhost holds the state directory
  9  interrupted (SIGINT, SIGTERM) before it finished: run it again with the same
     token, it resumes
`
	case "run":
		return `  0  stopped by SIGTERM or SIGINT
  1  --root's parent does not exist (a mount not there yet: the unit restarts it), or
     another failure (--metrics-listen cannot be served)
  2  usage: the command line is wrong, or --state or --hooks is inside --root
  5  not enrolled (enrol first), or the identity or the state directory is unusable or
     not safe, --root is not a directory, the hooks file cannot be used, or a path it
     acts on (the hooks file, the managed root's parents) another user could change
  6  the mesh revoked this node
  8  another meshhost holds the state directory, or another running agent claims
     --root (the same root, one holding it, or one inside it)
`
	case "status":
		return `  0  shown
  1  another failure (an I/O error reading the state directory, say)
  2  usage: the command line is wrong
  5  not enrolled (enrol first), or the identity, the applied state, the revocation
     record or the state directory is unusable or not safe
  6  the mesh revoked this node, or keeps refusing its key (as meshhost run recorded it)
`
	case "hooks retry":
		return `  0  the hooks succeeded, or none was owed
  1  one failed again, the hooks file read again cannot be used (the agent keeps the
     hooks it read before), or an agent holds the state directory and does not answer,
     or hooks are owed and no agent runs (restarting the agent runs them too)
  2  usage: the command line is wrong
  5  not enrolled (enrol first), or the state directory is not safe to use or its
     files are unusable
  9  interrupted (SIGINT, SIGTERM) before the agent answered: the agent runs the hooks on
`
	case "version":
		return `  0  printed
  1  the output could not be written (a full disk under meshhost version > F)
  2  usage: an argument other than --json
`
	}
	return ""
}

func newFlags(name string, cio *cliIO) *flag.FlagSet {
	fs := flag.NewFlagSet("meshhost "+name, flag.ContinueOnError)
	fs.SetOutput(cio.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: meshhost %s %s\n\nflags:\n", name, synopsis(name))
		flagHelp(fs.Output(), fs)
		fmt.Fprintf(fs.Output(), "\nexit codes:\n%s", exitCodes(name))
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string, cio *cliIO) error {
	out := cio.stderr
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			out = cio.stdout // asked for, help is output, not an error
		}
	}
	if err := refuseTokens(fs, args); err != nil {
		return err
	}
	if out != cio.stdout {
		// Not for --help, which names each flag's type from its own value.
		onceOnly(fs)
	}
	// What the flag package prints on an error (the error, then the whole help) is
	// dropped: the error is reported once, with a pointer to --help, by exitCode,
	// which hides any token in it.
	var printed strings.Builder
	fs.SetOutput(&printed)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			io.WriteString(out, token.HideTokens(printed.String()))
			return err
		}
		return flagError(err)
	}
	if fs.NArg() > 0 {
		if fs.Name() == "meshhost enrol" {
			return usageError{fmt.Sprintf("unexpected argument %q (the token is never given on the command line: use stdin, --token-file or MESH_TOKEN)", fs.Arg(0))}
		}
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func cmdEnrol(args []string, cio *cliIO) (err error) {
	fs := newFlags("enrol", cio)
	stateDir := fs.String("state", "", "state directory for the identity and applied state (required)")
	tokenFile := fs.String("token-file", "", "read the token from this file instead of stdin (- is stdin)")
	timeout := durationFlag(fs, "timeout", defaultEnrolTimeout, "how long to wait for the mesh's answer (1s to 10m; the mesh closes an enrolling connection after 30s, so waiting longer helps nothing); connecting comes before it: each of the token's brokers is given 10s, the next tried once one has gone 2s unanswered")
	asJSON := fs.Bool("json", false, "print the result as JSON on stdout (the steps go to stderr)")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	if *stateDir == "" {
		return usageError{"--state is required"}
	}
	// Zero was taken silently for the default, and a negative wait gave up at once
	// and reported the mesh unreachable (exit 7), as if retrying could help.
	if err := checkBetween("timeout", *timeout, time.Second, maxEnrolTimeout, defaultEnrolTimeout); err != nil {
		return err
	}
	text, err := readToken(*tokenFile, cio)
	if err != nil {
		return err
	}
	// An unsafe state directory is named first, whatever the token; a token that
	// cannot be used then leaves nothing behind: no state directory made, no lock
	// file in it.
	if err := statedir.Check(*stateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := checkOwnDirectory(*stateDir, *tokenFile); err != nil {
		return err
	}
	tok, err := enrol.ParseToken(text, cio.clock(), *stateDir)
	if err != nil {
		return err
	}
	steps := cio.stdout
	if *asJSON {
		steps = cio.stderr
	}
	// Made 0700 if absent; refused if another user owns it or may write it, before
	// anything is written there or sent to the mesh.
	made, err := statedir.Create(*stateDir)
	var lock *dirlock.Lock
	defer func() {
		// An enrolment that saved nothing (a refused token, a full disk) leaves no
		// empty directory with a lock file behind, which looked like an enrolment
		// begun there; removed while the lock is held, and never while another
		// process holds it.
		if err != nil && len(made) > 0 && !errors.Is(err, dirlock.ErrInUse) {
			if _, rerr := statedir.RemoveMade(made); rerr != nil {
				fmt.Fprintf(cio.stderr, "warning: could not remove the state directory this enrolment made, %s: %v\n", *stateDir, rerr)
			}
		}
		lock.Release()
	}()
	if err != nil {
		return err
	}
	lock, err = lockState(*stateDir, "meshhost enrol")
	if errors.Is(err, dirlock.ErrInUse) {
		// An agent running on an enrolled directory: stopping it, as the lock's
		// message says, would only lead to "already enrolled".
		var busy *dirlock.InUseError
		enrolled := identity.CheckAbsent(*stateDir)
		if id, ok := enrol.EnrolledAs(*stateDir, tok); ok && errors.As(err, &busy) && busy.PID > 0 {
			// The identity of the node this token names, run by its agent: most
			// likely this very enrolment, run again (a provisioning script).
			return &enrol.EnrolledAsTokenError{Path: identity.Path(*stateDir), Mesh: id.Mesh, Node: id.Node,
				Agent: fmt.Sprintf("%s, pid %d", busy.Command, busy.PID)}
		} else if errors.Is(enrolled, identity.ErrAlreadyEnrolled) && errors.As(err, &busy) && busy.PID > 0 {
			return fmt.Errorf("%w (%s, pid %d, is working on it now)", enrolled, busy.Command, busy.PID)
		} else if errors.Is(enrolled, identity.ErrAlreadyEnrolled) {
			return enrolled
		}
	}
	if err != nil {
		return err
	}
	// An identity the mesh revoked (its signed notice recorded by the agent) is in
	// the way of any token: the mesh refuses its key for good, so asking it again
	// gave login_refused and the advice to wait a minute and to have the node
	// revoked, which it is. Said at once, as meshhost status and run say it.
	if err := revokedInTheWay(*stateDir, tok, cio.clock()); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := enrol.Enrol(ctx, enrol.Options{StateDir: *stateDir, Token: text, Out: steps, RequestTimeout: *timeout, Now: cio.clock, Agent: agentName()})
	if err != nil {
		return err
	}
	// A record that an identity once enrolled here was revoked is about that
	// identity, not this one; unless this run finished an earlier one's, whose
	// identity it is (the agent may have run, and been revoked, since).
	if !res.Finished {
		if err := os.Remove(revokedPath(*stateDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(cio.stderr, "warning: %v\n", err)
		}
	}
	next := fmt.Sprintf("meshhost run --state %s --root DIR", *stateDir)
	if *asJSON {
		enc := json.NewEncoder(cio.stdout)
		enc.SetIndent("", "  ")
		return enrolledOutput(enc.Encode(struct {
			Mesh      string   `json:"mesh"`
			Node      string   `json:"node"`
			PublicKey string   `json:"public_key"`
			Brokers   []string `json:"brokers"`
			Version   uint64   `json:"declaration_version"`
			State     string   `json:"state"`
			Next      string   `json:"next"`
			// Finished: an earlier run of this enrolment had enrolled the machine, and
			// this one found it so (its declaration_version is then 0: the agent's
			// state holds what was applied). A script could not tell the two apart.
			Finished bool `json:"finished,omitempty"`
		}{res.Identity.Mesh, res.Identity.Node, res.Identity.PublicKey, res.Identity.Brokers, res.DeclarationVersion, *stateDir, next, res.Finished}))
	}
	fmt.Fprintf(cio.stdout, "enrolled %s in mesh %s. next: %s\n", res.Identity.Node, res.Identity.Mesh, next)
	if o, ok := cio.stdout.(*writeerr.Writer); ok {
		return enrolledOutput(o.Err())
	}
	return nil
}

// enrolledOutput is the failure to write an enrolment's result, err (nil stays nil):
// the machine is enrolled all the same, which a run again finds and says.
func enrolledOutput(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("this machine is enrolled (meshhost status shows it), but the output could not be written (%w)", err)
}

// readToken takes the token from --token-file, MESH_TOKEN, the systemd credential
// mesh-token ($CREDENTIALS_DIRECTORY/mesh-token, LoadCredential=) or stdin, in that
// order; --token-file - is stdin, as meshctl declare's --file - is. It never comes
// from the command line, where other users and shell history could see it.
func readToken(file string, cio *cliIO) (string, error) {
	if file != "" && cio.getenv("MESH_TOKEN") != "" {
		// Set and forgotten perhaps: --token-file wins, said, as a pipe not read
		// beside MESH_TOKEN is (a walkthrough).
		fmt.Fprintf(cio.stderr, "meshhost enrol: reading the token from --token-file %s; MESH_TOKEN is set and not read\n", file)
	}
	fromStdin := file == "-"
	if fromStdin {
		file = ""
	}
	if file == "" && !fromStdin {
		if dir := cio.getenv("CREDENTIALS_DIRECTORY"); dir != "" && cio.getenv("MESH_TOKEN") == "" {
			if cred := filepath.Join(dir, credentialName); fileExists(cred) {
				file = cred
			}
		}
	}
	var r io.Reader
	switch {
	case file != "":
		// A pipe is read until its writer closes it; a FIFO nothing writes to is
		// given up on after readfile.PipeWait; a directory or a device is refused.
		data, err := readfile.StreamWaiting(file, maxTokenInput, readfile.PipeWait, trustedToken(file, cio), pipeWaiting(file, cio))
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: --token-file %s does not exist (give the file the token was saved in, or - to read it from stdin)", enrol.ErrToken, file)
		}
		if errors.Is(err, readfile.ErrTooLarge) {
			return "", fmt.Errorf("%w: %s is over %d bytes; a token is one line of a few hundred characters", enrol.ErrToken, file, maxTokenInput)
		}
		if errors.Is(err, statedir.ErrUnsafePath) {
			return "", err
		}
		if err != nil {
			return "", fmt.Errorf("%w: %w", enrol.ErrToken, err)
		}
		return string(data), nil
	case cio.getenv("MESH_TOKEN") != "" && !fromStdin:
		if f, ok := cio.stdin.(*os.File); ok && !cio.stdinIsTTY {
			// `MESH_TOKEN=… meshhost enrol < token.txt`: two tokens, one of them
			// set and forgotten perhaps; MESH_TOKEN won without a word.
			if readfile.OffersInput(f, token.LooksLikeToken) {
				return "", usageError{"a token in MESH_TOKEN and another on stdin: give one (unset MESH_TOKEN, or --token-file - to read stdin)"}
			}
			// A pipe is not read (it may be the script running this): said,
			// as `cat other-token |` with a MESH_TOKEN forgotten enrolled the
			// machine into MESH_TOKEN's mesh without a word (a review).
			if readfile.IsPipe(f) {
				fmt.Fprintln(cio.stderr, "meshhost enrol: using the token in MESH_TOKEN; stdin, a pipe, is not read (unset MESH_TOKEN, or --token-file -, to read a token from it)")
			}
		}
		return cio.getenv("MESH_TOKEN"), nil
	default:
		if cio.stdinIsTTY {
			return readPasted(cio)
		}
		r = cio.stdin
		// `meshhost enrol < token.txt`: the file the shell opened is judged as
		// --token-file's is.
		if f, ok := cio.stdin.(*os.File); ok {
			if fi, err := f.Stat(); err == nil {
				if err := trustedToken("on stdin", cio)(fi); err != nil {
					return "", err
				}
			}
		}
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTokenInput+1))
	if err != nil {
		return "", fmt.Errorf("%w: read: %w", enrol.ErrToken, err)
	}
	if len(data) > maxTokenInput {
		return "", fmt.Errorf("%w: the input is over %d bytes; a token is one line of a few hundred characters", enrol.ErrToken, maxTokenInput)
	}
	return string(data), nil
}

// trustedToken judges the file a token is read from (statedir.CheckInput): the
// token says which mesh this machine trusts, so a file another user could have
// written is refused. The user who ran meshhost through sudo (SUDO_UID, as root)
// counts as its own: `sudo meshhost enrol --token-file ~/token.txt`. A file
// group or others may read is taken, with a warning: the token may have been
// copied, and used first.
func trustedToken(name string, cio *cliIO) func(fs.FileInfo) error {
	invoker := statedir.Invoker(cio.getenv)
	return func(fi fs.FileInfo) error {
		if err := statedir.CheckInput("the token file", name, fi, invoker); err != nil {
			return err
		}
		if statedir.ReadableByOthers(fi) {
			fmt.Fprintf(cio.stderr, "warning: the token file %s may be read by group or others (mode %#o): whoever read it may enrol another machine as this node first; if enrol says the token was used, have the node revoked and a new token minted\n",
				name, fi.Mode().Perm())
		}
		return nil
	}
}

// readPasted reads the token pasted on the terminal on stdin, with the terminal's
// echo off: its line, and the rest of a paste of several lines, which the parser
// then judges whole, as it would the same text in a file (a wrapped token: "split
// when copied; paste it as one line"; see package terminal).
func readPasted(cio *cliIO) (string, error) {
	line, _, err := terminal.ReadHidden(cio.stdin, cio.stderr,
		"paste the token and press Enter (it is not shown): ", "paste the token and press Enter: ",
		maxTokenInput, cio.hideInput, token.CutShort)
	if err != nil && !errors.Is(err, terminal.ErrInterrupted) {
		return "", fmt.Errorf("%w: read: %w", enrol.ErrToken, err)
	}
	return line, err
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// lockState keeps the state directory to this process: two agents on one directory
// would both write its files and the managed root, and run every hook twice.
func lockState(dir, command string) (*dirlock.Lock, error) {
	lock, err := dirlock.Acquire("state directory", dir, command)
	if err == nil {
		// The temporary files of writes a kill or a power loss cut short: with the
		// lock held, no write is under way. Best effort: they only take room.
		_, _ = atomicfile.RemoveStale(dir)
	}
	return lock, err
}

// Bounds of the durations the command line takes: past them a value is a typo
// (1000h for 10s), not a choice.
const (
	defaultEnrolTimeout = 20 * time.Second
	// maxEnrolTimeout: enrolment is one request and its answer.
	maxEnrolTimeout  = 10 * time.Minute
	defaultHeartbeat = 15 * time.Second
	// maxHeartbeat: a host that reports less often than this is shown offline
	// between its reports by any control plane of sane settings.
	maxHeartbeat = 10 * time.Minute
)

// agentProcs is how many cores `meshhost run` lets Go use (GOMAXPROCS).
const agentProcs = 1

// maxBrokerPing bounds --broker-ping: a broker that stopped reading is left within
// three intervals, and past half an hour that is no longer noticing.
const maxBrokerPing = 10 * time.Minute

func cmdRun(args []string, cio *cliIO) error {
	fs := newFlags("run", cio)
	stateDir := fs.String("state", "", "state directory written by enrol (required)")
	root := fs.String("root", "", "managed root: declared files are kept here (required)")
	heartbeat := durationFlag(fs, "heartbeat", defaultHeartbeat, "how often to report status when nothing changes (the control plane shows a node offline after three of them without a report, or after its --offline-after, 45s by default, if longer; 1s to 10m)")
	brokerPing := durationFlag(fs, "broker-ping", link.PingInterval, "how often to ping the broker: one whose process stops reading (stopped, wedged) is left for another after two unanswered pings; shorter notices sooner and costs this host and the broker more at rest (1s to 10m)")
	returnHome := durationFlag(fs, "return-home", 5*time.Minute, "after failing over to another broker, how often to try moving back to this node's first one (the brokers are rotated by node id so that a fleet spreads over the control nodes); doubles up to an hour while a move does not end there; 0 stays where it is, else 1s to 1h")
	checkFiles := durationFlag(fs, "check-files", agent.DefaultCheckFiles, "how often to compare the managed files with the applied declaration and put back, running their hooks, those changed or removed on this host since; 0 never (then a new declaration, or the mesh's re-signed copy every 12 hours, puts them back), else 1s to 24h")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text (key=value lines) or json (one JSON object a line)")
	logJSON := fs.Bool("log-json", false, "the same as --log-format json")
	hooksFile := fs.String("hooks", "", "local hooks file: commands to run after declared files change (a declaration can never add one)")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9301 as meshhost.service does (off when empty)")
	metricsTextfile := fs.String("metrics-textfile", "", "write the agent's metrics every 15s to this .prom file in a node exporter's textfile directory (e.g. /var/lib/node_exporter/textfile_collector/meshhost.prom), for a fleet scraped through its node exporters (off when empty)")
	var extra brokerList
	fs.Var(&extra, "broker", "a broker address (`ip:port`) to try after those the mesh's list names, for a host whose known brokers are all gone; repeat for several; the mesh's CA pin is checked as for any")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	if *stateDir == "" || *root == "" {
		return usageError{"--state and --root are required"}
	}
	if err := checkBetween("heartbeat", *heartbeat, time.Second, maxHeartbeat, defaultHeartbeat); err != nil {
		return err
	}
	if err := checkBetween("broker-ping", *brokerPing, time.Second, maxBrokerPing, link.PingInterval); err != nil {
		return err
	}
	if *returnHome != 0 && (*returnHome < time.Second || *returnHome > time.Hour) {
		return usageError{fmt.Sprintf("--return-home %s: must be 0 (never) or between 1s and 1h (the default is %s)", *returnHome, 5*time.Minute)}
	}
	if *checkFiles != 0 && (*checkFiles < time.Second || *checkFiles > 24*time.Hour) {
		return usageError{fmt.Sprintf("--check-files %s: must be 0 (never) or between 1s and 24h (the default is %s)", *checkFiles, agent.DefaultCheckFiles)}
	}
	if *checkFiles == 0 {
		*checkFiles = -1 // the agent's "never"; its 0 is the default
	}
	// Found only when the agent listened on it, a malformed address came after the
	// state directory was locked and exited 1 as a failure of the host.
	if *metricsListen != "" {
		_, port, err := net.SplitHostPort(*metricsListen)
		if err != nil {
			return usageError{fmt.Sprintf("--metrics-listen %q: give ip:port (127.0.0.1:9301, say)", *metricsListen)}
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return usageError{fmt.Sprintf("--metrics-listen %q: the port is not a number from 1 to 65535", *metricsListen)}
		}
	}
	if *metricsTextfile != "" {
		if err := agent.CheckTextfile(*metricsTextfile); err != nil {
			return usageError{err.Error()}
		}
	}
	formatSet := false
	fs.Visit(func(f *flag.Flag) { formatSet = formatSet || f.Name == "log-format" })
	format, err := chooseLogFormat(*logFormat, *logJSON, formatSet)
	if err != nil {
		return err
	}
	log, err := newLogger(cio.stderr, *logLevel, format)
	if err != nil {
		return err
	}
	if cio.getenv("GOMAXPROCS") == "" {
		// The agent handles one message at a time, so a second core buys it nothing,
		// while Go's scheduler, given several, hands each message between threads on
		// different cores and spins looking for work: about 12% more CPU per
		// declaration here (docs/benchmarks.md). The machine's cores are for its
		// workload. GOMAXPROCS, when set, decides instead.
		runtime.GOMAXPROCS(agentProcs)
	}
	var hk hooks.Config
	if *hooksFile != "" {
		// Exit 2, as the state directory inside the root, before the file is read:
		// a declaration could write it.
		if err := hooks.CheckApart(*hooksFile, *root); errors.Is(err, hooks.ErrInRoot) {
			return err
		}
		if hk, err = hooks.Load(*hooksFile); err != nil {
			// Exit 5, as an unusable or unsafe state directory: the file stays as it
			// is until a person edits it, so systemd must not start the agent again
			// and again, and the command line's help does not say how to fix it.
			return err
		}
		// Said now, not at the first change, when a service restart is due.
		for _, err := range hk.Check(*root) {
			log.Warn(hooks.Warning(err), "err", err)
		}
	}
	if err := refuseControlDir(*stateDir); err != nil {
		return err // exit 5, before the lock is taken: its record is meshctl's
	}
	if err := agent.CheckApart(*stateDir, *root); errors.Is(err, agent.ErrStateInRoot) {
		return err // exit 2, before the directory's lock and identity are looked at
	}
	if mode, in := agent.RootInState(*stateDir, *root); in {
		// The README's example did so, and a service user could read none of the
		// files declared for it (a docs walkthrough).
		log.Warn(fmt.Sprintf("--root is inside --state, which only the agent's user may enter (mode %04o): no other user reaches the declared files, whatever owner and mode they are declared with; give the managed root a directory of its own (/srv/mesh, say)", mode),
			"state", *stateDir, "root", *root)
	}
	// A state directory that does not exist is agent.New's to explain (not enrolled);
	// one another user owns or may write is refused before its lock file is opened.
	if err := statedir.Check(*stateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lock, err := lockState(*stateDir, "meshhost run")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	defer lock.Release()
	var ready sync.Once
	var id identity.Identity
	build := readVersion()
	a, err := agent.New(agent.Options{StateDir: *stateDir, Agent: agentName(), Root: *root, Logger: log, Heartbeat: *heartbeat, BrokerPing: *brokerPing, ReturnHome: *returnHome, CheckFiles: *checkFiles, Hooks: hk, HooksFile: *hooksFile,
		Version:         build.Version,
		Revision:        build.Revision,
		ExtraBrokers:    extra,
		MetricsListen:   *metricsListen,
		MetricsTextfile: *metricsTextfile,
		Socket:          agent.SocketPath(*stateDir),
		OnRefused: func(err error) {
			// For meshhost status and systemd's status line; the agent goes on trying.
			if rerr := recordRevocation(*stateDir, id, err, cio.clock()); rerr != nil {
				log.Warn("could not record the refusals for meshhost status", "err", rerr)
			}
			_ = cio.notifyState("STATUS=node " + id.Node + ": the mesh keeps refusing its key (or has no room for it); trying again")
		},
		// Ready once synced, or as soon as the agent must wait for the mesh: it
		// runs without it (hooks, hooks retry, retries), and a unit that is not
		// ready within TimeoutStartSec is restarted, each start running the hooks
		// that failed again behind the operator's back.
		OnWaiting: func(err error) {
			notifyUp(cio, &ready, log, fmt.Sprintf("STATUS=node %s of mesh %s: running without the mesh, which does not answer (%v); trying again", id.Node, id.Mesh, err))
		},
		OnSynced: func() {
			if err := clearRefusal(*stateDir, id); err != nil {
				log.Warn("could not clear the record of earlier refusals", "err", err)
			}
			notifyUp(cio, &ready, log, fmt.Sprintf("STATUS=node %s of mesh %s: connected and synced", id.Node, id.Mesh))
		}})
	if err != nil {
		return err
	}
	id = a.Identity()
	// The mesh does not take a revocation back: a node it revoked stays stopped
	// rather than knocking on the broker's door on every restart.
	if rec, ok, err := loadRevocation(*stateDir, id); err != nil {
		return err
	} else if ok && rec.Signed {
		return rec.err(*stateDir)
	}
	// A root that is a file, a device or a FIFO was taken, the agent reported
	// ready, and every apply failed from the first declaration on; a mistyped one
	// was made with all its missing parents, and the declared files written there.
	// Judged once the identity is known good: "not enrolled" is the truer answer
	// for --state ./h1 --root ./h1/managed before enrol made ./h1.
	if err := dirlock.RefuseInsideClaimed(*root); err != nil {
		return err // exit 8, before a missing root is made inside the other's
	}
	if err := statedir.PrepareRoot(*root); err != nil {
		return err
	}
	// One agent to a root: two (of two meshes, or two nodes) put back each
	// other's files for good (exit 8, as a state directory in use).
	rootLock, err := dirlock.AcquireRoot(*root)
	if err != nil {
		return err
	}
	defer rootLock.Release()
	if rootLock.Unheld != "" {
		log.Warn(rootLock.Unheld, "root", *root)
	}
	if rootLock.Unchecked != "" {
		log.Warn(rootLock.Unchecked, "root", *root)
	}
	// The stop is logged, and why, as meshctl serve logs its own: it went without a
	// word (exit 0), and the journal showed an agent that had simply ceased. With
	// the node, as the agent's own lines have it.
	ctx, stop := stopSignals(func(sig os.Signal) {
		log.Info("agent stopping", "node", id.Node, "reason", "interrupted by "+signalName(sig))
		// Said as the stop begins, not once it ends: a hook given its grace
		// held "deactivating" unsaid (systemd shows it as still running). Sent
		// beside the stop, which a send that waits must not hold up.
		go func() { _ = cio.notifyState("STOPPING=1") }()
	})
	defer stop()
	defer hangup.Ignore(log, "the agent goes on running")()
	// A log line written to a pipe that closed (`run 2>&1 | tee`, tee ended by the
	// same Ctrl-C) ended the agent by SIGPIPE, skipping its clean stop and leaving a
	// running hook unsignalled (a review): the write fails instead. Caught, not
	// ignored: an ignored signal stays ignored in what the agent runs, and a hook's
	// `yes | head -1` then ran until its timeout.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	err = a.Run(ctx)
	log.Info("agent stopped", "node", id.Node)
	_ = cio.notifyState("STOPPING=1")
	if errors.Is(err, agent.ErrRevoked) {
		if rerr := recordRevocation(*stateDir, id, err, cio.clock()); rerr != nil {
			log.Warn("could not record the revocation for meshhost status", "err", rerr)
		}
		return fmt.Errorf("%w\nthe agent stopped. %s", err, adoptAgain(*stateDir))
	}
	return err
}

// notifyUp tells the service manager status, with READY=1 the first time.
func notifyUp(cio *cliIO, ready *sync.Once, log *slog.Logger, status string) {
	msg := status
	ready.Do(func() { msg = "READY=1\n" + status })
	if err := cio.notifyState(msg); err != nil {
		log.Warn("could not tell systemd the agent's state", "err", err)
	}
}

// chooseLogFormat is the log format --log-format and its alias --log-json ask for
// (formatSet: --log-format was given).
func chooseLogFormat(format string, logJSON, formatSet bool) (string, error) {
	if format != "text" && format != "json" {
		return "", usageError{fmt.Sprintf("--log-format %q: use text or json", format)}
	}
	if logJSON {
		if formatSet && format != "json" {
			return "", usageError{fmt.Sprintf("--log-json and --log-format %s disagree; --log-json is the same as --log-format json", format)}
		}
		return "json", nil
	}
	return format, nil
}

// newLogger is the agent's logger: slog's text or JSON handler on w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{"--log-level: use debug, info, warn or error"}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func cmdStatus(args []string, cio *cliIO) error {
	fs := newFlags("status", cio)
	stateDir := fs.String("state", "", "state directory (required)")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	if *stateDir == "" {
		return usageError{"--state is required"}
	}
	// As run, enrol and hooks retry do: a file given as the state directory is
	// said to be one (status blamed an unreadable identity file, and advised having
	// the node revoked), and a directory this user may not enter is someone else's,
	// not one to take over. Absent, it is identity.Load's to say: not enrolled.
	if err := refuseControlDir(*stateDir); err != nil {
		return err
	}
	if err := statedir.Check(*stateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	id, err := identity.Load(*stateDir)
	if err != nil {
		return err
	}
	// Said, not mended: status changes nothing (the agent makes it private as it
	// starts).
	if fi, err := os.Stat(identity.Path(*stateDir)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(cio.stderr, "meshhost status: warning: %s (mode %v) is readable by other users: it holds this node's private key; chmod 600 it (meshhost run does as it starts), and if they are not trusted have this node revoked and enrol it again\n",
			identity.Path(*stateDir), fi.Mode().Perm())
	}
	applied, err := state.Load(*stateDir)
	if err != nil {
		return err
	}
	rec, revoked, err := loadRevocation(*stateDir, id)
	if err != nil {
		return err
	}
	// Listed always, if empty: a script reads "managed": [] as none, where null
	// (no file managed yet, or state written before the list) was no list at all.
	managed := applied.Managed
	if managed == nil {
		managed = []string{}
	}
	out := struct {
		Mesh           string   `json:"mesh"`
		Node           string   `json:"node"`
		PublicKey      string   `json:"public_key"`
		Brokers        []string `json:"brokers"`
		HaveApplied    bool     `json:"have_applied"`
		AppliedVersion uint64   `json:"applied_version"`
		ExpiresAt      string   `json:"expires_at,omitempty"`
		KeyringEpoch   uint64   `json:"keyring_epoch"`
		LastError      string   `json:"last_error,omitempty"`
		// NextAttempt is when `meshhost run` tries again a declaration that
		// failed to apply.
		NextAttempt string `json:"next_attempt,omitempty"`
		// HooksOwed are the changed paths whose hooks have not run to success yet
		// (interrupted, queued, or failed); HooksFailed the hooks that failed.
		HooksOwed   []string `json:"hooks_owed,omitempty"`
		HooksFailed []string `json:"hooks_failed,omitempty"`
		Managed     []string `json:"managed"`
		// Revoked is the record `meshhost run` left when the mesh revoked the
		// node (or kept refusing its key); status then exits 6.
		Revoked *revocation `json:"revoked,omitempty"`
		// Agent is what the agent running on the state directory says of its
		// link to the mesh.
		Agent agentView `json:"agent"`
	}{id.Mesh, id.Node, id.PublicKey, id.Brokers, applied.HaveApplied, applied.Version, "", applied.KeyringEpoch, "", "", applied.HooksPending, applied.HooksFailed, managed, nil, askAgent(*stateDir)}
	if len(applied.Brokers) > 0 {
		// The mesh's signed list, accepted since the enrolment: what the agent dials.
		out.Brokers = applied.Brokers
	}
	if revoked {
		out.Revoked = &rec
	}
	if applied.HaveApplied {
		out.ExpiresAt = applied.ExpiresAt.Format(time.RFC3339)
	}
	if applied.LastErrorCode != "" {
		out.LastError = applied.LastErrorCode + ": " + applied.LastError
	}
	nextAttempt := applied.NextAttempt
	expires := applied.ExpiresAt
	if u := out.Agent.Unsaved; u != nil {
		// The running agent holds more than the state file says (its saves fail):
		// what it holds, as the control plane hears it in its reports, and the
		// retry it owes (the file's may be over, or not yet written).
		out.HaveApplied, out.AppliedVersion, expires, nextAttempt = u.HaveApplied, u.Version, u.ExpiresAt, u.NextAttempt
		out.ExpiresAt = ""
		if u.HaveApplied {
			out.ExpiresAt = u.ExpiresAt.Format(time.RFC3339)
		}
		out.LastError = "state_not_saved: " + u.Error
		if u.Failure != "" {
			// What the agent reports: the failure, the unsaved state said below.
			out.LastError = u.Failure
		}
	}
	if !nextAttempt.IsZero() {
		out.NextAttempt = nextAttempt.UTC().Format(time.RFC3339)
	}
	if *asJSON {
		enc := json.NewEncoder(cio.stdout)
		enc.SetIndent("", "  ")
		// out always encodes: an error is the output's, which run says as for
		// the text form ("the output could not be written"), where returned here
		// it was the bare "no space left on device" (a review).
		_ = enc.Encode(out)
		if revoked {
			return rec.err(*stateDir)
		}
		return nil
	}
	ver := "none yet"
	if out.HaveApplied {
		ver = fmt.Sprintf("v%d (valid until %s)", out.AppliedVersion, out.ExpiresAt)
		if time.Now().After(expires) {
			ver += " STALE: expired without a fresh one; the files stay as they are"
		}
	}
	fmt.Fprintf(cio.stdout, "node      %s\nmesh      %s\nkey       %s\nbrokers   %s\napplied   %s\nkeyring   epoch %d\nmanaged   %d file(s)\n",
		out.Node, out.Mesh, out.PublicKey, strings.Join(out.Brokers, ", "), ver, out.KeyringEpoch, len(out.Managed))
	if out.LastError != "" {
		fmt.Fprintf(cio.stdout, "last error %s\n", shown(out.LastError))
	}
	if out.Agent.Unsaved != nil {
		fmt.Fprintf(cio.stdout, "state     NOT SAVED: the running agent holds the above, its state file v%d; it tries again at each heartbeat (free space or fix the disk)\n", applied.Version)
	}
	if out.NextAttempt != "" {
		if time.Now().After(nextAttempt) {
			fmt.Fprintf(cio.stdout, "retry     due since %s (meshhost run tries again when it runs)\n", out.NextAttempt)
		} else {
			fmt.Fprintf(cio.stdout, "retry     at %s (while meshhost run runs)\n", out.NextAttempt)
		}
	}
	if len(out.HooksFailed) > 0 {
		fmt.Fprintf(cio.stdout, "hooks     FAILED: %s; fix what they run, then: meshhost hooks retry --state %s\n", strings.Join(out.HooksFailed, ", "), *stateDir)
	}
	if len(out.HooksOwed) > 0 {
		fmt.Fprintf(cio.stdout, "owed      hooks for %d changed path(s): %s\n", len(out.HooksOwed), listShort(out.HooksOwed, 5))
	}
	fmt.Fprintf(cio.stdout, "agent     %s\n", shown(out.Agent.String()))
	if f := out.Agent.Files; f != nil {
		fmt.Fprintf(cio.stdout, "files     %s\n", shown(filesLine(f)))
	}
	if k := out.Agent.SharedKey; k != nil {
		fmt.Fprintf(cio.stdout, "shared    %s\n", shown(sharedKeyLine(k, out.Node)))
	}
	if revoked {
		what := "REVOKED by the mesh"
		if !rec.Signed {
			// Not "most likely revoked": a mesh restored from a backup older
			// than the node's enrolment refuses it too (a walkthrough).
			what = "REFUSED by the mesh (revoked, unknown to it, or no room: see below)"
		}
		fmt.Fprintf(cio.stdout, "state     %s at %s\n", what, rec.At.Format(time.RFC3339))
		return rec.err(*stateDir)
	}
	return nil
}

func cmdVersion(args []string, cio *cliIO) error {
	fs := newFlags("version", cio)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	v := readVersion()
	if *asJSON {
		enc := json.NewEncoder(cio.stdout)
		enc.SetIndent("", "  ")
		// v always encodes: an error is the output's, which run says as it does
		// for the text form ("the output could not be written"), where returned
		// here it was the bare "no space left on device".
		_ = enc.Encode(v)
		return nil
	}
	fmt.Fprintln(cio.stdout, v)
	return nil
}

// agentStatusTimeout bounds how long `meshhost status` waits for the agent's answer.
const agentStatusTimeout = 2 * time.Second

// agentView is what `meshhost status` says of the running agent.
type agentView struct {
	// Running: an agent answered on the state directory's socket.
	Running bool `json:"running"`
	// Known: it said whether it reaches the mesh (an older agent does not).
	Known bool `json:"-"`
	// Unanswered is why a socket that accepted did not answer.
	Unanswered string `json:"-"`
	// CannotAsk is why no agent can be asked at all: the state directory's path is
	// too long for a socket's address.
	CannotAsk string `json:"cannot_ask,omitempty"`
	agent.LinkStatus
}

// askAgent asks the agent running on stateDir, if any, whether it reaches the mesh.
func askAgent(stateDir string) agentView {
	st, err := agent.AskStatus(stateDir, agentStatusTimeout)
	switch {
	case errors.Is(err, agent.ErrOlderAgent):
		return agentView{Running: true}
	case errors.Is(err, agent.ErrNoAgent):
		return agentView{}
	case errors.Is(err, agent.ErrSocketPathTooLong):
		return agentView{CannotAsk: err.Error()}
	case err != nil:
		// Accepted, then no answer: an agent refusing this user, or stuck.
		return agentView{Running: true, Unanswered: err.Error()}
	}
	return agentView{Running: true, Known: true, LinkStatus: st}
}

// filesLine says what the running agent's file check found: whether it is off
// (and why, since when), when it last compared the managed files, and what it put
// back since the agent started.
func filesLine(f *agent.FilesStatus) string {
	var parts []string
	if f.Never {
		parts = append(parts, "NEVER CHECKED: the agent runs with --check-files 0, so files changed on this host stay as they are until a new declaration, or the mesh's re-signed copy (every 12 hours), rewrites them")
	}
	if f.OffCode != "" {
		parts = append(parts, fmt.Sprintf("OFF since %s, files changed on this host are not put back: %s", f.OffSince.UTC().Format(time.RFC3339), f.Off))
	}
	switch {
	case f.Never:
	case f.CheckedAt.IsZero():
		parts = append(parts, "not compared since the agent started")
	case f.OffCode != "":
		parts = append(parts, "last compared at "+f.CheckedAt.UTC().Format(time.RFC3339))
	default:
		parts = append(parts, "checked at "+f.CheckedAt.UTC().Format(time.RFC3339))
	}
	if f.Failed != "" {
		parts = append(parts, "what changed on this host could not be put back as declared (tried again at each check; the node is failing meanwhile): "+f.Failed)
	}
	switch {
	case f.PutBack > 0:
		parts = append(parts, putBackText(f))
	case f.Failed == "" && f.OffCode == "" && !f.Never:
		parts = append(parts, "none changed on this host since the agent started")
	}
	if f.NotKept != "" {
		parts = append(parts, "its copy of the applied declaration is NOT KEPT in the state directory (tried again at each check; after a restart, files are checked once the mesh sends a copy): "+f.NotKept)
	}
	return strings.Join(parts, "; ")
}

// sharedKeyLine says that another machine holds this node's key, as the mesh told
// the running agent: from where, since when, and what to do.
func sharedKeyLine(k *agent.SharedKeyStatus, node string) string {
	since := ""
	if !k.Since.IsZero() {
		since = " since " + k.Since.UTC().Format(time.RFC3339) + ","
	}
	return fmt.Sprintf("ANOTHER MACHINE holds this node's key (from %s;%s %d connections with it, as the mesh said at %s): both receive every declaration, secrets included, and the mesh cannot tell them apart; have the node revoked (meshctl revoke %s) and enrol each machine again with a token of its own",
		strings.Join(k.From, ", "), since, k.Connections, k.ToldAt.UTC().Format(time.RFC3339), node)
}

// putBackText says how many files the check put back since the agent started, the
// last when and which.
func putBackText(f *agent.FilesStatus) string {
	last := listShort(f.LastPutBack, 5)
	if more := f.LastPutBackCount - min(len(f.LastPutBack), 5); more > 0 {
		last = fmt.Sprintf("%s and %d more", strings.Join(f.LastPutBack[:min(len(f.LastPutBack), 5)], ", "), more)
	}
	return fmt.Sprintf("%d put back as declared since the agent started (changed on this host), the last at %s: %s",
		f.PutBack, f.LastPutBackAt.UTC().Format(time.RFC3339), last)
}

func (v agentView) String() string {
	since := v.Since.UTC().Format(time.RFC3339)
	switch {
	case v.CannotAsk != "":
		return "unknown: " + v.CannotAsk
	case !v.Running:
		return "not running (no agent answers on " + agent.SocketName + ")"
	case v.Unanswered != "":
		return "running, but it did not answer on " + agent.SocketName + " (" + v.Unanswered + "; it answers only its own user and root)"
	case !v.Known:
		return "running (a version that does not say whether it reaches the mesh)"
	case v.Connected && v.Synced:
		return fmt.Sprintf("connected to %s since %s, synced", v.Broker, since)
	case v.Connected && v.Error != "":
		return fmt.Sprintf("connected to %s since %s, NOT SYNCED (%s): it keeps trying", v.Broker, since, v.Error)
	case v.Connected:
		return fmt.Sprintf("connected to %s since %s, syncing", v.Broker, since)
	}
	return fmt.Sprintf("running; the mesh is UNREACHABLE since %s (%s): it keeps trying, runs hooks and retries here meanwhile, and reports their outcome once it reaches the mesh", since, v.Error)
}

// pipeWaiting says, once, on stderr, that meshhost waits for what writes to the
// pipe named as file: a FIFO nothing writes to is waited on for readfile.PipeWait,
// which without a word looks like a command that hangs.
func pipeWaiting(file string, cio *cliIO) func() {
	return func() {
		fmt.Fprintf(cio.stderr, "meshhost enrol: %s is a pipe; waiting up to %s for what writes to it (Ctrl-C to stop)\n", file, readfile.PipeWait)
	}
}
