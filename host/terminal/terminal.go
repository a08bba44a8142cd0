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
	"strings"
	"syscall"
	"time"
)

// ErrInterrupted is what ReadHidden returns, wrapped with the signal, when a
// signal came while the echo was off.
var ErrInterrupted = errors.New("interrupted before the token was read; nothing was sent, and the terminal echoes again")

// ReadHidden writes prompt to w and reads one line, at most max bytes, from in,
// with the echo hide turns off until the line is read: prompt should say that the
// paste is not shown. With the echo off, the rest of a paste that held more lines
// (a token a mail client or a terminal wrapped) is read with the line and returned
// with it, line breaks and all (pasteRest; Linux): the caller judges the whole
// paste, as it would the same text in a file, rather than its first line alone,
// whose fault ("truncated: copy the whole line again") copying again would not
// mend. While incomplete (nil: never) says the paste read so far is cut short,
// its next line is waited for longer (lateLine; a remote session can deliver a
// wrapped paste's second line a second late): read after the restore, it would
// reach the shell as a command, and its history, with the secret's end. What the
// terminal holds after that is discarded by hide's restore. An
// interrupt (Ctrl-C), a hangup, a quit or a termination while the echo is off puts
// it back and returns ErrInterrupted. When hide is nil or fails (no terminal, or
// one whose echo cannot be turned off) it writes shown instead and reads the line
// as typed; hidden says which happened.
func ReadHidden(in io.Reader, w io.Writer, prompt, shown string, max int, hide func() (func(), error), incomplete func(string) bool) (line string, hidden bool, err error) {
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
		line := r.line
		if r.err == nil && strings.HasSuffix(line, "\n") {
			// Read here, not beside the line: a signal then finds the
			// terminal's settings put back before hide's restore runs.
			rest, ok := restOfPaste(in, max-len(line))
			line += rest
			for late := time.Now().Add(lateLine); ok && incomplete != nil && incomplete(line) && time.Now().Before(late) && len(sigs) == 0; {
				if rest, ok = restOfPaste(in, max-len(line)); rest != "" {
					line += rest
					late = time.Now().Add(lateLine)
				}
			}
		}
		fmt.Fprintln(w) // the Enter the terminal did not echo
		select {
		case sig := <-sigs: // while the rest was read
			return "", true, fmt.Errorf("%w (%v)", ErrInterrupted, sig)
		default:
		}
		return line, true, r.err
	case sig := <-sigs:
		fmt.Fprintln(w)
		return "", true, fmt.Errorf("%w (%v)", ErrInterrupted, sig)
	}
}

// pasteQuiet is how long the rest of a paste is waited for once nothing more
// comes: a terminal sends a paste at once, a remote session in pieces
// milliseconds apart, and nobody types the next line within it.
const pasteQuiet = 200 * time.Millisecond

// lateLine is how long the next line of a paste the caller finds cut short is
// waited for: a person who typed a short line waits that long to be told so.
const lateLine = 3 * time.Second

// restOfPaste is the rest of a paste on the terminal in, at most max bytes, and
// whether more can be read after it: not where in is not a terminal it can read
// that way, once max bytes are read, nor after an error.
func restOfPaste(in io.Reader, max int) (string, bool) {
	f, ok := in.(*os.File)
	if !ok || max <= 0 {
		return "", false
	}
	rest, err := pasteRest(f, pasteQuiet, max)
	return rest, err == nil && len(rest) < max
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
