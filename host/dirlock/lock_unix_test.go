//go:build unix

package dirlock

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/host/fstest"
)

// dir is a directory under test, with the calls the tests make on it.
type dir string

func (d dir) Lock(command string) (*Lock, error) {
	return Acquire("data directory", string(d), command)
}

func (d dir) LockExisting(command string) (*Lock, error) {
	return AcquireExisting("data directory", string(d), command)
}

func (d dir) Path(name string) string { return filepath.Join(string(d), name) }

func (d dir) Exists(name string) bool {
	_, err := os.Lstat(d.Path(name))
	return err == nil
}

func mustLock(t *testing.T, d dir, command string) *Lock {
	t.Helper()
	l, err := d.Lock(command)
	if err != nil {
		t.Fatalf("lock %s: %v", d, err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

// TestLockRefusesASecondHolder: while one open file holds the lock, another is
// refused at once with an *InUseError that names the holder and says what to do;
// once released, the lock is free again.
func TestLockRefusesASecondHolder(t *testing.T) {
	d := dir(t.TempDir())
	first := mustLock(t, d, "meshctl serve")

	start := time.Now()
	_, err := d.Lock("meshctl bootstrap")
	if time.Since(start) > time.Second {
		t.Errorf("the refusal took %s; it must be at once", time.Since(start))
	}
	var in *InUseError
	if !errors.As(err, &in) || !errors.Is(err, ErrInUse) {
		t.Fatalf("second lock: %v, want an *InUseError matching ErrInUse", err)
	}
	if in.PID != os.Getpid() || in.Command != "meshctl serve" || in.Dir != string(d) {
		t.Errorf("InUseError = %+v, want pid %d, command meshctl serve", in, os.Getpid())
	}
	for _, want := range []string{string(d), fmt.Sprintf("pid %d", os.Getpid()), "(meshctl serve)", "stop that process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %s", want, err)
		}
	}
	if _, err := d.LockExisting("meshctl bootstrap --dry-run"); !errors.Is(err, ErrInUse) {
		t.Errorf("LockExisting while held: %v, want ErrInUse", err)
	}

	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Errorf("a second Release: %v", err)
	}
	second := mustLock(t, d, "meshctl bootstrap")
	data, err := os.ReadFile(d.Path(File))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"pid":%d,"command":"meshctl bootstrap"}`+"\n", os.Getpid()); string(data) != want {
		t.Errorf("lock file = %q, want %q", data, want)
	}
	if fi, err := os.Stat(d.Path(File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("lock file mode: %v %v, want 0600", fi.Mode(), err)
	}
	second.Release()
	if !d.Exists(File) {
		t.Error("Release removed the lock file; it must stay")
	}
}

// TestLockStaleFile: a lock file left by a process that is gone (its pid recorded,
// no flock held) blocks nothing.
func TestLockStaleFile(t *testing.T) {
	d := dir(t.TempDir())
	if err := os.WriteFile(d.Path(File), []byte(`{"pid":999999,"command":"meshctl serve"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustLock(t, d, "meshctl serve")
	data, _ := os.ReadFile(d.Path(File))
	if !strings.Contains(string(data), fmt.Sprintf(`"pid":%d`, os.Getpid())) || strings.Contains(string(data), "999999") {
		t.Errorf("lock file not rewritten for this process: %q", data)
	}
}

