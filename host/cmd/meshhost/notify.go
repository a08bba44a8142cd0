package main

import (
	sddaemon "github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify tells the service manager about the agent's state (READY=1,
// STOPPING=1, STATUS=...) when it runs as a systemd Type=notify service, whose
// socket $NOTIFY_SOCKET names; elsewhere it does nothing.
func sdNotify(state string) error {
	_, err := sddaemon.SdNotify(false, state)
	return err
}
