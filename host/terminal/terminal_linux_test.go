//go:build linux

package terminal_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mesh/host/terminal"
	"mesh/host/terminal/ptytest"
)

const secret = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"

type result struct {
	line   string
	hidden bool
	err    error
}

func readFrom(slave *os.File, w *bytes.Buffer, hide func() (func(), error)) chan result {
	return readAtMost(slave, w, 1024, hide)
}

func readAtMost(slave *os.File, w *bytes.Buffer, max int, hide func() (func(), error)) chan result {
	return readUntilWhole(slave, w, max, hide, nil)
}

func readUntilWhole(slave *os.File, w *bytes.Buffer, max int, hide func() (func(), error), incomplete func(string) bool) chan result {
	got := make(chan result, 1)
	go func() {
		line, hidden, err := terminal.ReadHidden(slave, w, "hidden: ", "shown: ", max, hide, incomplete)
		got <- result{line, hidden, err}
	}()
	return got
}

// TestReadHidden pastes a line on a pseudo-terminal and reads what the terminal
// shows: nothing of it with the echo off, all of it when the echo cannot be turned
// off (the control: the test sees an echo when there is one). The echo is on again
// afterwards, also when a signal ends the wait.
func TestReadHidden(t *testing.T) {
	cases := []struct {
		name       string
		hide       func(slave *os.File) func() (func(), error)
		wantHidden bool
	}{
		{"echo off", func(s *os.File) func() (func(), error) {
			return func() (func(), error) { return terminal.HideEcho(s) }
		}, true},
		{"no way to hide", func(*os.File) func() (func(), error) { return nil }, false},
		{"hiding fails", func(*os.File) func() (func(), error) {
			return func() (func(), error) { return nil, errors.New("not a terminal") }
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			master, slave := ptytest.Open(t)
			ptytest.WaitEcho(t, slave, true) // a new terminal echoes
			var prompt bytes.Buffer
			got := readFrom(slave, &prompt, c.hide(slave))
			if c.wantHidden {
				ptytest.WaitEcho(t, slave, false)
			} else {
				time.Sleep(100 * time.Millisecond)
			}
			if _, err := master.Write([]byte("mesh1_" + secret + "\n")); err != nil {
				t.Fatal(err)
			}
			var r result
			select {
			case r = <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("the line was not read")
			}
			if r.err != nil || r.line != "mesh1_"+secret+"\n" || r.hidden != c.wantHidden {
				t.Fatalf("read %q, hidden %v, %v", r.line, r.hidden, r.err)
			}
			shown := ptytest.Shown(master, 300*time.Millisecond)
			if strings.Contains(shown, secret) != !c.wantHidden {
				t.Errorf("the terminal showed %q (the echo off: %v)", shown, c.wantHidden)
			}
			ptytest.WaitEcho(t, slave, true)
			want := "shown: "
			if c.wantHidden {
				want = "hidden: \n"
			}
			if prompt.String() != want {
				t.Errorf("prompt %q, want %q", prompt.String(), want)
			}
		})
	}

	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run("interrupted by "+sig.String(), func(t *testing.T) {
			_, slave := ptytest.Open(t)
			var prompt bytes.Buffer
			got := readFrom(slave, &prompt, func() (func(), error) { return terminal.HideEcho(slave) })
			ptytest.WaitEcho(t, slave, false)
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if !errors.Is(r.err, terminal.ErrInterrupted) || !strings.Contains(r.err.Error(), sig.String()) {
					t.Fatalf("%q, %v; want ErrInterrupted naming the signal", r.line, r.err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the signal did not end the wait")
			}
			ptytest.WaitEcho(t, slave, true)
		})
	}
	t.Run("interrupted while the rest of a paste is waited for", func(t *testing.T) {
		master, slave := ptytest.Open(t)
		var prompt bytes.Buffer
		got := readFrom(slave, &prompt, func() (func(), error) { return terminal.HideEcho(slave) })
		ptytest.WaitEcho(t, slave, false)
		if _, err := master.Write([]byte("mesh1_first_half\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the line read, the rest waited for
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if !errors.Is(r.err, terminal.ErrInterrupted) || r.line != "" {
				t.Fatalf("%q, %v; want ErrInterrupted and nothing read", r.line, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the read did not end")
		}
		ptytest.WaitEcho(t, slave, true)
	})
}

// TestAPasteOfSeveralLinesIsReadWhole: a token a mail client or a terminal
// wrapped is pasted as two lines, or three, the last perhaps without its newline
// (still in the line editor). All of it is read, line breaks and all, so that the
// caller judges the paste ("split when copied; paste it as one line") and not its
// first line ("truncated: copy the whole line again", which copying again does not
// mend: a security audit). Pieces of a paste that come apart (a remote session) are
// read as one, and the terminal is left as it was: line editing on, the echo off
// until the restore puts it back.
func TestAPasteOfSeveralLinesIsReadWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		pieces []string
		want   string
	}{
		{"two lines", []string{"mesh1_first_half\n" + secret + "_second_half\n"}, "mesh1_first_half\n" + secret + "_second_half\n"},
		{"the last line without its newline", []string{"mesh1_a\nb\n" + secret}, "mesh1_a\nb\n" + secret},
		{"in pieces", []string{"mesh1_first_half\n", secret, "_second_half\n"}, "mesh1_first_half\n" + secret + "_second_half\n"},
		{"one line", []string{"mesh1_" + secret + "\n"}, "mesh1_" + secret + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, slave := ptytest.Open(t)
			before := termios(t, slave)
			var prompt bytes.Buffer
			got := readFrom(slave, &prompt, func() (func(), error) { return terminal.HideEcho(slave) })
			ptytest.WaitEcho(t, slave, false)
			for i, p := range c.pieces {
				if i > 0 {
					time.Sleep(50 * time.Millisecond)
				}
				if _, err := master.Write([]byte(p)); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case r := <-got:
				if r.err != nil || r.line != c.want || !r.hidden {
					t.Fatalf("read %q (hidden %v), %v; want %q", r.line, r.hidden, r.err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the paste was not read")
			}
			if shown := ptytest.Shown(master, 300*time.Millisecond); strings.Contains(shown, secret) {
				t.Errorf("the terminal showed the paste: %q", shown)
			}
			ptytest.WaitEcho(t, slave, true)
			if prompt.String() != "hidden: \n" {
				t.Errorf("prompt %q", prompt.String())
			}
			// Line editing is back, and the rest of the paste is not left for the
			// shell.
			if after := termios(t, slave); *after != *before {
				t.Errorf("the terminal's settings were %+v, and are %+v after the read", *before, *after)
			}
			shellReadsOnlyWhatFollows(t, master, slave)
		})
	}
}

// TestALateLineOfAPasteCutShortIsWaitedFor: the second line of a wrapped paste
// that a remote session delivers a second late was left for the shell, which ran
// the secret's end as a command and kept it in its history: while the caller finds
// the paste cut short, its next line is waited for (3 s), the echo still off. The
// control: without the caller's judgment, the late line is not read here, and
// reaches what reads the terminal next. A paste that stays cut short is returned
// once the wait is over, and an interrupt ends the wait at once.
func TestALateLineOfAPasteCutShortIsWaitedFor(t *testing.T) {
	cutShort := func(s string) bool { return !strings.Contains(s, "_second_half") }
	for _, c := range []struct {
		name       string
		incomplete func(string) bool
		want       string
	}{
		{"cut short", cutShort, "mesh1_first_half\n" + secret + "_second_half\n"},
		{"not judged", nil, "mesh1_first_half\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, slave := ptytest.Open(t)
			var prompt bytes.Buffer
			got := readUntilWhole(slave, &prompt, 1024, func() (func(), error) { return terminal.HideEcho(slave) }, c.incomplete)
			ptytest.WaitEcho(t, slave, false)
			if _, err := master.Write([]byte("mesh1_first_half\n")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // past the 200 ms a paste's pieces are waited for
			if _, err := master.Write([]byte(secret + "_second_half\n")); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-got:
				if r.err != nil || r.line != c.want {
					t.Fatalf("read %q, %v; want %q", r.line, r.err, c.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the paste was not read")
			}
			// Read without the caller's judgment, the late line came with the
			// echo back on: shown, and left for the shell.
			if shown := ptytest.Shown(master, 300*time.Millisecond); strings.Contains(shown, secret) != (c.incomplete == nil) {
				t.Errorf("the terminal showed %q", shown)
			}
			ptytest.WaitEcho(t, slave, true)
			if c.incomplete != nil {
				shellReadsOnlyWhatFollows(t, master, slave)
			}
		})
	}
	t.Run("stays cut short", func(t *testing.T) {
		master, slave := ptytest.Open(t)
		var prompt bytes.Buffer
		got := readUntilWhole(slave, &prompt, 1024, func() (func(), error) { return terminal.HideEcho(slave) }, cutShort)
		ptytest.WaitEcho(t, slave, false)
		start := time.Now()
		if _, err := master.Write([]byte("mesh1_first_half\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil || r.line != "mesh1_first_half\n" || time.Since(start) < 3*time.Second {
				t.Fatalf("read %q, %v after %s; want the first line after the 3 s wait", r.line, r.err, time.Since(start))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the wait for the rest did not end")
		}
		ptytest.WaitEcho(t, slave, true)
	})
	t.Run("interrupted", func(t *testing.T) {
		master, slave := ptytest.Open(t)
		var prompt bytes.Buffer
		got := readUntilWhole(slave, &prompt, 1024, func() (func(), error) { return terminal.HideEcho(slave) }, cutShort)
		ptytest.WaitEcho(t, slave, false)
		if _, err := master.Write([]byte("mesh1_first_half\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond) // in the wait for the late line
		signalled := time.Now()
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if !errors.Is(r.err, terminal.ErrInterrupted) || r.line != "" || time.Since(signalled) > time.Second {
				t.Fatalf("%q, %v after %s; want ErrInterrupted at once", r.line, r.err, time.Since(signalled))
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the read did not end")
		}
		ptytest.WaitEcho(t, slave, true)
	})
}

// termios is the terminal's settings on f.
func termios(t *testing.T, f *os.File) *unix.Termios {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var tio *unix.Termios
	if cerr := rc.Control(func(fd uintptr) { tio, err = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	return tio
}

// TestWhatFollowsTheLineIsDiscarded: what a paste holds beyond what is read (past
// the bound on what a token's input can be) does not stay in the terminal for the
// shell to run, and to keep in its history, once the command ends.
func TestWhatFollowsTheLineIsDiscarded(t *testing.T) {
	master, slave := ptytest.Open(t)
	var prompt bytes.Buffer
	got := readAtMost(slave, &prompt, 32, func() (func(), error) { return terminal.HideEcho(slave) })
	ptytest.WaitEcho(t, slave, false)
	if _, err := master.Write([]byte("mesh1_first_half\n" + secret + "_second_half\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if want := ("mesh1_first_half\n" + secret)[:32]; r.err != nil || r.line != want {
			t.Fatalf("read %q, %v; want %q, the first 32 bytes", r.line, r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the line was not read")
	}
	// What the shell would read next.
	shellReadsOnlyWhatFollows(t, master, slave)
}

// shellReadsOnlyWhatFollows types a line on the terminal after a read and checks it
// is the next thing read there, as the shell would after the command: nothing of a
// paste was left behind.
func shellReadsOnlyWhatFollows(t *testing.T, master, slave *os.File) {
	t.Helper()
	if _, err := master.Write([]byte("typed afterwards\n")); err != nil {
		t.Fatal(err)
	}
	next := make(chan string, 1)
	go func() {
		line, _ := terminal.ReadLine(slave, 4096)
		next <- line
	}()
	select {
	case line := <-next:
		if line != "typed afterwards\n" {
			t.Fatalf("the shell would read %q after the command; want only what was typed afterwards", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing to read after the command")
	}
}

// TestReadLineCaps: a line longer than the cap is cut there, and a stream without
// a newline is read to its end.
func TestReadLineCaps(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc\ndef\n", "abc\n"},
		{"abcdef", "abcd"},
		{"ab", "ab"},
		{"", ""},
	} {
		got, err := terminal.ReadLine(strings.NewReader(c.in), 4)
		if err != nil || got != c.want {
			t.Errorf("ReadLine(%q, 4) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestIsTerminal: a pseudo-terminal is one; /dev/null, a character device too, is
// not (a service's stdin: no prompt is printed to it).
func TestIsTerminal(t *testing.T) {
	_, slave := ptytest.Open(t)
	if !terminal.IsTerminal(slave) {
		t.Error("a pseudo-terminal is not taken for a terminal")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if terminal.IsTerminal(null) {
		t.Error("/dev/null is taken for a terminal")
	}
}
