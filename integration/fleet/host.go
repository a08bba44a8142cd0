package fleet

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"mesh/host/agent"
	"mesh/host/apply"
	"mesh/host/statedir"
)

// Host is one machine of the fleet: its own state directory and managed root (on
// tmpfs, standing for a disk of its own), its token, and once started its agent,
// running in this process with its own connection, key, verifier and applier.
type Host struct {
	ID       string
	StateDir string
	Root     string
	Token    string

	applier *timedApplier
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error // Run's result, once done is closed
	stopped time.Time
}

// newHost lays out host id under dir.
func newHost(dir, id string) *Host {
	base := filepath.Join(dir, id)
	h := &Host{ID: id, StateDir: filepath.Join(base, "state"), Root: filepath.Join(base, "root")}
	// The root judged as the agent's own applier judges it (agent.New).
	guard := &apply.RootGuard{Check: func(p string) error { return statedir.CheckRoot("the managed root", p) }}
	h.applier = &timedApplier{next: apply.FileApplier{Root: h.Root, Guard: guard}, done: map[[32]byte]time.Time{}}
	return h
}

// start runs the host's agent until stop. firstSync is called once, when the agent
// finished its first sync: it is connected, and has applied what the sync brought.
func (h *Host) start(log *slog.Logger, checkFiles time.Duration, firstSync func()) error {
	var once sync.Once
	a, err := agent.New(agent.Options{StateDir: h.StateDir, Root: h.Root, Logger: log, Applier: h.applier, CheckFiles: checkFiles,
		OnSynced: func() { once.Do(firstSync) }})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		err := a.Run(ctx)
		h.runErr, h.stopped = err, time.Now()
		close(h.done)
	}()
	return nil
}

// stop ends the agent and waits for it.
func (h *Host) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	<-h.done
}

// exited reports whether the agent's Run returned, and with what.
func (h *Host) exited() (bool, error, time.Time) {
	if h.done == nil {
		return false, nil, time.Time{}
	}
	select {
	case <-h.done:
		return true, h.runErr, h.stopped
	default:
		return false, nil, time.Time{}
	}
}

// appliedAt is when the host finished applying a declaration whose files were
// exactly files, or false if it has not.
func (h *Host) appliedAt(files []apply.File) (time.Time, bool) {
	return h.applier.when(files)
}

// timedApplier is the host's file applier, timestamping each declaration it applied
// successfully, keyed by a digest of the files (each round declares other content).
type timedApplier struct {
	next apply.Applier

	mu   sync.Mutex
	done map[[32]byte]time.Time
}

// Apply applies through the wrapped applier and records when it finished.
func (t *timedApplier) Apply(ctx context.Context, files []apply.File, previous []string) (apply.Result, error) {
	res, err := t.next.Apply(ctx, files, previous)
	if err != nil {
		return res, err
	}
	at := time.Now()
	key := filesDigest(files)
	t.mu.Lock()
	if _, seen := t.done[key]; !seen {
		t.done[key] = at
	}
	t.mu.Unlock()
	return res, nil
}

// Differs asks the wrapped applier, as the agent's file check asks its own.
func (t *timedApplier) Differs(ctx context.Context, files []apply.File, previous []string) (bool, error) {
	return t.next.(apply.FileApplier).Differs(ctx, files, previous)
}

func (t *timedApplier) when(files []apply.File) (time.Time, bool) {
	key := filesDigest(files)
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.done[key]
	return at, ok
}

// filesDigest identifies a set of declared files by path and content.
func filesDigest(files []apply.File) [32]byte {
	h := sha256.New()
	for _, f := range files {
		h.Write([]byte(f.Path))
		h.Write([]byte{0})
		h.Write(f.Data)
		h.Write([]byte{0})
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}
