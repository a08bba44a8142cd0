package daemon

import (
	"runtime"
	"sync"

	"mesh/controlplane/api"
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
	var b *signedBatch
	if len(batched) > 0 {
		b = d.signer.batch(batched)
	}
	total := len(single) + len(batched)
	workers := min(runtime.GOMAXPROCS(0), max(1, total/64))
	var wg sync.WaitGroup
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
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				if i < len(batched) {
					env, err := b.envelope(i)
					send(batched[i].Node, env, err)
					continue
				}
				in := single[i-len(batched)]
				env, err := d.signer.declaration(in)
				send(in.Node, env, err)
			}
		}()
	}
	wg.Wait()
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
