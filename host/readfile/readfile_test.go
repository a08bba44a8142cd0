package readfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// within runs read and fails the test if it does not return in time: the faults
// below used to keep a reader waiting forever.
func within(t *testing.T, read func() ([]byte, error)) ([]byte, error) {
	t.Helper()
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := read()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-time.After(20 * time.Second):
		t.Fatal("the read did not return within 20 s")
		return nil, nil
	}
}

func TestRegular(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	small := write("small", []byte("hello"))
	atCap := write("at-cap", bytes.Repeat([]byte("x"), 64))
	overCap := write("over-cap", bytes.Repeat([]byte("x"), 65))
	empty := write("empty", nil)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, path string
		want       string
	}{
		{"small", small, "hello"},
		{"at the cap", atCap, strings.Repeat("x", 64)},
		{"empty", empty, ""},
		{"through a link", link, "hello"},
	} {
		got, err := Regular(tc.path, 64)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}

	if _, err := Regular(overCap, 64); !errors.Is(err, ErrTooLarge) || errors.Is(err, ErrNotRegular) {
		t.Errorf("over the cap: %v, want ErrTooLarge", err)
	}
	if _, err := Regular(filepath.Join(dir, "absent"), 64); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent: %v, want fs.ErrNotExist", err)
	}
	if _, err := Regular(dir, 64); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "a directory") {
		t.Errorf("a directory: %v, want ErrNotRegular naming a directory", err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	if _, err := Regular(dangling, 64); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("dangling link: %v, want fs.ErrNotExist", err)
	}
}

// A FIFO where a file belongs: without O_NONBLOCK the open waits for a writer
// forever, and a command reading its data directory hangs.
func TestRegularFIFODoesNotWait(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs on Windows")
	}
	fifo := filepath.Join(t.TempDir(), "mesh.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	t.Cleanup(func() {
		// Release a reader still waiting (the test failed): open the other end.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	_, err := within(t, func() ([]byte, error) { return Regular(fifo, 1<<20) })
	var nr *NotRegularError
	if !errors.As(err, &nr) || !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe (FIFO)") {
		t.Fatalf("got %v, want a *NotRegularError naming a FIFO", err)
	}
}

// /dev/zero never ends: it is refused as a device, not read to the cap and called
// a file too large.
func TestRegularDevice(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero here")
	}
	_, err := within(t, func() ([]byte, error) { return Regular("/dev/zero", 1<<20) })
	if !errors.Is(err, ErrNotRegular) || errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "character device") {
		t.Fatalf("got %v, want ErrNotRegular naming a character device", err)
	}
}

// A file that grows while it is read is read no further than one byte past the cap.
func TestRegularGrowing(t *testing.T) {
	p := filepath.Join(t.TempDir(), "growing")
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return
		}
		defer f.Close()
		chunk := bytes.Repeat([]byte(" "), 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := f.Write(chunk); err != nil {
				return
			}
			if fi, err := f.Stat(); err != nil || fi.Size() > 8<<20 {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	const max = 1 << 20
	for range 3 {
		data, err := within(t, func() ([]byte, error) { return Regular(p, max) })
		if err == nil && len(data) > max {
			t.Fatalf("read %d bytes with a cap of %d", len(data), max)
		}
		if err != nil && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want the data or ErrTooLarge", err)
		}
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no FIFOs on Windows")
	}
	fifo := filepath.Join(t.TempDir(), "body.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("cannot make a FIFO here: %v", err)
	}
	return fifo
}