// TestLockUnrecordedHolder: a holder that has not written its pid yet (or a lock file
// of another format) is still refused, and the message says the pid is unknown.
func TestLockUnrecordedHolder(t *testing.T) {
	d := dir(t.TempDir())
	l := mustLock(t, d, "meshctl serve")
	if err := os.WriteFile(d.Path(File), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := d.Lock("meshctl join")
	var in *InUseError
	if !errors.As(err, &in) || in.PID != 0 || !strings.Contains(err.Error(), "has not recorded its pid") {
		t.Fatalf("err = %v", err)
	}
	l.Release()
}

// TestLockNeedsTheDirectory: Lock creates the lock file but never the directory;
// LockExisting creates nothing, and finds nothing to lock where there is no lock file.
func TestLockNeedsTheDirectory(t *testing.T) {
	missing := dir(filepath.Join(t.TempDir(), "missing"))
	if _, err := missing.Lock("meshctl serve"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lock of a missing directory: %v, want fs.ErrNotExist", err)
	}
	if l, err := missing.LockExisting("meshctl bootstrap --dry-run"); l != nil || err != nil {
		t.Errorf("LockExisting of a missing directory: %v, %v", l, err)
	}
	if _, err := os.Stat(string(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directory was created: %v", err)
	}
	empty := dir(t.TempDir())
	if l, err := empty.LockExisting("meshctl bootstrap --dry-run"); l != nil || err != nil {
		t.Errorf("LockExisting without a lock file: %v, %v", l, err)
	}
	if empty.Exists(File) {
		t.Error("LockExisting created the lock file")
	}
	mustLock(t, empty, "meshctl serve").Release()
	l, err := empty.LockExisting("meshctl bootstrap --dry-run")
	if err != nil || l == nil {
		t.Fatalf("LockExisting of a free lock file: %v, %v", l, err)
	}
	l.Release()
}

// TestLockRefusesALink: the lock file is the directory's own, never a link; a link
// or a directory at its name is ErrNotALock, saying what is there and what to do.
func TestLockRefusesALink(t *testing.T) {
	d := dir(t.TempDir())
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.Symlink(target, d.Path(File)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Lock("meshctl serve"); !errors.Is(err, ErrNotALock) || !strings.Contains(err.Error(), "is a symbolic link") || !strings.Contains(err.Error(), "ls -l") {
		t.Fatalf("a symlinked lock file: %v, want ErrNotALock saying it is a link", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's target was created: %v", err)
	}
	other := dir(t.TempDir())
	if err := os.Mkdir(other.Path(File), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Lock("meshctl serve"); !errors.Is(err, ErrNotALock) || !strings.Contains(err.Error(), "is a directory") {
		t.Fatalf("a directory at the lock's name: %v, want ErrNotALock saying it is a directory", err)
	}
}

// TestLockAcrossProcesses: another process's lock names that process; when it is
// killed with SIGKILL the kernel releases the lock and its stale file blocks nothing.
func TestLockAcrossProcesses(t *testing.T) {
	d := dir(t.TempDir())
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "DIRLOCK_HELPER="+string(d))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper: %q %v", line, err)
	}

	_, err = d.Lock("meshctl serve")
	var in *InUseError
	if !errors.As(err, &in) || in.PID != cmd.Process.Pid || in.Command != "helper" {
		t.Fatalf("lock held by pid %d: %v (%+v)", cmd.Process.Pid, err, in)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	data, _ := os.ReadFile(d.Path(File))
	if !strings.Contains(string(data), fmt.Sprintf(`"pid":%d`, cmd.Process.Pid)) {
		t.Fatalf("the killed process's record is gone: %q", data)
	}
	mustLock(t, d, "meshctl serve")
}

// TestLockHelperProcess is the other process of TestLockAcrossProcesses: it takes the
// lock, says so, and waits to be killed.
func TestLockHelperProcess(t *testing.T) {
	held := os.Getenv("DIRLOCK_HELPER")
	if held == "" {
		t.Skip("helper process of TestLockAcrossProcesses")
	}
	if _, err := dir(held).Lock("helper"); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Minute)
	os.Exit(1)
}

// TestReadOnlyDirectoryIsNotWritable: a directory on a read-only file system is
// refused as not writable (ErrNotWritable, which says so and what to do), not as a
// failure to open a file. As root, with a read-only tmpfs; EACCES takes the same path.
func TestReadOnlyDirectoryIsNotWritable(t *testing.T) {
	mnt := fstest.Small(t, fstest.Options{ReadOnly: true})
	_, err := dir(mnt).Lock("meshhost run")
	var nw *NotWritableError
	if !errors.Is(err, ErrNotWritable) || !errors.As(err, &nw) || !errors.Is(err, syscall.EROFS) || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("Lock on a read-only file system: %v, want ErrNotWritable for EROFS", err)
	}
	if l, err := dir(mnt).LockExisting("meshctl bootstrap --dry-run"); l != nil || err != nil {
		t.Fatalf("LockExisting where no lock file exists: %v, %v; want nothing to hold", l, err)
	}
}

// TestProbeSaysWhoHoldsTheLockAndHoldsNothing: Probe names the holder of a held lock
// (ErrInUse) and passes a free one, an absent lock file and an absent directory; it
// creates nothing, leaves the holder's record as it was, and holds nothing when it
// returns: the lock can be taken right after it, and two probes pass together.
func TestProbeSaysWhoHoldsTheLockAndHoldsNothing(t *testing.T) {
	d := dir(t.TempDir())
	if err := Probe("data directory", string(d)); err != nil {
		t.Errorf("probe without a lock file: %v", err)
	}
	if d.Exists(File) {
		t.Error("Probe made the lock file")
	}
	if err := Probe("data directory", d.Path("missing")); err != nil {
		t.Errorf("probe of a missing directory: %v", err)
	}

	held := mustLock(t, d, "meshctl serve")
	record, _ := os.ReadFile(d.Path(File))
	var in *InUseError
	err := Probe("data directory", string(d))
	if !errors.As(err, &in) || !errors.Is(err, ErrInUse) || in.PID != os.Getpid() || in.Command != "meshctl serve" {
		t.Errorf("probe of a held lock: %v, want an *InUseError naming pid %d (meshctl serve)", err, os.Getpid())
	}
	if after, _ := os.ReadFile(d.Path(File)); string(after) != string(record) {
		t.Errorf("Probe changed the holder's record: %q, was %q", after, record)
	}
	if err := held.Release(); err != nil {
		t.Fatal(err)
	}

	if err := Probe("data directory", string(d)); err != nil {
		t.Errorf("probe of a free lock: %v", err)
	}
	l, err := d.Lock("meshctl serve")
	if err != nil {
		t.Fatalf("the lock right after a probe: %v (the probe kept it)", err)
	}
	l.Release()
}

// TestProbeRefusesANamedPipe (a review's run): a named pipe in the lock's place, in
// a backup copy `meshctl check` looks at, held Probe until a writer came, for good.
// It is refused as no lock file, at once.
func TestProbeRefusesANamedPipe(t *testing.T) {
	d := dir(t.TempDir())
	if err := syscall.Mkfifo(d.Path(File), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Probe("data directory", string(d)) }()
	select {
	case err := <-done:
		var not *NotALockError
		if !errors.As(err, &not) || !strings.Contains(err.Error(), "a named pipe") {
			t.Errorf("probe of a named pipe: %v, want a *NotALockError saying so", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Probe waits on a named pipe in the lock's place")
	}
}

// TestALockHeldForAMomentIsWaitedFor (a review's reading): Probe holds the lock
// shared for one system call, and a serve starting in that instant was refused as
// if another process held it, naming the lock's last holder. A lock held for a
// moment is tried again; one that stays held is still refused.
func TestALockHeldForAMomentIsWaitedFor(t *testing.T) {
	d := dir(t.TempDir())
	mustLock(t, d, "meshctl serve").Release() // the lock file, free
	reader, err := os.Open(d.Path(File))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(reader.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(5 * time.Millisecond) // well within tryLock's 100 ms, a loaded machine's delays aside
		reader.Close()                   // gives the shared lock up
	}()
	l, err := d.Lock("meshctl serve")
	if err != nil {
		t.Fatalf("a lock held shared for 5 ms: %v", err)
	}
	l.Release()

	held := mustLock(t, d, "meshctl serve")
	defer held.Release()
	start := time.Now()
	if _, err := d.Lock("meshctl serve"); !errors.Is(err, ErrInUse) {
		t.Fatalf("a lock that stays held: %v, want ErrInUse", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("refused after %s", waited)
	}
}
