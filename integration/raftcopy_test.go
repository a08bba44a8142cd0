package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"mesh/controlplane/datadir"
	"mesh/controlplane/seal"
	"mesh/controlplane/state"
	"mesh/integration/harness"
)

// sealedIdentities returns every copy of a control token's sealed identity a copy
// of dir's raft/ holds: in the log's token commands and in every snapshot kept. A
// copy sealed to a control node's curve key comes with that node's id.
func sealedIdentities(t *testing.T, dir string) (plain [][]byte, sealedTo map[string][]state.SealedIdentity) {
	t.Helper()
	sealedTo = map[string][]state.SealedIdentity{}
	add := func(tok state.Token) {
		if len(tok.Sealed) > 0 {
			plain = append(plain, tok.Sealed)
		}
		for id, si := range tok.SealedTo {
			sealedTo[id] = append(sealedTo[id], si)
		}
	}
	copyPath := filepath.Join(t.TempDir(), "raft.db")
	data, err := os.ReadFile(filepath.Join(dir, datadir.RaftDir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, copyPath, string(data))
	store, err := raftboltdb.NewBoltStore(copyPath)
	if err != nil {
		t.Fatalf("open a copy of raft.db: %v", err)
	}
	defer store.Close()
	first, _ := store.FirstIndex()
	last, _ := store.LastIndex()
	for i := first; i <= last && last > 0; i++ {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil || l.Type != raft.LogCommand {
			continue
		}
		var c state.Command
		if json.Unmarshal(l.Data, &c) == nil && c.CreateToken != nil {
			add(state.Token{Sealed: c.CreateToken.Sealed, SealedTo: c.CreateToken.SealedTo})
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, datadir.RaftDir, "snapshots", "*", "state.bin"))
	for _, p := range snaps {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Tokens map[string]state.Token `json:"tokens"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			t.Fatalf("snapshot %s: %v", p, err)
		}
		for _, tok := range st.Tokens {
			add(tok)
		}
	}
	return plain, sealedTo
}

// TestRaftCopyAndTokenTextOpenNothing: the Raft log keeps an entry after the state
// drops what it recorded, and raft.db keeps a compacted entry's bytes in its free
// pages, so whatever a token command carries is in any copy of a control node's raft/
// for good. A control token's identity (the new node's TLS key and operator
// credentials) was recorded sealed under the token's secret alone: a copy of raft/
// and the token's text, used and expired or not, opened it. It is now sealed once
// more to each control node's curve key before it is recorded, and the node that
// admits the joiner opens its own copy: the token's text opens nothing of the copy,
// and a control node's curve key (which never leaves its data directory) with the
// text opens it, the scan's proof that it looked where the identity is.
func TestRaftCopyAndTokenTextOpenNothing(t *testing.T) {
	cp1 := harness.NewControlPlane(t, bin, "raftcopy")
	cp1.Serve()
	text, cp2 := cp1.ControlToken("cp-2")
	if r := cp2.Join(text); r.Code != 0 {
		t.Fatalf("join cp-2 (exit %d):\n%s", r.Code, r.Combined())
	}
	cp2.Serve()
	tok := parseToken(t, text)
	// Snapshots every second here: give cp-1 one that holds the token.
	cp1.Token("web-1")
	time.Sleep(2 * time.Second)

	plain, sealedTo := sealedIdentities(t, cp1.Dir)
	if len(plain) != 0 {
		t.Fatalf("raft/ holds %d copies of the identity sealed under the token's secret alone", len(plain))
	}
	copies := sealedTo["cp-1"]
	if len(copies) == 0 {
		t.Fatalf("no copy of the identity sealed to cp-1 in its raft/ (found for %v): the scan looked in the wrong place", sealedTo)
	}
	curve, err := datadir.Dir(cp1.Dir).LoadCurveKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range copies {
		if _, err := seal.OpenIdentity(tok.Secret, tok.Mesh, tok.Node, si.Blob); err == nil {
			t.Fatal("the token's text alone opens a copy in raft/")
		}
		inner, err := seal.FromCurveKey(curve, si.Blob, si.Sealer)
		if err != nil {
			t.Fatalf("cp-1's curve key does not open its copy: %v", err)
		}
		if _, err := seal.OpenIdentity(tok.Secret, tok.Mesh, tok.Node, inner); err != nil {
			t.Fatalf("cp-1's copy, opened, does not open with the token's text: %v", err)
		}
	}
}
