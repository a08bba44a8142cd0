package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
	"mesh/declarations"
	"mesh/host/readfile"
	"mesh/host/statedir"
	"mesh/tokenfmt"
)

func declareCommand() command {
	return command{
		name:    "declare",
		changes: true,
		usage:   "--data DIR --file BODY.json (--node ID... | --role R | --label k=v... | --all) [--dry-run | --wait [30s]] [--request-id HEX] [--json]",
		summary: `Declare the whole desired state of nodes, signed, one version per node.
Each selected node gets its own signed declaration at its own next version.
The body file is JSON:
  {"files":[{"path":"etc/app.conf","content":"text","mode":"0640"}]}
with content_base64 instead of content for binary data; paths are relative to the
host's managed root. "-" reads the body from stdin. A node's files that the body
no longer names are removed from it. A body file another user owns, or others may
write, is refused (exit 7): it would write files as root on every node it names.
--dry-run asks the control plane what the declaration would change on each node,
grouped by change (files added +, changed ~, removed -, and the version each node
would get), and declares nothing; it exits 0 whatever it would change. File
content is never shown: paths, modes, owners and sizes.
A declaration goes under a request id the control plane carries out once: meshctl
makes one for each run, and says it when the answer did not come (exit 3) or the
command was interrupted (exit 9). Run again with --request-id ID (32 hex digits), the
declaration is carried out at most once within the hour after it was: a rerun after it
was is answered with its versions, and declares nothing more. Scripts that retry can
make their own id (openssl rand -hex 16) and give it to every attempt.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			fs := c.Flags()
			var (
				cp          controlPlaneFlags
				file, role  string
				nodes       stringList
				labels      = labelFlag{}
				all, asJSON bool
				dryRun      bool
				requestID   string
			)
			cp.register(c, cio)
			fs.StringVar(&file, "file", "", "declaration body, JSON (required; - for stdin)")
			_ = c.MarkFlagFilename("file", "json")
			fs.Var(&nodes, "node", "target node id (repeatable)")
			fs.StringVar(&role, "role", "", "target every node of this role")
			fs.Var(valuedLabels{labelFlag: labels}, "label", "target nodes carrying this label k=v (repeatable: all must match; v may not be empty)")
			fs.BoolVar(&all, "all", false, "target every enrolled node")
			fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
			fs.BoolVar(&dryRun, "dry-run", false, "show what the declaration would change on each node, and declare nothing")
			fs.StringVar(&requestID, "request-id", "", "the declaration's request id, 32 hex digits: under an id carried out within the hour, nothing more is declared (a retry, from any process)")
			wait := waitFlag{}
			fs.Var(&wait, "wait", "wait until the nodes applied it: --wait (2m), --wait 30s or --wait=30s (1s to 1h); exits 5 naming the nodes that failed or did not answer")
			fs.Lookup("wait").NoOptDefVal = defaultWait.String()
			_ = c.RegisterFlagCompletionFunc("node", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return cp.nodeNames(nodesNotRevoked), cobra.ShellCompDirectiveNoFileComp
			})
			_ = c.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]cobra.Completion{"worker"}, cobra.ShellCompDirectiveNoFileComp))
			return func(args []string) error {
				if len(args) > 0 {
					// A duration given without --wait: say what --wait wants.
					if _, err := time.ParseDuration(args[0]); err == nil {
						return usagef("unexpected argument %q: --wait takes a positive duration such as 30s (without --wait, declare does not wait)", args[0])
					}
					// A number: `--wait 30` left it apart, as a duration has a
					// unit (a walkthrough was told only "unexpected argument").
					if _, err := strconv.ParseUint(args[0], 10, 32); err == nil && fs.Changed("wait") {
						return usagef("unexpected argument %q: --wait takes a duration with its unit, such as --wait %ss (1s to 1h); nothing was declared", args[0], args[0])
					}
				}
				if len(args) > 0 && tokenfmt.CheckNodeID(args[0]) == nil && len(nodes) == 0 {
					// A node named as revoke and status take one (a walkthrough).
					return usagef("unexpected argument %q: declare names its nodes with --node (--node %s), or selects them with --label, --role or --all", args[0], args[0])
				}
				if err := noPositional(args); err != nil {
					return err
				}
				if file == "" {
					return usagef("--file is required")
				}
				if len(nodes) == 0 && role == "" && len(labels) == 0 && !all {
					return usagef("say which nodes the declaration is for: --node, --role, --label or --all")
				}
				if all && (len(nodes) > 0 || role != "" || len(labels) > 0) {
					// The selectors add up, and --all takes in every node: a declaration is
					// each node's whole state, so --all --label tier=web would replace the
					// files of every node, not those of the web tier.
					return usagef("--all targets every node: give it alone, or --node, --role and --label without it")
				}
				if dryRun && wait.d != 0 {
					return usagef("--dry-run declares nothing, so there is nothing to --wait for: give one or the other")
				}
				if err := checkTargets(nodes, role); err != nil {
					return err
				}
				given := fs.Changed("request-id")
				if given && dryRun {
					return usagef("--dry-run declares nothing, so it takes no --request-id")
				}
				requestID = strings.ToLower(requestID)
				if given {
					if err := api.CheckRequestID(requestID); err != nil {
						return usagef("--request-id: %v (make one with: openssl rand -hex 16)", err)
					}
				} else {
					requestID = api.NewRequestID()
				}
				raw, err := readBody(file, cio)
				if err != nil {
					return err
				}
				body, err := declarations.ParseBody(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", file, err)
				}
				canonical, _ := json.Marshal(body)
				client, err := cp.dial()
				if err != nil {
					return err
				}
				defer client.Close()
				var res api.DeclareResult
				req := api.DeclareRequest{Nodes: nodes, Role: role, Labels: labels, All: all, Body: canonical, DryRun: dryRun}
				if dryRun {
					if err := client.Call(api.OpDeclare, req, &res); err != nil {
						return olderDryRun(err)
					}
				} else {
					rerun := declareRerun(requestID)
					cio.rerunWith(rerun)
					if err := client.CallRequest(api.OpDeclare, requestID, given, req, &res); err != nil {
						return declareFailed(err, rerun)
					}
				}
				if dryRun {
					if res.Plan == nil {
						// Only a control plane that read dry_run answers: anything
						// else would have refused it.
						return errors.New("the control plane answered the dry run as a declaration, without a plan: it may have declared the body; look at the declared versions (`meshctl nodes`) before anything else")
					}
					if asJSON {
						return writeJSON(cio.stdout, res)
					}
					writePlan(cio.stdout, res.Plan)
					return nil
				}
				if asJSON && wait.d == 0 {
					return writeJSON(cio.stdout, res)
				}
				switch {
				case res.Repeated && given:
					// Said on stderr, so that stdout reads as a declaration's
					// always does.
					fmt.Fprintf(cio.stderr, "meshctl declare: a declaration under request id %s was carried out already (an earlier run), once: nothing more was declared; the versions below are those its nodes are declared at now\n", requestID)
				case res.Repeated:
					fmt.Fprintln(cio.stderr, "meshctl declare: this declaration was sent again (its answer was lost, or slow to come): the first sending had been carried out, once; the versions below are those its nodes are declared at now")
				}
				// The versions are said before any wait: on stdout, or with --json on
				// stderr, as the progress is, so that a wait interrupted or failing
				// leaves them said (stdout holds the one JSON object, written once
				// the wait ends). With --json they went nowhere until then, and
				// a wait that did not end left none.
				versions := cio.stdout
				if asJSON {
					versions = cio.stderr
				}
				for _, a := range res.Assignments {
					fmt.Fprintf(versions, "declared %s v%d\n", a.Node, a.Version)
				}
				for _, s := range res.Skipped {
					fmt.Fprintf(versions, "skipped  %s (revoked or not a worker)\n", s)
				}
				for _, p := range res.NoLonger {
					switch p.State {
					case api.ProgressSuperseded:
						fmt.Fprintf(versions, "superseded %s (declared another body since, v%d: this one is no longer what it is to hold)\n", p.Node, p.Version)
					case api.ProgressRevoked:
						fmt.Fprintf(versions, "revoked  %s (since, at %s: it will not apply this one)\n", p.Node, p.RevokedAt.UTC().Format(time.RFC3339))
					}
				}
				if res.Body != "" && len(res.Assignments) > 0 {
					// What names this rollout once the wait, or the terminal, is gone.
					fmt.Fprintf(versions, "body     %s (meshctl status --body %s: its nodes, and which have not applied it)\n", res.Body[:min(12, len(res.Body))], res.Body[:min(12, len(res.Body))])
				}
				cio.carriedOut()
				if wait.d == 0 {
					return nil
				}
				// Progress goes to stderr with --json too: stdout holds the one
				// JSON document, and a wait of minutes is not left silent.
				report, err := waitConverged(client, res.Assignments, res.Body, wait.d, cio.stderr, cio.stderrIsTTY)
				if err != nil {
					return &waitStoppedError{err: err}
				}
				report.noLonger(res.NoLonger)
				if asJSON {
					if err := writeJSON(cio.stdout, struct {
						api.DeclareResult
						Wait convergence `json:"wait"`
					}{res, report}); err != nil {
						return err
					}
				}
				return report.err()
			}
		},
	}
}

// declareRerun says how a declaration whose outcome is not known (no answer, exit 3;
// interrupted, exit 9) is sent again safely: under its request id.
func declareRerun(id string) string {
	return fmt.Sprintf("it was sent under request id %s: run the same command again with --request-id %s added, and it is carried out at most once (within the hour: a rerun after it was is answered with its versions)", id, id)
}

// declareFailed explains a declaration that failed: without an answer (exit 3) it
// may have been carried out, and rerun names the id that makes running it again
// safe.
func declareFailed(err error, rerun string) error {
	if errors.Is(err, operator.ErrNoAnswer) || errors.Is(err, operator.ErrConnectionLost) {
		return fmt.Errorf("%w\n%s", err, rerun)
	}
	return err
}

// waitStoppedError is a declaration carried out whose wait for its nodes stopped
// (err: a read that failed). The declaration stands, and declaring again would
// declare another version: the read's own advice, "run it again", is left out of
// what is said (it said both "run it again" and "not declare again").
type waitStoppedError struct{ err error }

func (e *waitStoppedError) Error() string {
	cause := strings.ReplaceAll(e.err.Error(), "; run it again", "")
	return "the declaration was carried out (its versions are above), and waiting for its nodes stopped: " + cause +
		"; the declaration stands: to see where its nodes are, run meshctl status, not declare again (that would declare another version)"
}

func (e *waitStoppedError) Unwrap() error { return e.err }

// readBody reads a declaration body, refusing anything too large to be signed before
// reading it whole.
func readBody(file string, cio *cliIO) ([]byte, error) {
	check := trustedBody(file, cio)
	if file == "-" && cio.stdinIsTTY {
		// Typed or pasted: without a word, the command looks stuck.
		fmt.Fprintln(cio.stderr, "meshctl declare: reading the declaration body from the terminal; end it with Ctrl-D on a line of its own (Ctrl-C to stop)")
	}
	if f, ok := cio.stdin.(*os.File); ok && file == "-" {
		// `declare --file - < app.json`: the file the shell opened is judged as
		// --file's is.
		if fi, err := f.Stat(); err == nil {
			if err := check(fi); err != nil {
				return nil, err
			}
		}
	}
	data, err := readBoundedChecked(file, cio.stdin, declarations.MaxEnvelopeSize,
		"the most a signed declaration can carry; split the state or ship large files another way", check, pipeWaiting("declare", file, cio))
	if errors.Is(err, fs.ErrNotExist) {
		// Named as join names its --token-file: the flag, and what to give it
		// (it said only "open web.json: no such file or directory").
		return nil, &missingFileError{err: err, msg: fmt.Sprintf(
			`--file %s does not exist: give the file the declaration body is in (JSON such as {"files":[{"path":"etc/app.conf","content":"..."}]}), or --file - with the body on stdin`, file)}
	}
	// A UTF-8 byte order mark, which some editors write first, is not JSON; the
	// JSON standard lets a reader ignore it, and the file is the operator's own
	// (it was refused as "invalid character 'ï'").
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	if err == nil && len(bytes.TrimSpace(data)) == 0 {
		// The parser would call it truncated JSON, as if part of it were lost.
		return nil, fmt.Errorf(`%s is empty: a declaration body is a JSON object, such as {"files":[{"path":"etc/app.conf","content":"..."}]}`, file)
	}
	return data, err
}

// missingFileError is a file named on the command line that does not exist, said
// with the flag that named it and what to give it; it is still fs.ErrNotExist.
type missingFileError struct {
	err error
	msg string
}

func (e *missingFileError) Error() string { return e.msg }
func (e *missingFileError) Unwrap() error { return e.err }

// readBounded reads a file ("-": stdin) of at most max bytes, refusing a larger one
// before reading it whole; tooLarge says why no such file can be right. A pipe
// (`--file <(generate)`) is read until its writer closes it; a FIFO nothing writes
// to is given up on after readfile.PipeWait, and a directory or a device is refused.
func readBounded(file string, stdin io.Reader, max int64, tooLarge string) ([]byte, error) {
	return readBoundedChecked(file, stdin, max, tooLarge, nil, nil)
}

// readBoundedChecked is readBounded with check called with the file opened, before
// it is read (readfile.StreamChecked), and waiting, when set, once a pipe brought
// nothing for a second (readfile.StreamWaiting); stdin is not checked here.
func readBoundedChecked(file string, stdin io.Reader, max int64, tooLarge string, check func(fs.FileInfo) error, waiting func()) ([]byte, error) {
	var data []byte
	var err error
	if file == "-" && stdin != nil {
		data, err = io.ReadAll(io.LimitReader(stdin, max+1))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", file, err)
		}
		if int64(len(data)) > max {
			err = readfile.ErrTooLarge
		}
	} else {
		data, err = readfile.StreamWaiting(file, max, readfile.PipeWait, check, waiting)
	}
	if errors.Is(err, readfile.ErrTooLarge) {
		return nil, tooLargeError(fmt.Sprintf("%s is larger than %d bytes, %s", file, max, tooLarge))
	}
	if err != nil {
		return nil, err
	}
	return data, nil
}

// trustedBody judges the file a declaration is read from, as opened: what it holds
// becomes files, as root, on every node declared. A file another user owns (other
// than root and the one who ran meshctl through sudo), or that others may write, is
// refused (exit 7, statedir.ErrUnsafePath): that user could have put their own
// declaration in it, and would write the fleet's files through the operator. A file
// its group may write is taken, with a warning: under the umask 002 of many
// systems, a team's files are, and the group is then usually the owner's own. A
// pipe is not judged: `cat FILE | meshctl declare --file -` takes a file the
// operator vouches for.
func trustedBody(name string, cio *cliIO) func(fs.FileInfo) error {
	invoker := statedir.Invoker(cio.getenv)
	if name == "-" {
		name = "on stdin"
	}
	return func(fi fs.FileInfo) error {
		shared := fi
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o020 != 0 && fi.Mode().Perm()&0o002 == 0 {
			// Judged as if its group could not write it; warned of below.
			shared = modeMasked{fi, 0o020}
		}
		if err := statedir.CheckTrusted(&statedir.InputError{What: "the declaration file", Name: name, Holds: "declaration",
			Could:  "written the declaration of their choice in it, files this command would have every node it names write as root",
			Advice: ", or, if you trust whoever may write it, pipe it in: cat FILE | meshctl declare --file - ..."}, shared, invoker); err != nil {
			return err
		}
		if shared != fi {
			fmt.Fprintf(cio.stderr, "warning: the declaration file %s may be written by its group (mode %#o): any member could have changed what this declares to every node it names\n",
				name, fi.Mode().Perm())
		}
		return nil
	}
}

// modeMasked is a file's information with bits of its mode cleared.
type modeMasked struct {
	fs.FileInfo
	clear fs.FileMode
}

func (m modeMasked) Mode() fs.FileMode { return m.FileInfo.Mode() &^ m.clear }

// tooLargeError says which input is over its cap, and is readfile.ErrTooLarge to a
// caller that branches on it.
type tooLargeError string

func (e tooLargeError) Error() string { return string(e) }
func (e tooLargeError) Unwrap() error { return readfile.ErrTooLarge }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// pipeWaiting says, once, on stderr, that meshctl command waits for what writes to
// the pipe named as file: a FIFO nothing writes to is waited on for
// readfile.PipeWait, which without a word looks like a command that hangs.
func pipeWaiting(command, file string, cio *cliIO) func() {
	return func() {
		fmt.Fprintf(cio.stderr, "meshctl %s: %s is a pipe; waiting up to %s for what writes to it (Ctrl-C to stop)\n", command, file, readfile.PipeWait)
	}
}
