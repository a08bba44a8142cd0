package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/spf13/cobra"

	"mesh/controlplane/backup"
	"mesh/controlplane/daemon"
	"mesh/controlplane/datadir"
)

// checkStoreWait is how long `meshctl check` waits for a process that holds raft.db
// open for writing before it says the directory is in use: serve holds it for as
// long as it runs.
const checkStoreWait = 2 * time.Second

func checkCommand() command {
	return command{
		name:  "check",
		usage: "--data DIR [--json]",
		summary: `Check a control node's data directory as serve would at start, without starting it.
Meant for a backup (one serve --backup-dir took, or a copy of a data directory),
or the directory of a stopped node (docs/operations.md, "Checking a copy"). It
makes serve's start-up checks of the files (removed.json, owners and modes,
mesh.json, ca.pem against mesh.json's CA pin,
tls.pem and tls-key.pem, the certificates' dates, signing-key.pem,
control-curve.nk, admin.creds), reads the Raft store as serve would start from it
(raft.db opened read-only: its last index and term, the snapshot it starts from,
the members), replays the state it holds in memory, and checks the signing keys
against the state's keyring. It writes nothing and starts nothing; it holds no lock of
the directory's (it tries it, shared, for an instant), only raft.db's shared lock
while it reads, which a serve started meanwhile waits for.
Run it as the user serve runs as: the owners are judged against that user.
It exits 0 when serve would start on the directory (naming what serve would warn
of), else with the code serve would stop with: 7 for a file missing, damaged, of
the wrong owner or mode, or a certificate expired or not valid yet, a Raft store
damaged or lost, a log of a newer meshctl; 6 for a node that was removed; 1 for
anything else. A directory serve (or bootstrap, join) is using is refused, exit 8:
check a copy instead. With --json it prints its report whatever the verdict.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var dir string
			var asJSON bool
			c.Flags().StringVar(&dir, "data", "", "the data directory to check: a copy of a control node's, or a stopped node's (required)")
			c.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
			_ = c.MarkFlagDirname("data")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				if dir == "" {
					return usagef("--data is required")
				}
				return checkDataDir(cio, datadir.Dir(dir), time.Now(), asJSON)
			}
		},
	}
}

// checkFailedError is a check that failed: its message says how many failed (the
// report, above it, says which and why); it unwraps to the first, which is what
// serve would stop with, for the exit code.
type checkFailedError struct {
	failed int
	first  error
}

func (e *checkFailedError) Error() string {
	return fmt.Sprintf("serve would not start on this data directory: %d check(s) failed (the report says which, and what to do); mend the first, then run meshctl check again", e.failed)
}

func (e *checkFailedError) Unwrap() error { return e.first }

// checkDataDir checks dir at now and reports it on cio.stdout.
func checkDataDir(cio *cliIO, dir datadir.Dir, now time.Time, asJSON bool) error {
	if _, err := os.Stat(string(dir)); errors.Is(err, fs.ErrNotExist) {
		// As serve says of it.
		if _, cerr := dir.LoadConfig(); cerr != nil {
			return cerr
		}
	}
	if err := dir.CheckNotInUse(); err != nil {
		if errors.Is(err, datadir.ErrInUse) {
			return fmt.Errorf("%w; meshctl check reads a stopped node's directory or a copy of it: check a copy: a backup serve took (--backup-dir), or one taken while serve was stopped (docs/operations.md, \"Backing up\")", err)
		}
		return err
	}
	report := daemon.CheckDir(dir, now, checkStoreWait)
	var err error
	if first := report.Err(); first != nil {
		err = &checkFailedError{failed: report.Failed(), first: first}
	}
	if asJSON {
		if werr := writeJSON(cio.stdout, checkJSONOf(dir, report, err)); werr != nil {
			return werr
		}
		return err
	}
	printCheck(cio.stdout, dir, report, err)
	return err
}

// printCheck writes the report as text.
func printCheck(w io.Writer, dir datadir.Dir, r daemon.CheckReport, err error) {
	head := "data directory " + string(dir)
	if r.Config != nil {
		head += fmt.Sprintf(": control node %s of mesh %s", r.Config.Node, r.Config.Mesh)
		if len(r.Config.CAPin) >= backup.MeshTagLen {
			// As a backup's name has it: two meshes of one id (every mesh
			// bootstrapped with the defaults is cp-1's) told apart, a copy of
			// the other restored by mistake seen before it serves (a walkthrough).
			head += fmt.Sprintf(" (CA %s)", r.Config.CAPin[:backup.MeshTagLen])
		}
	}
	fmt.Fprintln(w, head)
	for _, c := range r.Checks {
		switch {
		case c.Err != nil:
			fmt.Fprintf(w, "  FAILED   %s: %s\n", c.Name, indentLines(c.Err.Error()))
		case c.Skipped != "":
			fmt.Fprintf(w, "  skipped  %s: not checked, as %s failed\n", c.Name, c.Skipped)
		default:
			fmt.Fprintf(w, "  ok       %s: %s\n", c.Name, c.Detail)
		}
		for _, warn := range c.Warnings {
			fmt.Fprintf(w, "  warning  %s: %s\n", c.Name, warn)
		}
	}
	if err != nil {
		return
	}
	// The index the state is as of: the log's last entry, or the snapshot's when
	// the log holds none after it (a backup serve took of itself).
	fmt.Fprintf(w, "serve would start on this data directory, at Raft index %d (meshctl serve --data %s)\n", r.Raft.Applied, dir)
}

// indentLines indents the lines of a message after its first under the report's.
func indentLines(s string) string {
	return strings.ReplaceAll(s, "\n", "\n           ")
}

// checkJSON is what `meshctl check --json` prints.
type checkJSON struct {
	Data string `json:"data"`
	Mesh string `json:"mesh,omitempty"`
	Node string `json:"node,omitempty"`
	// WouldStart: every check passed.
	WouldStart bool `json:"would_start"`
	// Exit is the exit code, the one serve would stop with.
	Exit   int             `json:"exit"`
	Checks []checkLineJSON `json:"checks"`
	Raft   *checkRaftJSON  `json:"raft,omitempty"`
	State  *checkStateJSON `json:"state,omitempty"`
}

type checkLineJSON struct {
	Name string `json:"name"`
	// Result is ok, failed or skipped.
	Result   string   `json:"result"`
	Detail   string   `json:"detail,omitempty"`
	Problem  string   `json:"problem,omitempty"`
	Needs    string   `json:"needs,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

type checkRaftJSON struct {
	FirstIndex  uint64               `json:"first_index"`
	LastIndex   uint64               `json:"last_index"`
	LastTerm    uint64               `json:"last_term"`
	CurrentTerm uint64               `json:"current_term"`
	Snapshot    *checkSnapshotJSON   `json:"snapshot,omitempty"`
	StateIndex  uint64               `json:"state_index"`
	Commands    int                  `json:"commands_after_snapshot"`
	Members     []checkMemberJSON    `json:"members"`
	PeersFile   bool                 `json:"peers_file,omitempty"`
	PassedOver  *checkPassedOverJSON `json:"passed_over,omitempty"`
}

type checkSnapshotJSON struct {
	ID    string `json:"id"`
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
}

type checkMemberJSON struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
}

type checkPassedOverJSON struct {
	File    string `json:"file"`
	Problem string `json:"problem"`
}

type checkStateJSON struct {
	Initialised  bool     `json:"initialised"`
	Hosts        int      `json:"hosts"`
	Revoked      int      `json:"revoked"`
	Forgotten    int      `json:"forgotten,omitempty"`
	ControlNodes []string `json:"control_nodes"`
	KeyringEpoch uint64   `json:"keyring_epoch"`
}

func checkJSONOf(dir datadir.Dir, r daemon.CheckReport, err error) checkJSON {
	out := checkJSON{Data: string(dir), WouldStart: err == nil, Exit: exitCode(io.Discard, "", err), Checks: []checkLineJSON{}}
	if r.Config != nil {
		out.Mesh, out.Node = r.Config.Mesh, r.Config.Node
	}
	for _, c := range r.Checks {
		l := checkLineJSON{Name: c.Name, Result: "ok", Detail: c.Detail, Warnings: c.Warnings}
		switch {
		case c.Err != nil:
			l.Result, l.Detail, l.Problem = "failed", "", c.Err.Error()
		case c.Skipped != "":
			l.Result, l.Needs = "skipped", c.Skipped
		}
		out.Checks = append(out.Checks, l)
	}
	if in := r.Raft; in != nil {
		rj := &checkRaftJSON{FirstIndex: in.FirstIndex, LastIndex: in.LastIndex, LastTerm: in.LastTerm, CurrentTerm: in.CurrentTerm,
			StateIndex: in.Applied, Commands: in.Commands, PeersFile: in.PeersFile, Members: []checkMemberJSON{}}
		if in.Snapshot != nil {
			rj.Snapshot = &checkSnapshotJSON{ID: in.Snapshot.ID, Index: in.Snapshot.Index, Term: in.Snapshot.Term}
		}
		for _, s := range in.Servers {
			suffrage := "voter"
			if s.Suffrage != raft.Voter {
				suffrage = strings.ToLower(s.Suffrage.String())
			}
			rj.Members = append(rj.Members, checkMemberJSON{ID: string(s.ID), Address: string(s.Address), Suffrage: suffrage})
		}
		if p := in.PassedOver; p != nil {
			rj.PassedOver = &checkPassedOverJSON{File: p.File, Problem: p.Problem}
		}
		out.Raft = rj
	}
	if s := r.State; s != nil {
		out.State = &checkStateJSON{Initialised: s.Initialised, Hosts: s.Hosts, Revoked: s.Revoked, Forgotten: s.Forgotten, ControlNodes: s.ControlNodes, KeyringEpoch: s.KeyringEpoch}
		if out.State.ControlNodes == nil {
			out.State.ControlNodes = []string{}
		}
	}
	return out
}
