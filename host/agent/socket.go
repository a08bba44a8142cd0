package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// SocketName is the agent's socket in its state directory, where `meshhost hooks
// retry` asks the running agent to run the owed hooks again. Others may not write
// the state directory (statedir), the socket is 0600, and on Linux the agent answers
// only a peer running as its own user or root (peerAllowed), whatever the modes. It
// only ever acts on this host's own hooks; what the control plane hears of it is the
// node's own status report, from the node's own identity.
const SocketName = "agent.sock"

// SocketPath is the agent's socket in stateDir.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// The requests the socket takes, each as a line.
const (
	RequestRetryHooks = "hooks retry"
	// RequestStatus asks whether the agent reaches the mesh (`meshhost status`).
	RequestStatus = "status"
)

// LinkStatus is the agent's answer to RequestStatus: whether it is connected to
// the mesh, and since when it is or is not.
type LinkStatus struct {
	Connected bool `json:"connected"`
	// Synced: the mesh acknowledged a sync on this connection.
	Synced bool `json:"synced"`
	// Broker is the broker connected to.
	Broker string `json:"broker,omitempty"`
	// Since is when the agent connected or, not connected, since when it is not
	// (its start, or the disconnection).
	Since time.Time `json:"since,omitzero"`
	// Error is why it is not connected (the last attempt's error) or, connected,
	// why it is not synced (the last sync's).
	Error string `json:"error,omitempty"`
	// Unsaved is set while the agent could not write its applied state (a disk
	// error): what it holds applied, which the state file `meshhost status`
	// reads does not say yet, and why. The agent tries again at each heartbeat.
	Unsaved *UnsavedState `json:"unsaved,omitempty"`
	// Files is what the file check found (nil before it compared anything or
	// found it could not), or that it never runs (--check-files 0): a host fixed
	// by hand sees whether its change was put back, or that it will not be.
	Files *FilesStatus `json:"files,omitempty"`
	// SharedKey is set while the mesh says that another machine holds this node's
	// key (one cloned after its enrolment).
	SharedKey *SharedKeyStatus `json:"shared_key,omitempty"`
}

// FilesStatus is what the agent's file check found last.
type FilesStatus struct {
	// Never is set when the agent runs with no file check (--check-files 0):
	// files changed on this host stay as they are until a declaration, or the
	// mesh's re-signed copy, rewrites them.
	Never bool `json:"never,omitempty"`
	// CheckedAt is when the check last compared the managed files; zero when it
	// has not since the agent started (it is off).
	CheckedAt time.Time `json:"checked_at,omitzero"`
	// OffCode is set while the check cannot put back files changed on this host,
	// one of the CheckOff constants; Off says why to a person, and OffSince since
	// when (since the agent started, at most).
	OffCode  string    `json:"off_code,omitempty"`
	Off      string    `json:"off,omitempty"`
	OffSince time.Time `json:"off_since,omitzero"`
	// NotKept is why the copy of the applied declaration the check uses could
	// not be written to the state directory (a full disk): the check goes on, but
	// after a restart it waits for the mesh's copy. Empty once written.
	NotKept string `json:"not_kept,omitempty"`
	// PutBack counts the files put back since the agent started.
	PutBack uint64 `json:"put_back"`
	// LastPutBackAt, LastPutBackCount and LastPutBack are when files were last put
	// back, how many, and which (the first maxShownPutBack of them).
	LastPutBackAt    time.Time `json:"last_put_back_at,omitzero"`
	LastPutBackCount int       `json:"last_put_back_count,omitempty"`
	LastPutBack      []string  `json:"last_put_back,omitempty"`
	// Failed is why the last attempt to put the managed files back as declared
	// failed; empty once one succeeds.
	Failed string `json:"failed,omitempty"`
}

// maxShownPutBack bounds the paths a status names of the last put back.
const maxShownPutBack = 10

// UnsavedState is the applied state the agent holds and could not save.
type UnsavedState struct {
	HaveApplied bool      `json:"have_applied"`
	Version     uint64    `json:"applied_version"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"`
	Error       string    `json:"error"`
	// Failure is the apply or hook failure the agent reports meanwhile ("code:
	// message"), which the state file does not hold yet.
	Failure string `json:"failure,omitempty"`
	// NextAttempt is when the agent tries again a declaration that failed to
	// apply (zero: none is owed), which the state file does not hold yet either.
	NextAttempt time.Time `json:"next_attempt,omitzero"`
}

