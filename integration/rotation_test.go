package integration

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/declarations"
	"mesh/integration/harness"
	"mesh/tokenfmt"
)

func keyringStatus(t *testing.T, cp *harness.ControlPlane) api.KeyringStatus {
	t.Helper()
	r := cp.Ctl("signing-key", "status", "--json")
	if r.Code != 0 && r.Code != 5 { // 5: a live node has not acknowledged the keyring yet
		t.Fatalf("signing-key status: %s", r.Combined())
	}
	var st api.KeyringStatus
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSigningKeyRotation: rotate, status, retire with overlap and no flag day, across
// three control nodes. A live node that has not acknowledged blocks the retirement
// unless forced, which names it; a retired key's declarations are refused; a new
// leader signs with the new key; a node offline throughout catches up by following
// the chain of keyrings; new tokens carry the new key.
func TestSigningKeyRotation(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "rotate")
	cp1.Serve()
	cp2 := joinControl(t, cp1, "cp-2")
	cp3 := joinControl(t, cp1, "cp-3")
	cps := map[string]*harness.ControlPlane{"cp-1": cp1, "cp-2": cp2, "cp-3": cp3}
	oldKey, err := datadir.Dir(cp1.Dir).LoadSigningKey()
	if err != nil {
		t.Fatal(err)
	}

	body := filepath.Join(t.TempDir(), "b.json")
	declare := func(cp *harness.ControlPlane, node, content string) {
		t.Helper()
		writeFile(t, body, `{"files":[{"path":"state","content":"`+content+`"}]}`)
		if r := cp.Ctl("declare", "--node", node, "--file", body); r.Code != 0 {
			t.Fatalf("declare %s: %s", node, r.Combined())
		}
	}
	online := harness.NewHost(t, bin, "online")
	away := harness.NewHost(t, bin, "away")
	lagging := harness.NewHost(t, bin, "lagging")
	for _, h := range []*harness.Host{online, away, lagging} {
		if r := h.Enrol(cp1.Token(h.Name)); r.Code != 0 {
			t.Fatalf("enrol %s: %s", h.Name, r.Combined())
		}
	}
	online.Run()
	awayAgent := away.Run()
	declare(cp1, "away", "before")
	cp1.WaitConverged("away", 1, 20*time.Second)
	awayAgent.Kill() // offline for the whole rotation

	// A live node whose agent never takes the new keyring: it keeps reporting epoch 1.
	errs := make(chan error, 8)
	lag := nodeConn(t, cp1.Dir, lagging.State, cp1.Listen, errs)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			lag.Publish("mesh.node.lagging.status", []byte(`{"v":2,"node":"lagging","have_applied":false,"applied_version":0,"keyring_epoch":1}`))
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()

	// A token minted before the rotation carries the old key: pending through the
	// overlap, stale once the key is retired (the mesh refuses it).
	cp1.Token("early")
	if r := cp2.Ctl("signing-key", "rotate"); r.Code != 0 || !strings.Contains(r.Stdout, "keyring epoch 2") {
		t.Fatalf("rotate (exit %d): %s", r.Code, r.Combined())
	}
	harness.Eventually(t, 20*time.Second, "the online node acknowledges epoch 2", func() bool {
		for _, n := range keyringStatus(t, cp1).Nodes {
			if n.Node == "online" {
				return n.Epoch == 2
			}
		}
		return false
	})
	// During the overlap every control node holds both keys.
	for id, cp := range cps {
		harness.Eventually(t, 10*time.Second, id+" holds both keys during the overlap", func() bool {
			keys, _ := datadir.Dir(cp.Dir).LoadSigningKeys()
			return len(keys) == 2
		})
	}
	harness.Eventually(t, 15*time.Second, "the away node shown offline", func() bool {
		n, _ := cp1.Node("away")
		return n.State == api.StateOffline
	})
	if r := cp3.Ctl("signing-key", "status"); r.Code != 5 || !strings.Contains(r.Stdout, "1 live node(s) behind; retire is refused") ||
		!strings.Contains(r.Stderr, "not converged: 1 live node(s) have not acknowledged keyring epoch 2") {
		t.Fatalf("status with a live node behind (exit %d): %s", r.Code, r.Combined())
	}
	r := cp3.Ctl("signing-key", "retire")
	if r.Code != 4 || !strings.Contains(r.Stderr, "lagging (epoch 1)") || strings.Contains(r.Stderr, "away") {
		t.Fatalf("retire with a live node behind (exit %d): %s", r.Code, r.Combined())
	}
	if r := cp3.Ctl("token", "list", "--node", "early"); r.Code != 0 || !strings.Contains(r.Stdout, "pending") {
		t.Fatalf("a token of the old key during the overlap (exit %d): %s", r.Code, r.Combined())
	}
	r = cp3.Ctl("signing-key", "retire", "--force")
	if r.Code != 0 || !strings.Contains(r.Stdout, "stranded: lagging") || !strings.Contains(r.Stdout, "pending tokens of early carry the retired key") {
		t.Fatalf("retire --force (exit %d): %s", r.Code, r.Combined())
	}
	if r := cp3.Ctl("token", "list", "--node", "early"); r.Code != 0 || !strings.Contains(r.Stdout, "stale") || strings.Contains(r.Stdout, "pending") {
		t.Fatalf("a token of the retired key (exit %d): %s", r.Code, r.Combined())
	}
	// Run again, or after a rotate that did not complete: nothing to retire, and it
	// says so rather than that a key was retired (an operations audit).
	if r := cp3.Ctl("signing-key", "retire"); r.Code != 0 || !strings.Contains(r.Stdout, "no rotation is in progress: nothing was retired now") || strings.Contains(r.Stdout, "the old key is retired") {
		t.Fatalf("retire run again (exit %d): %s", r.Code, r.Combined())
	}
	for id, cp := range cps {
		harness.Eventually(t, 10*time.Second, id+" drops the retired key", func() bool {
			keys, _ := datadir.Dir(cp.Dir).LoadSigningKeys()
			return len(keys) == 1 && !keys[0].Equal(oldKey)
		})
	}

	declare(cp1, "online", "after retirement")
	cp1.WaitConverged("online", 1, 20*time.Second)
	harness.Eventually(t, 20*time.Second, "the online node on epoch 3", func() bool {
		n, _ := cp1.Node("online")
		return n.KeyringEpoch == 3
	})
	// A declaration signed by the retired key is refused as not from the mesh, even
	// delivered by a broker of the mesh's own cluster.
	hb := harness.StartHostileBroker(t, cp1, cp2, cp3)
	forged, _ := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "rotate", Node: "online", NodeKey: online.PublicKey(), Version: 50, KeyringEpoch: 1,
		IssuedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC(),
		Body: declarations.Body{Files: []declarations.File{{Path: "state", Content: ptr("old key")}}},
	}, oldKey)
	hb.InjectUntil(t, "online", forged, 15*time.Second, "the retired key's declaration refused", func() bool {
		n, _ := cp1.Node("online")
		return n.LastError != nil && n.LastError.Code == "untrusted"
	})
	if got, _ := online.ReadManaged("state"); got != "after retirement" {
		t.Fatalf("state = %q", got)
	}

	// A new leader signs with the new key, which it received sealed.
	var leader string
	for _, c := range cp1.Nodes().Control {
		if c.Raft == api.RaftLeader {
			leader = c.ID
		}
	}
	cps[leader].Process().Kill()
	var other *harness.ControlPlane
	for id, cp := range cps {
		if id != leader {
			other = cp
		}
	}
	harness.Eventually(t, 20*time.Second, "a new leader", func() bool { return other.Ctl("nodes").Code == 0 })
	declare(other, "online", "new leader")
	other.WaitConverged("online", 2, 30*time.Second)
	declare(other, "away", "while away")

	// The node that was away follows the chain 1 -> 2 -> 3 and converges.
	away.Run()
	other.WaitConverged("away", 2, 30*time.Second)
	harness.Eventually(t, 15*time.Second, "the returning node on epoch 3", func() bool {
		n, _ := other.Node("away")
		return n.KeyringEpoch == 3
	})
	if got, _ := away.ReadManaged("state"); got != "while away" {
		t.Fatalf("the returning node holds %q", got)
	}

	// New tokens carry the current key.
	tok, err := tokenfmt.Parse(other.Token("fresh"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	st := keyringStatus(t, other)
	if hex.EncodeToString(tok.SigningKey) != st.Keys[0] || tok.SigningKey.Equal(oldKey.Public().(ed25519.PublicKey)) {
		t.Fatalf("a new token carries %x, the keyring is %v", tok.SigningKey, st.Keys)
	}
	if r := harness.NewHost(t, bin, "fresh").Enrol(tok.Encode()); r.Code != 0 {
		t.Fatalf("enrol with a token after the rotation: %s", r.Combined())
	}
}
