package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"mesh/host/apply"
	"mesh/host/hooks"
	"mesh/host/state"
	"mesh/host/wire"
)

// hostileOutput is a hook's command that prints more than a hook's output cap of
// what JSON encodes at six bytes a byte (a control character, an HTML character, a
// byte that is not UTF-8), then fails.
const hostileOutput = `i=0; while [ $i -lt 1600 ]; do printf '<\001\377&'; i=$((i+1)); done; exit 1`

// TestStatusReportWithinBudget builds status reports from the worst an agent can be
// asked to report, and checks that each stays under the control plane's budget for a
// status (over it, the node is disconnected, and reconnects to be disconnected again
// at its next report), while the agent's applied state keeps the whole text.
func TestStatusReportWithinBudget(t *testing.T) {
	t.Run("several hooks at their output cap", func(t *testing.T) {
		f := newFixture(t)
		conf := `{"hooks":[`
		for i, name := range []string{"a", "b", "c", "d"} {
			if i > 0 {
				conf += ","
			}
			conf += `{"name":"` + name + `","paths":["etc/*"],"run":["sh","-c",` + strconvQuote(hostileOutput) + `]}`
		}
		conf += `]}`
		p := filepath.Join(t.TempDir(), "hooks.json")
		if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := hooks.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		f.a.o.Hooks = cfg
		if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		if f.a.applied.LastErrorCode != wire.StatusHookFailed || len(f.a.applied.LastError) <= 4*4096 {
			t.Fatalf("the hooks' failure is %q, %d bytes; want all four hooks' output", f.a.applied.LastErrorCode, len(f.a.applied.LastError))
		}
		checkReport(t, f)
	})
	t.Run("a long apply error", func(t *testing.T) {
		f := newFixture(t)
		f.a.applier = longFailure{strings.Repeat("é<\x00\xff", 20_000)}
		if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		if f.a.applied.LastErrorCode != wire.StatusApplyFailed {
			t.Fatalf("recorded %q", f.a.applied.LastErrorCode)
		}
		checkReport(t, f)
	})
	t.Run("a short error", func(t *testing.T) {
		f := newFixture(t)
		f.a.applier = failingApplier{}
		if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
			t.Fatal(err)
		}
		st := decodeReport(t, f.a.statusReport())
		if st.Error == nil || st.Error.Message != f.a.applied.LastError || st.Error.Code != wire.StatusApplyFailed {
			t.Fatalf("a short error is reported as %+v, want %q unchanged", st.Error, f.a.applied.LastError)
		}
	})
}

// checkReport checks f's status report: under the budget, its message clipped to what
// the control plane keeps and marked as cut, and the whole text kept in the state.
func checkReport(t *testing.T, f *fixture) {
	t.Helper()
	whole := f.a.applied.LastError
	data := f.a.statusReport()
	if len(data) >= wire.MaxStatusSize {
		t.Fatalf("the status report is %d bytes; the control plane disconnects a node for a report over %d", len(data), wire.MaxStatusSize)
	}
	t.Logf("a report of %d bytes for an error of %d", len(data), len(whole))
	st := decodeReport(t, data)
	msg := st.Error.Message
	if len(msg) > wire.MaxStatusMessage || !strings.Contains(msg, "[cut: ") || !strings.Contains(msg, "meshhost status") {
		t.Fatalf("the reported message is %d bytes and reads %q; want at most %d, marked as cut", len(msg), msg, wire.MaxStatusMessage)
	}
	kept := msg[:strings.Index(msg, " … [cut: ")]
	if !strings.HasPrefix(strings.ToValidUTF8(whole, "\uFFFD"), kept) || len(kept) < wire.MaxStatusMessage/2 {
		t.Fatalf("the reported message does not begin with the error's text: %q", kept)
	}
	// JSON, as the state file is, carries each byte that is not UTF-8 as U+FFFD.
	var stored string
	if data, _ := json.Marshal(whole); json.Unmarshal(data, &stored) != nil {
		t.Fatal("the error's text does not round-trip through JSON")
	}
	if persisted, err := state.Load(f.dir); err != nil || persisted.LastError != stored {
		t.Fatalf("the applied state does not keep the whole text (%d bytes of %d): %v", len(persisted.LastError), len(stored), err)
	}
}

func decodeReport(t *testing.T, data []byte) wire.Status {
	t.Helper()
	var st wire.Status
	if err := json.Unmarshal(data, &st); err != nil || st.Error == nil {
		t.Fatalf("the report %q does not decode with an error: %v", data, err)
	}
	return st
}

type longFailure struct{ text string }

func (l longFailure) Apply(context.Context, []apply.File, []string) (apply.Result, error) {
	return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: errors.New(l.text), RolledBack: true}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestClipMessage: a message the control plane keeps whole is sent unchanged; a longer
