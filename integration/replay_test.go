package integration

import (
	"encoding/json"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mesh/declarations"
	"mesh/host/state"
	"mesh/integration/harness"
)

// envelopeWhere returns the newest captured envelope of payload type typ whose
// payload satisfies match.
func envelopeWhere(t *testing.T, envs [][]byte, typ string, match func(payload []byte) bool) []byte {
	t.Helper()
	for i := len(envs) - 1; i >= 0; i-- {
		var env declarations.Envelope
		if json.Unmarshal(envs[i], &env) == nil && env.PayloadType == typ && match(env.Payload) {
			return envs[i]
		}
	}
	t.Fatalf("no captured %s envelope matches among %d", typ, len(envs))
	return nil
}

// appliedKeyring is the signed keyring envelope the host accepted last, as it arrived.
func appliedKeyring(t *testing.T, h *harness.Host) []byte {
	t.Helper()
	a, err := state.Load(h.State)
	if err != nil || len(a.Keyring) == 0 {
		t.Fatalf("no keyring in the host's applied state: %v", err)
	}
	return a.Keyring
}

func envelopePayload(t *testing.T, env []byte) []byte {
	t.Helper()
	var e declarations.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return e.Payload
}

func declWhere(t *testing.T, envs [][]byte, match func(declarations.Declaration) bool) []byte {
	t.Helper()
	return envelopeWhere(t, envs, declarations.PayloadTypeDeclaration, func(p []byte) bool {
		var d declarations.Declaration
		return json.Unmarshal(p, &d) == nil && match(d)
	})
}

