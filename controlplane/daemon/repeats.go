package daemon

import (
	"context"
	"log/slog"
)

// logRepeated logs msg the first time and then at most once an interval (the
// guard's), with how many times it happened since the last line ("count"). It is
// for what each of a fleet's requests can meet at once (a connection of the control
// plane's that cannot send): one line per host would bury the log. msg is the kind,
// so it must not vary; what varies goes in args.
func (d *Daemon) logRepeated(level slog.Level, msg string, args ...any) {
	if due, n := d.guard.due(DropKey{Subject: "log", Reason: Reason(msg)}); due {
		d.log.Log(context.Background(), level, msg, append(args, "count", n)...)
	}
}
