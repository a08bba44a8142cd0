// Package terminal reads a secret pasted on a terminal without showing it: what a
// terminal shows stays in its scrollback, in a shared screen and in a recorded
// session, and an enrolment token's secret admits a machine until it is used.
package terminal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ErrInterrupted is what ReadHidden returns, wrapped with the signal, when a
// signal came while the echo was off.
var ErrInterrupted = errors.New("interrupted before the token was read; nothing was sent, and the terminal echoes again")

// ReadHidden writes prompt to w and reads one line, at most max bytes, from in,
// with the echo hide turns off until the line is read: prompt should say that the
// paste is not shown. An interrupt (Ctrl-C), a hangup, a quit or a termination
// while the echo is off puts it back and returns ErrInterrupted. When hide is nil
// or fails (no terminal, or one whose echo cannot be turned off) it writes shown
// instead and reads the line as typed; hidden says which happened.
func ReadHidden(in io.Reader, w io.Writer, prompt, shown string, max int, hide func() (func(), error)) (line string, hidden bool, err error) {
	if hide == nil {
		fmt.Fprint(w, shown)
		line, err := ReadLine(in, max)
		return line, false, err
	}
	// The signals are caught before the echo goes off, so that none can end the
	// process in between and leave the terminal silent.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	restore, herr := hide()
	if herr != nil {
		fmt.Fprint(w, shown)
		line, err := ReadLine(in, max)
		return line, false, err
	}
	defer restore()
	fmt.Fprint(w, prompt)
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		line, err := ReadLine(in, max)
		got <- read{line, err}
	}()
	select {
	case r := <-got:
		fmt.Fprintln(w) // the Enter the terminal did not echo
		return r.line, true, r.err
	case sig := <-sigs:
		fmt.Fprintln(w)
		return "", true, fmt.Errorf("%w (%v)", ErrInterrupted, sig)
	}
}

// ReadLine reads the first line of in, newline included, reading at most max
// bytes; a line cut at max bytes is returned as read.
func ReadLine(in io.Reader, max int) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(in, int64(max))).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return line, nil
}