// TestHostileBrokerReplays: a broker of the mesh's own cluster records everything
// sent to a host and delivers it again later: after the agent restarted, after a
// signing-key rotation, after the old key was retired, after the node id was revoked
// and enrolled again, and from another mesh. Each is refused with its own code,
// nothing is applied, the agent keeps running, and the mesh's own declarations still
// reach it.
func TestHostileBrokerReplays(t *testing.T) {
	cp := harness.NewControlPlane(t, bin, "replays")
	cp.Serve()
	hb := harness.StartHostileBroker(t, cp)
	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(content string) {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"app.conf","content":"`+content+`"}]}`)
		if r := cp.Ctl("declare", "--node", "web-3", "--file", body); r.Code != 0 {
			t.Fatalf("declare: %s", r.Combined())
		}
	}
	h := harness.NewHost(t, bin, "web-3")
	if r := h.Enrol(cp.Token("web-3")); r.Code != 0 {
		t.Fatalf("enrol: %s", r.Combined())
	}
	agent := h.Run()
	declare("one")
	cp.WaitConverged("web-3", 1, 20*time.Second)
	declare("two")
	cp.WaitConverged("web-3", 2, 20*time.Second)

	// refused injects env and waits for the host to report code; consecutive calls
	// use different codes (or a declaration clears the error between them), so each
	// report is fresh.
	refused := func(h *harness.Host, what, code, want string, env []byte) {
		t.Helper()
		hb.InjectUntil(t, "web-3", env, 15*time.Second, what+" refused as "+code, func() bool {
			n, _ := cp.Node("web-3")
			return n.LastError != nil && n.LastError.Code == code
		})
		if got, _ := h.ReadManaged("app.conf"); got != want {
			t.Fatalf("%s: app.conf = %q, want %q", what, got, want)
		}
		if h.Process().Exited() {
			t.Fatalf("%s stopped the agent:\n%s", what, h.Process().Output())
		}
	}
	v1 := declWhere(t, hb.Captured("web-3"), func(d declarations.Declaration) bool { return d.Version == 1 })

	// Across an agent restart: the applied version was persisted.
	agent.Signal(syscall.SIGTERM)
	agent.Wait(10 * time.Second)
	h.Run()
	cp.WaitConverged("web-3", 2, 20*time.Second)
	refused(h, "v1 after a restart", "rolled_back", "two", v1)

	// Across a rotation: what was signed under epoch 1 is old once the host holds 2.
	v2epoch1 := declWhere(t, hb.Captured("web-3"), func(d declarations.Declaration) bool { return d.Version == 2 && d.KeyringEpoch == 1 })
	// The epoch-1 keyring reached the host in its enrolment's answer, on the
	// enrolment inbox; the host keeps it as it arrived.
	keyring1 := appliedKeyring(t, h)
	var k1 declarations.Keyring
	if err := json.Unmarshal(envelopePayload(t, keyring1), &k1); err != nil || k1.Epoch != 1 {
		t.Fatalf("the keyring the host holds is not epoch 1: %v %+v", err, k1)
	}
	if r := cp.Ctl("signing-key", "rotate"); r.Code != 0 {
		t.Fatalf("rotate: %s", r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the host on epoch 2", func() bool { n, _ := cp.Node("web-3"); return n.KeyringEpoch == 2 })
	refused(h, "v2 signed under epoch 1, after the rotation", "old_keyring", "two", v2epoch1)
	refused(h, "keyring epoch 1, after the rotation", "rolled_back", "two", keyring1)

	// Across the retirement: the old key signs nothing the host believes.
	v2epoch2 := declWhere(t, hb.Captured("web-3"), func(d declarations.Declaration) bool { return d.Version == 2 && d.KeyringEpoch == 2 })
	if r := cp.Ctl("signing-key", "retire"); r.Code != 0 {
		t.Fatalf("retire: %s", r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the host on epoch 3", func() bool { n, _ := cp.Node("web-3"); return n.KeyringEpoch == 3 })
	refused(h, "v1 signed by the retired key", "untrusted", "two", v1)
	refused(h, "v2 signed under epoch 2, after the retirement", "old_keyring", "two", v2epoch2)

	// Across a re-enrolment: the node id revoked, then enrolled again on a new machine.
	lastOfFirst := declWhere(t, hb.Captured("web-3"), func(d declarations.Declaration) bool { return d.KeyringEpoch == 3 })
	if r := cp.Ctl("revoke", "web-3"); r.Code != 0 {
		t.Fatalf("revoke: %s", r.Combined())
	}
	h.Process().Wait(20 * time.Second)
	notice := envelopeWhere(t, hb.Captured("web-3"), declarations.PayloadTypeRevocation, func([]byte) bool { return true })
	again := harness.NewHost(t, bin, "web-3-again")
	if r := again.Enrol(cp.Token("web-3")); r.Code != 0 {
		t.Fatalf("enrol the id again: %s", r.Combined())
	}
	again.Run()
	n, _ := cp.Node("web-3")
	if n.Declared <= 2 {
		t.Fatalf("the new enrolment's first version is %d: versions restarted for the id", n.Declared)
	}
	cp.WaitConverged("web-3", n.Declared, 20*time.Second)
	refused(again, "the earlier enrolment's revocation notice", "wrong_enrolment", "", notice)
	// The mesh's own declaration still applies, and clears the error, so the next
	// refusal is seen afresh.
	declare("three")
	cp.WaitConverged("web-3", n.Declared+1, 20*time.Second)
	harness.Eventually(t, 15*time.Second, "the error cleared", func() bool { n, _ := cp.Node("web-3"); return n.LastError == nil })
	if got, _ := again.ReadManaged("app.conf"); got != "three" {
		t.Fatalf("the mesh's own declaration after the replays: app.conf = %q", got)
	}
	refused(again, "the earlier enrolment's declaration", "wrong_enrolment", "three", lastOfFirst)

	// From another mesh: its signatures are not this mesh's.
	other := harness.NewControlPlane(t, bin, "replays")
	other.Serve()
	otherHB := harness.StartHostileBroker(t, other)
	stranger := harness.NewHost(t, bin, "web-3")
	if r := stranger.Enrol(other.Token("web-3")); r.Code != 0 {
		t.Fatalf("enrol in the other mesh: %s", r.Combined())
	}
	stranger.Run()
	// A declaration of the other mesh's own, sent on its web-3's subject.
	if r := other.Ctl("declare", "--node", "web-3", "--file", body); r.Code != 0 {
		t.Fatalf("declare in the other mesh: %s", r.Combined())
	}
	other.WaitConverged("web-3", 1, 20*time.Second)
	foreign := declWhere(t, otherHB.Captured("web-3"), func(declarations.Declaration) bool { return true })
	refused(again, "a declaration of another mesh of the same name", "untrusted", "three", foreign)
}