// TestStreamFIFO: a FIFO named as input is read until its writer closes it, a
// writer that comes a little later included; one that nothing opens, or whose
// writer never finishes, is given up on after the wait, never waited on forever.
func TestStreamFIFO(t *testing.T) {
	t.Run("a writer that comes later", func(t *testing.T) {
		fifo := mkfifo(t)
		go func() {
			time.Sleep(300 * time.Millisecond)
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			f.Write([]byte(`{"files":`))
			time.Sleep(100 * time.Millisecond)
			f.Write([]byte(`[]}`))
		}()
		data, err := within(t, func() ([]byte, error) { return Stream(fifo, 1<<20, 10*time.Second) })
		if err != nil || string(data) != `{"files":[]}` {
			t.Fatalf("got %q, %v", data, err)
		}
	})
	t.Run("no writer", func(t *testing.T) {
		fifo := mkfifo(t)
		start := time.Now()
		_, err := within(t, func() ([]byte, error) { return Stream(fifo, 1<<20, 500*time.Millisecond) })
		var nw *NoWriterError
		if !errors.As(err, &nw) || !errors.Is(err, ErrNoWriter) || !strings.Contains(err.Error(), "nothing was written to it within 500ms") {
			t.Fatalf("got %v, want a *NoWriterError", err)
		}
		if took := time.Since(start); took < 400*time.Millisecond {
			t.Fatalf("gave up after %v, before the wait was over", took)
		}
	})
	t.Run("a writer that never finishes", func(t *testing.T) {
		fifo := mkfifo(t)
		done := make(chan struct{})
		defer close(done)
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			f.Write([]byte("mesh1_"))
			<-done
		}()
		_, err := within(t, func() ([]byte, error) { return Stream(fifo, 1<<20, time.Second) })
		if !errors.Is(err, ErrNoWriter) {
			t.Fatalf("got %v, want ErrNoWriter", err)
		}
	})
	t.Run("more than the cap", func(t *testing.T) {
		fifo := mkfifo(t)
		go func() {
			f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			if err != nil {
				return
			}
			defer f.Close()
			f.Write(bytes.Repeat([]byte("x"), 200<<10))
		}()
		_, err := within(t, func() ([]byte, error) { return Stream(fifo, 64<<10, 10*time.Second) })
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v, want ErrTooLarge", err)
		}
	})
}

// TestStreamOthers: a regular file reads as Regular reads it; a directory and a
// device are refused, /dev/zero without being read to the cap.
func TestStreamOthers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("mesh1_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := Stream(p, 64, time.Second); err != nil || string(data) != "mesh1_x\n" {
		t.Fatalf("a regular file: %q, %v", data, err)
	}
	if _, err := Stream(p, 4, time.Second); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a regular file over the cap: %v", err)
	}
	if _, err := Stream(dir, 64, time.Second); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("a directory: %v", err)
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		if _, err := within(t, func() ([]byte, error) { return Stream("/dev/zero", 1<<20, time.Second) }); !errors.Is(err, ErrNotRegular) {
			t.Fatalf("/dev/zero: %v", err)
		}
	}
	// A pipe as /dev/stdin would be: the read end of os.Pipe, by its /proc name.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() { w.Write([]byte("from a pipe")); w.Close() }()
	name := fmt.Sprintf("/proc/self/fd/%d", r.Fd())
	if _, err := os.Stat(name); err != nil {
		t.Skip("no /proc here")
	}
	if data, err := within(t, func() ([]byte, error) { return Stream(name, 64, 10*time.Second) }); err != nil || string(data) != "from a pipe" {
		t.Fatalf("an anonymous pipe: %q, %v", data, err)
	}
}

// TestStreamWaitingSaysWhatItWaitsFor: a FIFO that brings nothing for a second has
// its caller told once (a CLI audit: a minute's wait without a word looked like a
// hang), before the read gives up; one whose writer comes at once is not.
func TestStreamWaitingSaysWhatItWaitsFor(t *testing.T) {
	var told atomic.Int32
	fifo := mkfifo(t)
	_, err := within(t, func() ([]byte, error) {
		return StreamWaiting(fifo, 1<<20, WaitNotice+500*time.Millisecond, nil, func() { told.Add(1) })
	})
	if !errors.Is(err, ErrNoWriter) || told.Load() != 1 {
		t.Fatalf("no writer: %v, told %d times; want ErrNoWriter, told once", err, told.Load())
	}
	told.Store(0)
	fifo = mkfifo(t)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write([]byte("mesh1_"))
		time.Sleep(WaitNotice + 300*time.Millisecond) // writing, slowly: nothing to tell
		f.Write([]byte("x"))
	}()
	data, err := within(t, func() ([]byte, error) {
		return StreamWaiting(fifo, 1<<20, 10*time.Second, nil, func() { told.Add(1) })
	})
	if err != nil || string(data) != "mesh1_x" || told.Load() != 0 {
		t.Fatalf("a writer at once: %q, %v, told %d times; want it read, nothing told", data, err, told.Load())
	}
}
