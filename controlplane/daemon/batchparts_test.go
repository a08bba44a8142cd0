package daemon

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/controlplane/state"
	"mesh/declarations"
)

// TestBatchPartsKeepTheirPayloadsWithinTheBound: a fan-out signed all its nodes'
// declarations as one batch, holding every payload (each the size of the body) at
// once: 3,000 nodes of a 256 KiB body peaked at 1.5 GiB of heap, 10,000 of the
// largest body a declaration may have would be 7.6 GiB. It is signed in parts of at
// most maxBatchBytes now (the same fan-out peaked at 173 MiB), and a fleet's small
// declarations still go as one batch.
func TestBatchPartsKeepTheirPayloadsWithinTheBound(t *testing.T) {
	inputs := func(n, size int) []state.DeclarationInput {
		ins := make([]state.DeclarationInput, n)
		for i := range ins {
			ins[i].Body = make([]byte, size)
		}
		return ins
	}
	for _, c := range []struct {
		n, size int
		parts   int
	}{
		{10000, 1300, 1},      // a fleet's small body: one batch, as before
		{3000, 256 << 10, 24}, // 3,000 × 256.5 KiB in parts of 32 MiB
		{5, 40 << 20, 5},      // each larger than the bound: one a part
		{1, 100, 1},
	} {
		ins := inputs(c.n, c.size)
		parts := 0
		for len(ins) > 0 {
			k := batchPart(ins, maxBatchBytes)
			if k < 1 {
				t.Fatalf("%d × %d bytes: a part of %d", c.n, c.size, k)
			}
			if bytes := k * (c.size + 512); k > 1 && bytes > maxBatchBytes {
				t.Fatalf("%d × %d bytes: a part of %d holds %d bytes, more than %d", c.n, c.size, k, bytes, maxBatchBytes)
			}
			ins = ins[k:]
			parts++
		}
		if parts != c.parts {
			t.Errorf("%d × %d bytes: %d parts, want %d", c.n, c.size, parts, c.parts)
		}
	}
}

// TestAFanOutInPartsVerifiesOnEveryNode: the declarations of a body large enough
// that a fan-out signs them in several batches each verify for their node.
func TestAFanOutInPartsVerifiesOnEveryNode(t *testing.T) {
	const n = 300
	d := fleet(t, n)
	body := []byte(fmt.Sprintf(`{"files":[{"path":"etc/big.conf","content":"%s"}]}`, strings.Repeat("x", 200<<10)))
	if res, err := d.raft.Apply(state.Command{Op: state.OpDeclare, Declare: &state.DeclareCmd{Selector: state.Selector{All: true}, Body: body}}, time.Minute); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	nodes := make([]string, n)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n-%d", i)
		d.status.add(nodes[i], state.Applied{BatchProofs: true}, reportChange)
	}
	d.status.flush()
	var pub []ed25519.PublicKey
	for _, k := range d.signer.currentKeys() {
		pub = append(pub, k.Public().(ed25519.PublicKey))
	}
	mesh := d.Config().Mesh
	var mu sync.Mutex
	verified := map[string]bool{}
	d.sendDeclarations(nodes, func(node string, env []byte) bool {
		key := d.fsmNode(t, node).PublicKey
		_, err := declarations.VerifyDeclaration(env, pub, declarations.Expect{Mesh: mesh, Node: node, NodeKey: key, Now: time.Now()})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			t.Errorf("%s: %v", node, err)
		}
		verified[node] = err == nil
		return false // nothing is sent: there is no one to send it to
	})
	ok := 0
	for _, v := range verified {
		if v {
			ok++
		}
	}
	if ok != n {
		t.Fatalf("%d of %d nodes' declarations verify", ok, n)
	}
}