// one, or one that decodes longer (bytes that are not UTF-8), is cut on a rune
// boundary to what it keeps, marked as cut, and reaches it exactly as sent.
func TestClipMessage(t *testing.T) {
	max := wire.MaxStatusMessage
	for _, short := range []string{"", "x", strings.Repeat("é", max/2), strings.Repeat("x", max), "hook a: exit status 1: <>&\x00\n"} {
		if got := clipMessage(short); got != short {
			t.Errorf("a message of %d bytes was changed to %q", len(short), got)
		}
	}
	for name, long := range map[string]string{
		"one byte over":                       strings.Repeat("x", max+1),
		"two-byte runes":                      strings.Repeat("é", max),
		"three-byte":                          strings.Repeat("€", max),
		"four-byte":                           "x" + strings.Repeat("𝄞", max),
		"not UTF-8, short but decodes longer": strings.Repeat("ab\x80", max/3),
		"not UTF-8":                           strings.Repeat("\xff<\x01", 10*max),
		"huge":                                strings.Repeat("hook a: exit status 1: <>&\x00 ", 100_000),
	} {
		got := clipMessage(long)
		if len(got) > max || !utf8.ValidString(got) || !strings.Contains(got, "[cut: "+itoa(len(long))+" bytes in all") {
			t.Errorf("%s: clipped to %d bytes, valid UTF-8 %v: %q", name, len(got), utf8.ValidString(got), got)
			continue
		}
		var decoded string
		if data, _ := json.Marshal(got); json.Unmarshal(data, &decoded) != nil || decoded != got {
			t.Errorf("%s: the control plane would decode %q, not what was sent", name, decoded)
		}
		kept := got[:strings.Index(got, " … [cut: ")]
		if !strings.HasPrefix(strings.ToValidUTF8(long, "\uFFFD"), kept) || len(kept) < max-150 {
			t.Errorf("%s: %d bytes kept, not the message's beginning", name, len(kept))
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestHookFailureIsNotLoggedAsUnapplied: a declaration whose hook fails is applied,
// and its log line says so. Before, it read "envelope not applied", as a refused or
// failed declaration does, though its files were written and its version recorded.
func TestHookFailureIsNotLoggedAsUnapplied(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	p := filepath.Join(t.TempDir(), "hooks.json")
	if err := os.WriteFile(p, []byte(`{"hooks":[{"name":"reload","paths":["etc/*"],"run":["sh","-c","exit 1"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := hooks.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	f.a.o.Hooks = cfg
	if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	if f.a.applied.Version != 1 || f.a.applied.LastErrorCode != wire.StatusHookFailed {
		t.Fatalf("applied v%d, last error %q", f.a.applied.Version, f.a.applied.LastErrorCode)
	}
	if strings.Contains(logged.String(), "not applied") || !strings.Contains(logged.String(), "hook failed after the declaration was applied") {
		t.Fatalf("the log says:\n%s", logged.String())
	}
}

// TestStatusReportNamesTheAgentsBuild: the status names the agent as its caller
// said (meshhost names its build, enrol.Agent), so that the mesh shows which build
// each host runs; an agent given none sends no agent member, as the control plane
// reads an absent one as unknown.
func TestStatusReportNamesTheAgentsBuild(t *testing.T) {
	f := newFixture(t)
	const build = "meshhost/0.1.0+git20261203145709.7132ef2931ef"
	f.a.o.Agent = build
	var st wire.Status
	if err := json.Unmarshal(f.a.statusReport(), &st); err != nil || st.Agent != build {
		t.Errorf("the report names the agent %q (%v), want %q", st.Agent, err, build)
	}
	f.a.o.Agent = ""
	if data := f.a.statusReport(); bytes.Contains(data, []byte(`"agent"`)) {
		t.Errorf("an agent given no name reports %s", data)
	}
}

// TestTheReportSaysTheHeartbeat: the control plane counts a node offline after three
// of the report intervals its agent says it has (or its --offline-after if longer);
// an agent run with --heartbeat 1m was shown offline between its reports. The
// interval is said in whole seconds, rounded up.
func TestTheReportSaysTheHeartbeat(t *testing.T) {
	for _, c := range []struct {
		every time.Duration
		want  uint32
	}{{time.Minute, 60}, {1500 * time.Millisecond, 2}, {15 * time.Second, 15}} {
		f := newFixture(t)
		f.a.o.Heartbeat = c.every
		var st wire.Status
		if err := json.Unmarshal(f.a.statusReport(), &st); err != nil {
			t.Fatal(err)
		}
		if st.HeartbeatSeconds != c.want {
			t.Errorf("heartbeat %s is reported as %d s, want %d", c.every, st.HeartbeatSeconds, c.want)
		}
	}
}