// linkStatus is what the agent answers RequestStatus: read from its stats, as the
// metrics are, without the loop.
func (a *Agent) linkStatus() LinkStatus {
	a.stats.mu.Lock()
	defer a.stats.mu.Unlock()
	s := &a.stats
	st := LinkStatus{Connected: s.connected, Synced: s.connected && s.synced, Since: s.since}
	if s.unsaved != "" {
		st.Unsaved = &UnsavedState{HaveApplied: s.haveApplied, Version: s.version, ExpiresAt: s.expiresAt, Error: s.unsaved, Failure: s.unsavedFailure,
			NextAttempt: s.unsavedNextAttempt}
	}
	if s.connected {
		st.Broker = s.broker
	}
	if !s.checkedAt.IsZero() || s.checkOff.code != "" || s.notKept != "" {
		st.Files = &FilesStatus{CheckedAt: s.checkedAt, PutBack: s.putBack, LastPutBackAt: s.lastPutBackAt,
			LastPutBackCount: s.lastPutBackCount, LastPutBack: slices.Clone(s.lastPutBack), Failed: s.putBackFailed,
			OffCode: s.checkOff.code, Off: s.checkOff.why, OffSince: s.checkOff.since, NotKept: s.notKept}
	}
	if a.o.CheckFiles < 0 {
		// Said rather than left out: an operator who fixed a file by hand saw no
		// files line at all, and could not tell "not put back" from "not checked yet".
		if st.Files == nil {
			st.Files = &FilesStatus{}
		}
		st.Files.Never = true
	}
	if !st.Synced {
		st.Error = s.linkErr
	}
	st.SharedKey = a.sharedKeyStatus(s)
	return st
}

// ErrNoAgent means no agent answers on the state directory's socket: none runs, or
// one from before the socket.
var ErrNoAgent = errors.New("no agent answers on the state directory's socket")

// ErrSocketPathTooLong means the state directory's path is too long for a Unix
// socket's address: the agent runs without its socket, and meshhost status and
// hooks retry cannot ask it. A shorter --state directory fixes it.
var ErrSocketPathTooLong = errors.New("the socket's path is too long for a Unix socket address")

// maxSocketPath is the longest path a Unix socket address holds on Linux: 108 bytes,
// the last one the terminating zero. The system's own error ("invalid argument")
// names neither the cause nor the fix.
const maxSocketPath = 107

// socketPathFits refuses a path longer than a socket address holds.
func socketPathFits(path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("%w: %s is %d bytes, a Unix socket address holds %d; use a --state directory whose path is at most %d bytes",
			ErrSocketPathTooLong, path, len(path), maxSocketPath, maxSocketPath-len(SocketName)-1)
	}
	return nil
}

// socketReadTimeout bounds how long a client may take to send its request line.
const socketReadTimeout = 5 * time.Second

// serveSocket answers requests on ln until ctx ends. Each connection carries one
// request line and gets one JSON line back.
func (a *Agent) serveSocket(ctx context.Context, ln net.Listener) {
	var conns sync.WaitGroup
	defer conns.Wait()
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("the agent's socket stopped accepting; meshhost hooks retry cannot reach this agent until it restarts", "err", err)
			}
			return
		}
		conns.Add(1)
		go func() { defer conns.Done(); a.answer(ctx, c) }()
	}
}

func (a *Agent) answer(ctx context.Context, c net.Conn) {
	defer c.Close()
	// A client that stops reading must not keep the agent from stopping: its
	// connection ends with the agent's context.
	defer context.AfterFunc(ctx, func() { c.Close() })()
	if err := peerAllowed(c); err != nil {
		// The socket's mode (0600) is set just after it is bound, and a state
		// directory others may enter is allowed: the peer's own user decides.
		a.log.Warn("refused a connection on the agent's socket", "err", err)
		return
	}
	c.SetReadDeadline(time.Now().Add(socketReadTimeout))
	line, err := bufio.NewReader(&limitedConn{c, 256}).ReadString('\n')
	if err != nil {
		return
	}
	// The answer is small, but a client that never reads must not hold this
	// goroutine.
	c.SetWriteDeadline(time.Now().Add(socketReadTimeout))
	enc := json.NewEncoder(c)
	if strings.TrimSpace(line) == RequestStatus {
		enc.Encode(a.linkStatus())
		return
	}
	if strings.TrimSpace(line) != RequestRetryHooks {
		enc.Encode(struct {
			Refused string `json:"refused"`
		}{"unknown request"})
		return
	}
	reply := make(chan HooksOutcome, 1)
	select {
	case a.hookRetries <- reply:
	case <-ctx.Done():
		return
	}
	select {
	case out := <-reply:
		out.Error = cutAnswer(out.Error)
		c.SetWriteDeadline(time.Now().Add(socketReadTimeout))
		enc.Encode(out)
	case <-ctx.Done():
	}
}

