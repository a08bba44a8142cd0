package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/host/agent"
	"mesh/host/identity"
	"mesh/host/state"
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

	// A state directory too deep for a socket's address: no agent can be asked,
	// which is neither "not running" nor "did not answer".
	deep := dir + "/" + strings.Repeat("d", 120)
	v := askAgent(deep)
	if got := v.String(); v.Running || !strings.HasPrefix(got, "unknown: ") || !strings.Contains(got, "--state directory") {
		t.Errorf("a state directory too deep: %+v: %q", v, got)
	}
}

// TestAgentViewSaysWhyNot: each state of the agent's link reads as what it means,
// with the reason when the mesh is not reached or does not answer the sync.
func TestAgentViewSaysWhyNot(t *testing.T) {
	since := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    agentView
		want string
	}{
		{agentView{Running: true, Known: true, LinkStatus: agent.LinkStatus{Since: since, Error: "dial tcp 10.0.0.1:7300: connect: connection refused"}},
			"running; the mesh is UNREACHABLE since 2026-12-03T15:00:00Z (dial tcp 10.0.0.1:7300: connect: connection refused)"},
		{agentView{Running: true, Known: true, LinkStatus: agent.LinkStatus{Connected: true, Broker: "tls://10.0.0.1:7300", Since: since, Error: "sync not answered: nats: timeout"}},
			"connected to tls://10.0.0.1:7300 since 2026-12-03T15:00:00Z, NOT SYNCED (sync not answered: nats: timeout)"},
		{agentView{Running: true, Known: true, LinkStatus: agent.LinkStatus{Connected: true, Synced: true, Broker: "tls://10.0.0.1:7300", Since: since}},
			"connected to tls://10.0.0.1:7300 since 2026-12-03T15:00:00Z, synced"},
	} {
		if got := c.v.String(); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v:\n got %q\nwant %q…", c.v, got, c.want)
		}
	}
}

