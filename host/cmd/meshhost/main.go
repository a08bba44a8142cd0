// Command meshhost is the host agent: it adopts this machine into a mesh from one
// token, then keeps it in line with the declarations the mesh signs.
//
//	meshhost enrol --state ./h1 < token.txt     (or --token-file F, or MESH_TOKEN)
//	meshhost run   --state ./h1 --root ./h1/managed
//	meshhost status --state ./h1 [--json]
//
// Exit codes: 0 success; 1 failure; 2 usage; 3 the token cannot be used or the mesh
// refused it; 4 the broker is not the mesh the token names (retrying will not help);
// 5 the identity file is in the way (already enrolled, unreadable, truncated, corrupt);
// 6 this node was revoked; 7 the mesh could not be reached (retrying may help).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"mesh/host/agent"
	"mesh/host/enrol"
	"mesh/host/hooks"
	"mesh/host/identity"
	"mesh/host/state"
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
)

// maxTokenInput bounds what is read as a token: a token is a few hundred bytes.
const maxTokenInput = 16 << 10

type cliIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	stdinIsTTY     bool
}

func main() {
	fi, _ := os.Stdin.Stat()
	tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0
	os.Exit(run(os.Args[1:], &cliIO{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, stdinIsTTY: tty}))
}

func run(args []string, cio *cliIO) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(cio.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var err error
	switch args[0] {
	case "enrol", "enroll":
		err = cmdEnrol(args[1:], cio)
	case "run":
		err = cmdRun(args[1:], cio)
	case "status":
		err = cmdStatus(args[1:], cio)
	case "version":
		fmt.Fprintln(cio.stdout, enrol.Agent)
	default:
		fmt.Fprintf(cio.stderr, "meshhost: unknown command %q\n\n", args[0])
		usage(cio.stderr)
		return exitUsage
	}
	return exitCode(cio.stderr, args[0], err)
}