// maxAnswerError bounds the failed hooks' output in an answer: each hook's is cut
// to its last 4 KiB already, but a host may have many hooks for one path.
const maxAnswerError = 64 << 10

// maxAnswer bounds what RetryHooks reads of an answer: the error (maxAnswerError),
// the hooks' names (the hooks file is 64 KiB at most) and the paths still owed (a
// declaration's, well under this).
const maxAnswer = 4 << 20

// cutAnswer cuts the failed hooks' output to maxAnswerError, on a rune boundary,
// saying where the rest is.
func cutAnswer(s string) string {
	if len(s) <= maxAnswerError {
		return s
	}
	return runePrefix(s, maxAnswerError) + " … (cut: meshhost status and the agent's log have the whole output)"
}

// limitedConn reads at most n bytes of a connection: a request is one short line.
type limitedConn struct {
	c net.Conn
	n int
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}

// listenSocket listens on path, replacing a socket a stopped agent left there (the
// caller holds the state directory's lock: no running agent owns it).
func listenSocket(path string) (net.Listener, error) {
	if err := socketPathFits(path); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; remove it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// RetryHooks asks the agent running on stateDir to run the owed and failed hooks
// again, and waits for their outcome up to timeout. No agent answering is
// ErrNoAgent.
func RetryHooks(stateDir string, timeout time.Duration) (HooksOutcome, error) {
	var out HooksOutcome
	if err := socketPathFits(SocketPath(stateDir)); err != nil {
		return out, err
	}
	c, err := net.DialTimeout("unix", SocketPath(stateDir), 5*time.Second)
	if err != nil {
		return out, fmt.Errorf("%w (%s): %w", ErrNoAgent, SocketPath(stateDir), err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(c, RequestRetryHooks); err != nil {
		return out, fmt.Errorf("ask the agent: %w", err)
	}
	var raw struct {
		HooksOutcome
		Refused string `json:"refused"`
	}
	dec := json.NewDecoder(&limitedConn{c, maxAnswer})
	if err := dec.Decode(&raw); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return out, fmt.Errorf("the agent did not answer within %s: the hooks may still be running (meshhost status shows them)", timeout)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			// It closed the socket without an answer: it stopped (or crashed)
			// while the hooks ran, which it still owes.
			return out, fmt.Errorf("%w: the agent stopped before the hooks finished; they stay owed, and the agent runs them when it starts again (meshhost status shows them)", ErrAgentStopped)
		}
		return out, fmt.Errorf("the agent's answer: %w", err)
	}
	if raw.Refused != "" {
		return out, fmt.Errorf("the agent refused the request: %s", raw.Refused)
	}
	return raw.HooksOutcome, nil
}

// ErrAgentStopped means the agent closed its socket before it answered.
var ErrAgentStopped = errors.New("the agent stopped without an answer")

// ErrOlderAgent means the agent answering on the socket does not know the request:
// a version from before it.
var ErrOlderAgent = errors.New("the running agent does not know this request (an older version)")

// AskStatus asks the agent running on stateDir whether it reaches the mesh. No
// agent answering is ErrNoAgent; one that does not know the request, ErrOlderAgent.
func AskStatus(stateDir string, timeout time.Duration) (LinkStatus, error) {
	var raw struct {
		LinkStatus
		Refused string `json:"refused"`
	}
	if err := socketPathFits(SocketPath(stateDir)); err != nil {
		return raw.LinkStatus, err
	}
	c, err := net.DialTimeout("unix", SocketPath(stateDir), timeout)
	if err != nil {
		return raw.LinkStatus, fmt.Errorf("%w (%s): %w", ErrNoAgent, SocketPath(stateDir), err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(c, RequestStatus); err != nil {
		return raw.LinkStatus, fmt.Errorf("ask the agent: %w", err)
	}
	if err := json.NewDecoder(&limitedConn{c, 64 << 10}).Decode(&raw); err != nil {
		return raw.LinkStatus, fmt.Errorf("the agent's answer: %w", err)
	}
	if raw.Refused != "" {
		return raw.LinkStatus, ErrOlderAgent
	}
	return raw.LinkStatus, nil
}
