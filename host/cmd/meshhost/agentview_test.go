package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"mesh/host/agent"
)

// TestStatusSaysWhatAnswersOnTheSocket: meshhost status tells apart no agent, an
// agent from before the status request, and one that accepts and does not answer
// (refusing this user), instead of calling every one of them "not running".
func TestStatusSaysWhatAnswersOnTheSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "mh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if got := askAgent(dir).String(); !strings.HasPrefix(got, "not running") {
		t.Errorf("no socket: %q", got)
	}
	serve := func(answer string) {
		ln, err := net.Listen("unix", agent.SocketPath(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			bufio.NewReader(c).ReadString('\n')
			if answer != "" {
				fmt.Fprintln(c, answer)
			}
		}()
		t.Helper()
		got := askAgent(dir).String()
		want := "running, but it did not answer"
		if answer != "" {
			want = "running (a version that does not say"
		}
		if !strings.HasPrefix(got, want) {
			t.Errorf("answer %q: %q, want %q…", answer, got, want)
		}
	}
	serve("")                              // closed unanswered: another user's connection
	serve(`{"refused":"unknown request"}`) // an older agent
}