// TestStatusSaysWhatTheAgentCouldNotSave: with the agent's saves failing, status
// read the state file alone and said the version before it, no error, while the
// control plane heard state_not_saved. It now says what the running agent holds,
// that it is not saved, and why, in text and in JSON.
func TestStatusSaysWhatTheAgentCouldNotSave(t *testing.T) {
	_, id := enrolled(t)
	answer := `{"connected":true,"synced":true,"broker":"tls://127.0.0.1:1","since":"2026-12-05T01:00:00Z",` +
		`"unsaved":{"have_applied":true,"applied_version":2,"expires_at":"2099-01-01T00:00:00Z","error":"write applied.state: no space left on device"}}`
	dir, answers := fakeAgent(t, id, answer)
	code, out, stderr := runCLI("", nil, "status", "--state", dir)
	if code != exitOK || !strings.Contains(out, "applied   v2") || !strings.Contains(out, "state_not_saved: write applied.state: no space left on device") || !strings.Contains(out, "NOT SAVED") {
		t.Fatalf("status (exit %d):\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI("", nil, "status", "--state", dir, "--json")
	if code != exitOK || !strings.Contains(out, `"applied_version": 2`) || !strings.Contains(out, `"last_error": "state_not_saved:`) {
		t.Fatalf("status --json (exit %d):\n%s%s", code, out, stderr)
	}

	// The state file owes a retry that is over (the agent applied since, and
	// could not save that): no retry line. The agent owing one: its time.
	if err := state.Save(dir, state.Applied{HaveApplied: true, Version: 1, BodyDigest: strings.Repeat("ab", 32),
		IssuedAt: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC), ExpiresAt: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC), NextAttempt: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCLI("", nil, "status", "--state", dir)
	if code != exitOK || strings.Contains(out, "retry") || !strings.Contains(out, "its state file v1") {
		t.Fatalf("status with a retry over in the file (exit %d):\n%s%s", code, out, stderr)
	}
	answers(strings.Replace(answer, `"error":"write`, `"next_attempt":"2099-02-01T00:00:00Z","error":"write`, 1))
	code, out, stderr = runCLI("", nil, "status", "--state", dir)
	if code != exitOK || !strings.Contains(out, "retry     at 2099-02-01T00:00:00Z") {
		t.Fatalf("status with the agent owing a retry (exit %d):\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI("", nil, "status", "--state", dir, "--json")
	if code != exitOK || !strings.Contains(out, `"next_attempt": "2099-02-01T00:00:00Z"`) {
		t.Fatalf("status --json with the agent owing a retry (exit %d):\n%s%s", code, out, stderr)
	}
}

// TestFilesLine: the status line of the file check names when it last looked, and
// what it put back last, counting what it does not name.
func TestFilesLine(t *testing.T) {
	at := time.Date(2026, 12, 5, 9, 40, 0, 0, time.UTC)
	if got := filesLine(&agent.FilesStatus{CheckedAt: at}); got != "checked at 2026-12-05T09:40:00Z; none changed on this host since the agent started" {
		t.Errorf("nothing put back: %q", got)
	}
	f := &agent.FilesStatus{CheckedAt: at, PutBack: 14, LastPutBackAt: at.Add(-time.Minute), LastPutBackCount: 12,
		LastPutBack: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}}
	want := "checked at 2026-12-05T09:40:00Z; 14 put back as declared since the agent started (changed on this host), the last at 2026-12-05T09:39:00Z: a, b, c, d, e and 7 more"
	if got := filesLine(f); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	f = &agent.FilesStatus{CheckedAt: at, Failed: "apply etc/app.conf: read-only file system"}
	want = "checked at 2026-12-05T09:40:00Z; what changed on this host could not be put back as declared (tried again at each check; the node is failing meanwhile): apply etc/app.conf: read-only file system"
	if got := filesLine(f); got != want {
		t.Errorf("a failing put back:\ngot  %q\nwant %q", got, want)
	}
	// Off (its copy expired while the mesh was out of reach): said first, with
	// since when, and not "none changed", which the check can no longer tell.
	f = &agent.FilesStatus{CheckedAt: at, OffCode: agent.CheckOffExpired, OffSince: at.Add(time.Hour), Off: "the kept copy expired"}
	want = "OFF since 2026-12-05T10:40:00Z, files changed on this host are not put back: the kept copy expired; last compared at 2026-12-05T09:40:00Z"
	if got := filesLine(f); got != want {
		t.Errorf("off:\ngot  %q\nwant %q", got, want)
	}
	// Off since the agent started (restarted while cut off): it never compared.
	f = &agent.FilesStatus{OffCode: agent.CheckOffNoCopy, OffSince: at, Off: "no copy is kept"}
	want = "OFF since 2026-12-05T09:40:00Z, files changed on this host are not put back: no copy is kept; not compared since the agent started"
	if got := filesLine(f); got != want {
		t.Errorf("off since the start:\ngot  %q\nwant %q", got, want)
	}
	// --check-files 0: said, and neither "not compared" nor "none changed", which
	// read as a check still to come.
	f = &agent.FilesStatus{Never: true}
	want = "NEVER CHECKED: the agent runs with --check-files 0, so files changed on this host stay as they are until a new declaration, or the mesh's re-signed copy (every 12 hours), rewrites them"
	if got := filesLine(f); got != want {
		t.Errorf("never:\ngot  %q\nwant %q", got, want)
	}
	// The copy not kept on disk: the check goes on, a restart would wait.
	f = &agent.FilesStatus{CheckedAt: at, NotKept: "no space left on device"}
	want = "checked at 2026-12-05T09:40:00Z; none changed on this host since the agent started; its copy of the applied declaration is NOT KEPT in the state directory (tried again at each check; after a restart, files are checked once the mesh sends a copy): no space left on device"
	if got := filesLine(f); got != want {
		t.Errorf("not kept:\ngot  %q\nwant %q", got, want)
	}
}

// TestStatusSaysAnotherMachineHoldsTheKey: neither machine's meshhost status said
// anything of a clone. While the running agent says the mesh told it that another
// machine holds the node's key, status says so, from where, and what to do, in text
// and in JSON; without it, nothing.
func TestStatusSaysAnotherMachineHoldsTheKey(t *testing.T) {
	_, id := enrolled(t)
	plain := `{"connected":true,"synced":true,"broker":"tls://127.0.0.1:1","since":"2026-12-05T01:00:00Z"}`
	answer := strings.TrimSuffix(plain, "}") + `,"shared_key":{"from":["192.0.2.9"],"connections":2,"since":"2026-12-05T00:55:00Z","told_at":"2026-12-05T01:10:00Z"}}`
	dir, answers := fakeAgent(t, id, answer)
	code, out, stderr := runCLI("", nil, "status", "--state", dir)
	want := "shared    ANOTHER MACHINE holds this node's key (from 192.0.2.9; since 2026-12-05T00:55:00Z, 2 connections with it, as the mesh said at 2026-12-05T01:10:00Z)"
	if code != exitOK || !strings.Contains(out, want) || !strings.Contains(out, "meshctl revoke "+id.Node) {
		t.Fatalf("status (exit %d):\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI("", nil, "status", "--state", dir, "--json")
	if code != exitOK || !strings.Contains(out, `"shared_key": {`) || !strings.Contains(out, `"192.0.2.9"`) {
		t.Fatalf("status --json (exit %d):\n%s%s", code, out, stderr)
	}
	answers(plain)
	if code, out, stderr = runCLI("", nil, "status", "--state", dir); code != exitOK || strings.Contains(out, "shared ") {
		t.Fatalf("status without it (exit %d):\n%s%s", code, out, stderr)
	}
}

// fakeAgent is a state directory holding id, with something on the agent's socket
// that answers every status request with answer, or with what the returned function
// was given last.
func fakeAgent(t *testing.T, id identity.Identity, answer string) (string, func(string)) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mh") // short: a socket's address is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", agent.SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bufio.NewReader(c).ReadString('\n')
			mu.Lock()
			fmt.Fprintln(c, answer)
			mu.Unlock()
			c.Close()
		}
	}()
	return dir, func(a string) {
		mu.Lock()
		answer = a
		mu.Unlock()
	}
}
