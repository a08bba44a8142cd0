// Package hangup keeps SIGHUP from ending a long-running command. By default the
// signal ends a Go program at once: a closed terminal, `kill -HUP` or a
// log-rotation script's reload stopped `meshctl serve` and `meshhost run` without
// their clean stop, with exit status 129, which systemd counts a clean stop, so their
// units stayed down. Neither has anything to reload; SIGTERM stops them.
package hangup

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// Ignore catches SIGHUP until stop is called, and logs each one as a warning:
// "SIGHUP ignored: " and then goesOn, which says what the command does instead
// ("this control node goes on serving"). stop restores the signal's default.
func Ignore(log *slog.Logger, goesOn string) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-ch:
				log.Warn("SIGHUP ignored: " + goesOn + " (it has nothing to reload); SIGTERM stops it")
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}
