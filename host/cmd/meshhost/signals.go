package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// stopSignals returns a context that ends when SIGINT or SIGTERM arrives, once
// onStop has been called with the signal: on the goroutine that received it, before
// the context ends, so that what onStop logs comes before anything the stop makes
// happen. stop restores the signals' default behaviour.
func stopSignals(onStop func(os.Signal)) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			onStop(sig)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// signalName is a signal as kill(1) and systemd name it (Go's own names are
// "interrupt" and "terminated").
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
