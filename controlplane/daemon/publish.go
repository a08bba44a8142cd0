package daemon

import (
	"runtime"
	"sync"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// publishDeclarations signs and sends each node's declaration. The nodes whose agent
// takes batch proofs (decision 0034) get theirs signed as one batch: one signature
// for them all, and a hash tree, where signing one by one cost an Ed25519 signature
// per node (~25 µs; most of the control plane's CPU in a fan-out). The others, and
// nodes whose envelope the signer keeps, are signed one by one. Either way the
// envelopes are made and sent on every core, each worker sending what it made at
// once, from the publisher's connection: the first nodes of a fleet of 10,000 get
// theirs while the envelopes of the others are still being made, and verify and
// apply meanwhile.
func (d *Daemon) publishDeclarations(nodes []string) { d.sendDeclarations(nodes, nil) }

// sendDeclarations is publishDeclarations with before, when not nil, called for each
// node just before its envelope is sent (env nil when it could not be signed), on
// the goroutine that sends it: the envelope goes out only if before returns true.
// What before publishes for the node (the keyrings a re-send puts first) goes out
// ahead of the envelope, on the same connection.
func (d *Daemon) sendDeclarations(nodes []string, before func(node string, env []byte) bool) {
	inputs := d.fsm.DeclarationInputs(nodes)
	// The nodes to sign in a batch first, the others after, in place.
	n := 0
	for i, in := range inputs {
		if _, kept := d.signer.kept(in); in.BatchProofs && !kept {
			inputs[n], inputs[i] = inputs[i], inputs[n]
			n++
		}
	}
	if n < 2 {
		n = 0
	}
	batched, single := inputs[:n], inputs[n:]
	var mu sync.Mutex
	var unsigned, unsent notDone
	send := func(node string, env []byte, err error) {
		if before != nil && !before(node, env) {
			return
		}
		if err != nil {
			mu.Lock()
			unsigned.add(node, err)
			mu.Unlock()
			return
		}
		if err := d.conns.publisher.Publish(api.DeclarationSubject(node), env); err != nil {
			mu.Lock()
			unsent.add(node, err)
			mu.Unlock()
		}
	}
	// run signs and sends ins' declarations on every core: from the batch b, or
	// one by one when b is nil.
	// Workers by the fan-out's size, not a part's: a part of a large body holds few
	// nodes, each envelope a long encoding (a review: one worker a part).
	workers := min(runtime.GOMAXPROCS(0), max(1, len(inputs)/64))
	run := func(ins []state.DeclarationInput, b *signedBatch) {
		workers := min(workers, len(ins))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(ins); i += workers {
					var env []byte
					var err error
					if b != nil {
						env, err = b.envelope(i)
					} else {
						env, err = d.signer.declaration(ins[i])
					}
					send(ins[i].Node, env, err)
				}
			}()
		}
		wg.Wait()
	}
	for len(batched) > 0 {
		part := batched[:batchPart(batched, maxBatchBytes)]
		run(part, d.signer.batch(part))
		batched = batched[len(part):]
	}
	run(single, nil)
	_ = d.conns.publisher.Flush()
	// One line for the fan-out, not one a node: what fails for one node of a
	// fleet (the signing key, the connection to the broker) fails for them all.
	if unsigned.n > 0 {
		d.log.Error("declaration not signed; the node gets it on its next sync, if this node can sign by then", "nodes", unsigned.n, "node", unsigned.first, "err", unsigned.err)
	}
	if unsent.n > 0 {
		d.log.Warn("declaration not sent; the node gets it on its next sync", "nodes", unsent.n, "node", unsent.first, "err", unsent.err)
	}
}

// maxBatchBytes bounds the payloads signed as one batch, each the size of its body
// and some: the batch holds them all until its envelopes are made, and a fleet's
// declarations of one large body were held at once (10,000 nodes × 780 KiB). A
// fleet's declarations of a small body still go as one batch (10,000 × 1.3 KiB), and
// each batch more costs one signature a key.
const maxBatchBytes = 32 << 20

// batchPart is how many of ins, at least one, go in the next batch: as many as keep
// their payloads within most bytes.
func batchPart(ins []state.DeclarationInput, most int) int {
	total := 0
	for i, in := range ins {
		// A payload is its body and the declaration's fields around it.
		total += len(in.Body) + 512
		if total > most && i > 0 {
			return i
		}
	}
	return len(ins)
}

// notDone counts the nodes of a fan-out something failed for, and keeps the first
// with its error.
type notDone struct {
	n     int
	first string
	err   error
}

func (f *notDone) add(node string, err error) {
	if f.n == 0 {
		f.first, f.err = node, err
	}
	f.n++
}