func usage(w io.Writer) {
	fmt.Fprint(w, `meshhost adopts this machine into a mesh from one token and applies what the mesh declares.

usage:
  meshhost enrol  --state DIR [--token-file F]   read the token from stdin, F, or MESH_TOKEN
  meshhost run    --state DIR --root DIR [--hooks F]   stay connected and apply declarations
  meshhost status --state DIR [--json]           show this node's identity and applied version
  meshhost version

exit codes: 0 ok, 1 failure, 2 usage, 3 token unusable or refused, 4 not the mesh (retrying
will not help), 5 identity file in the way, 6 revoked, 7 mesh unreachable (retrying may help)
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
	fmt.Fprintf(stderr, "meshhost %s: %v\n", name, err)
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, enrol.ErrSubstituted):
		return exitSubstituted
	case errors.Is(err, agent.ErrRevoked), errors.Is(err, agent.ErrIdentityRefused):
		return exitRevoked
	case errors.Is(err, identity.ErrAlreadyEnrolled), errors.Is(err, identity.ErrUnreadable),
		errors.Is(err, identity.ErrTruncated), errors.Is(err, identity.ErrCorrupt), errors.Is(err, identity.ErrNotEnrolled),
		errors.Is(err, identity.ErrInvalid),
		errors.Is(err, state.ErrUnreadable), errors.Is(err, state.ErrTruncated), errors.Is(err, state.ErrCorrupt):
		return exitIdentity
	case errors.Is(err, enrol.ErrToken):
		return exitToken
	case errors.Is(err, enrol.ErrRefused):
		var re *enrol.RefusedError
		if errors.As(err, &re) && re.Retryable() {
			return exitUnreachable
		}
		return exitToken
	case errors.Is(err, enrol.ErrUnreachable):
		return exitUnreachable
	}
	return exitFailure
}

// synopsis is a subcommand's usage line and description.
func synopsis(name string) string {
	switch name {
	case "enrol":
		return "--state DIR [--token-file F]   (the token on stdin, in F, or in MESH_TOKEN)\n\nAdopt this machine into the mesh the token names: pin checked before any credential\nleaves, a key generated here, the answer verified, the identity saved, then a\nreconnection with the node's own key. Each step is printed."
	case "run":
		return "--state DIR --root DIR [--hooks F]\n\nStay connected as this node and keep the managed root in line with its declarations:\nevery one verified (signature, audience, version, validity) before it is applied."
	case "status":
		return "--state DIR [--json]\n\nShow this node's identity, applied version and last error."
	}
	return ""
}

func newFlags(name string, cio *cliIO) *flag.FlagSet {
	fs := flag.NewFlagSet("meshhost "+name, flag.ContinueOnError)
	fs.SetOutput(cio.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: meshhost %s %s\n\nflags:\n", name, synopsis(name))
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string, cio *cliIO) error {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(cio.stdout) // asked for, help is output, not an error
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (the token is never given on the command line: use stdin, --token-file or MESH_TOKEN)", fs.Arg(0))}
	}
	return nil
}

func cmdEnrol(args []string, cio *cliIO) error {
	fs := newFlags("enrol", cio)
	stateDir := fs.String("state", "", "state directory for the identity and applied state (required)")
	tokenFile := fs.String("token-file", "", "read the token from this file instead of stdin")
	timeout := fs.Duration("timeout", 20*time.Second, "how long to wait for the mesh's answer")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	if *stateDir == "" {
		return usageError{"--state is required"}
	}
	text, err := readToken(*tokenFile, cio)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := enrol.Enrol(ctx, enrol.Options{StateDir: *stateDir, Token: text, Out: cio.stdout, RequestTimeout: *timeout})
	if err != nil {
		return err
	}
	fmt.Fprintf(cio.stdout, "enrolled %s in mesh %s. next: meshhost run --state %s --root DIR\n", res.Identity.Node, res.Identity.Mesh, *stateDir)
	return nil
}

// readToken takes the token from --token-file, MESH_TOKEN or stdin, in that order. It
// never comes from the command line, where other users and shell history could see it.
func readToken(file string, cio *cliIO) (string, error) {
	var r io.Reader
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", fmt.Errorf("%w: %v", enrol.ErrToken, err)
		}
		defer f.Close()
		r = f
	case cio.getenv("MESH_TOKEN") != "":
		return cio.getenv("MESH_TOKEN"), nil
	default:
		if cio.stdinIsTTY {
			fmt.Fprint(cio.stderr, "paste the token and press Enter: ")
			line, err := bufio.NewReader(io.LimitReader(cio.stdin, maxTokenInput)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return "", err
			}
			return line, nil
		}
		r = cio.stdin
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTokenInput+1))
	if err != nil {
		return "", fmt.Errorf("%w: read: %v", enrol.ErrToken, err)
	}
	if len(data) > maxTokenInput {
		return "", fmt.Errorf("%w: the input is over %d bytes; a token is one line of a few hundred characters", enrol.ErrToken, maxTokenInput)
	}
	return string(data), nil
}

func cmdRun(args []string, cio *cliIO) error {
	fs := newFlags("run", cio)
	stateDir := fs.String("state", "", "state directory written by enrol (required)")
	root := fs.String("root", "", "managed root: declared files are kept here (required)")
	heartbeat := fs.Duration("heartbeat", 15*time.Second, "how often to report status when nothing changes")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logJSON := fs.Bool("log-json", false, "log JSON lines")
	hooksFile := fs.String("hooks", "", "local hooks file: commands to run after declared files change (a declaration can never add one)")
	if err := parse(fs, args, cio); err != nil {
		return err
	}
	if *stateDir == "" || *root == "" {
		return usageError{"--state and --root are required"}
	}
	if *heartbeat < time.Second {
		return usageError{"--heartbeat must be at least 1s"}
	}
	var lvl slog.Level
	var err error
	if err = lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageError{"--log-level: use debug, info, warn or error"}
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	var log *slog.Logger
	if *logJSON {
		log = slog.New(slog.NewJSONHandler(cio.stderr, hopts))
	} else {
		log = slog.New(slog.NewTextHandler(cio.stderr, hopts))
	}
	var hk hooks.Config
	if *hooksFile != "" {
		if hk, err = hooks.Load(*hooksFile); err != nil {
			return usageError{err.Error()}
		}
	}
	a, err := agent.New(agent.Options{StateDir: *stateDir, Root: *root, Logger: log, Heartbeat: *heartbeat, Hooks: hk})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = a.Run(ctx)
	if errors.Is(err, agent.ErrRevoked) || errors.Is(err, agent.ErrIdentityRefused) {
		return fmt.Errorf("%w\nthe agent stopped. To adopt this machine again, remove %s and enrol with a new token", err, identity.Path(*stateDir))
	}
	return err
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
	id, err := identity.Load(*stateDir)
	if err != nil {
		return err
	}
	applied, err := state.Load(*stateDir)
	if err != nil {
		return err
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
		Managed        []string `json:"managed"`
	}{id.Mesh, id.Node, id.PublicKey, id.Brokers, applied.HaveApplied, applied.Version, "", applied.KeyringEpoch, "", applied.Managed}
	if applied.HaveApplied {
		out.ExpiresAt = applied.ExpiresAt.Format(time.RFC3339)
	}
	if applied.LastErrorCode != "" {
		out.LastError = applied.LastErrorCode + ": " + applied.LastError
	}
	if *asJSON {
		enc := json.NewEncoder(cio.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	ver := "none yet"
	if out.HaveApplied {
		ver = fmt.Sprintf("v%d (valid until %s)", out.AppliedVersion, out.ExpiresAt)
		if time.Now().After(applied.ExpiresAt) {
			ver += " STALE: expired without a fresh one; the files stay as they are"
		}
	}
	fmt.Fprintf(cio.stdout, "node      %s\nmesh      %s\nkey       %s\nbrokers   %s\napplied   %s\nkeyring   epoch %d\nmanaged   %d file(s)\n",
		out.Node, out.Mesh, out.PublicKey, strings.Join(out.Brokers, ", "), ver, out.KeyringEpoch, len(out.Managed))
	if out.LastError != "" {
		fmt.Fprintf(cio.stdout, "last error %s\n", out.LastError)
	}
	return nil
}
