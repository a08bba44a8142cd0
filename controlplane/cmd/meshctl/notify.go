package main

import (
	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify tells the service manager about the daemon's state (READY=1,
// STOPPING=1, STATUS=...) when it runs as a systemd Type=notify service, whose
// socket $NOTIFY_SOCKET names; elsewhere it does nothing.
func sdNotify(state string) error {
	_, err := sddaemon.SdNotify(false, state)
	return err
}

// notifyState sends state through cio.notify, if there is one.
func notifyState(cio *cliIO, state string) error {
	if cio.notify == nil {
		return nil
	}
	return cio.notify(state)
}
