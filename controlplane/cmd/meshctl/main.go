// Command meshctl is the mesh's operator tool and control-plane daemon.
//
//	meshctl bootstrap --mesh demo --listen 127.0.0.1:7300 --data ./cp
//	meshctl serve     --data ./cp
//	meshctl token     --data ./cp --node web-1 --ttl 15m > token.txt
//	meshctl declare   --data ./cp --node web-1 --file web.json
//	meshctl nodes     --data ./cp [--json]
//	meshctl revoke    --data ./cp web-1
//	meshctl demo
//
// Exit codes: 0 success; 1 failure; 2 usage error; 3 the control plane could not be
// reached or has no leader; 4 the control plane refused the request; 5 declare --wait
// ended with nodes that failed or did not answer.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/bootstrap"
	"mesh/controlplane/datadir"
	"mesh/controlplane/join"
	"mesh/controlplane/operator"
	"mesh/controlplane/pki"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitUnreachable = 3
	exitRefused     = 4
)

// command is one meshctl subcommand.
type command struct {
	name    string
	summary string
	usage   string // argument synopsis after the name
	// setup declares the command's flags and returns the function that runs it.
	setup func(fs *flag.FlagSet, io *cliIO) func(args []string) error
}

// cliIO is the command's standard streams.
type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func commands() []command {
	return []command{
		bootstrapCommand(),
		serveCommand(),
		tokenCommand(),
		declareCommand(),
		nodesCommand(),
		statusCommand(),
		revokeCommand(),
		labelCommand(),
		joinCommand(),
		controlCommand(),
		signingKeyCommand(),
		demoCommand(),
		versionCommand(),
	}
}

func main() {
	os.Exit(run(os.Args[1:], &cliIO{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
}

// run executes a command line and returns the exit code.
func run(args []string, cio *cliIO) int {
	stdout, stderr := cio.stdout, cio.stderr
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var cmd *command
	for i := range cmds {
		if cmds[i].name == args[0] {
			cmd = &cmds[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "meshctl: unknown command %q\n\n", args[0])
		printUsage(stderr, cmds)
		return exitUsage
	}
	fs := flag.NewFlagSet("meshctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	exec := cmd.setup(fs, cio)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: meshctl %s %s\n\n%s\n\nflags:\n", cmd.name, cmd.usage, cmd.summary)
		fs.PrintDefaults()
	}
	for _, a := range args[1:] {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout) // asked for, help is output, not an error
		}
	}
	positional, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK // the flag package printed the usage
	}
	if err != nil {
		return exitUsage // the flag package already said why
	}
	return exitCode(stderr, cmd.name, exec(positional))
}

// exitCode reports err and maps it to meshctl's exit codes.
func exitCode(stderr io.Writer, name string, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "meshctl %s: %v\n", name, err)
	var ue usageError
	var ae *api.Error
	var oe *bootstrap.OptionError
	switch {
	case errors.As(err, &ue), errors.As(err, &oe):
		fmt.Fprintf(stderr, "run `meshctl %s --help` for usage\n", name)
		return exitUsage
	case errors.Is(err, operator.ErrUnreachable), errors.Is(err, operator.ErrNoLeader):
		return exitUnreachable
	case errors.Is(err, join.ErrRefused), errors.Is(err, join.ErrToken), errors.Is(err, pki.ErrPinMismatch):
		return exitRefused
	case errors.As(err, &ae):
		if ae.Code == api.CodeUnavailable {
			return exitUnreachable
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

// parseInterspersed parses flags wherever they appear among positional arguments, as
// operators expect from `meshctl revoke web-1 --data ./cp`.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if rest[0] == "--" {
			return append(positional, rest[1:]...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

func printUsage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "meshctl operates a mesh: bootstrap it, serve its control plane, mint tokens, declare state, watch nodes.")
	fmt.Fprintln(w, "\nusage: meshctl <command> [flags]\n\ncommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-12s %s\n", c.name, firstLine(c.summary))
	}
	fmt.Fprintln(w, "\nrun `meshctl <command> --help` for a command's flags.")
	fmt.Fprintln(w, "exit codes: 0 ok, 1 failure, 2 usage, 3 control plane unreachable, 4 refused by the control plane, 5 declare --wait: not converged")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// labelFlag is a repeatable k=v flag.
type labelFlag map[string]string

func (l labelFlag) String() string {
	parts := make([]string, 0, len(l))
	for k, v := range l {
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, ",")
}

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not key=value", v)
	}
	l[k] = val
	return nil
}

func noPositional(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// controlPlaneFlags are the flags of every command that calls a running control
// plane: which data directory's configuration and credentials to use, and how long
// to wait while no control node serves (an election, a daemon still starting).
type controlPlaneFlags struct {
	dir        string
	leaderWait time.Duration
}

func (f *controlPlaneFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "data", "", "data directory of a control node (required)")
	fs.DurationVar(&f.leaderWait, "leader-wait", operator.DefaultLeaderWait, "how long to wait while no control node serves the request (an election); 0 fails at once")
}

// options are the operator client's options the flags ask for.
func (f *controlPlaneFlags) options() (operator.Options, error) {
	switch {
	case f.leaderWait < 0:
		return operator.Options{}, usagef("--leader-wait %s: must not be negative", f.leaderWait)
	case f.leaderWait == 0:
		return operator.Options{LeaderWait: -1}, nil // negative there means do not wait
	}
	return operator.Options{LeaderWait: f.leaderWait}, nil
}

// dial connects to the control plane of f.dir.
func (f *controlPlaneFlags) dial() (*operator.Client, error) {
	o, err := f.options()
	if err != nil {
		return nil, err
	}
	return operator.Dial(datadir.Dir(f.dir), o)
}

// call runs one operator API call.
func (f *controlPlaneFlags) call(op string, req, res any) error {
	c, err := f.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Call(op, req, res)
}
