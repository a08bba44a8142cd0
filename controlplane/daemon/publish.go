package daemon

import (
	"runtime"
	"sync"

	"mesh/controlplane/api"
)

// publishDeclarations signs and sends each node's declaration. Signing dominates a
// fleet-wide declaration (Ed25519, ~20 µs each), so it runs on every core; sending
// follows in node order, from the publisher's connection.
func (d *Daemon) publishDeclarations(nodes []string) {
	inputs := d.fsm.DeclarationInputs(nodes)
	envs := make([][]byte, len(inputs))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(inputs)/64))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(inputs); i += workers {
				env, err := d.signer.declaration(inputs[i])
				if err != nil {
					d.log.Error("declaration not signed", "node", inputs[i].Node, "err", err)
					continue
				}
				envs[i] = env
			}
		}()
	}
	wg.Wait()
	for i, env := range envs {
		if env == nil {
			continue
		}
		if err := d.conns.publisher.Publish(api.DeclarationSubject(inputs[i].Node), env); err != nil {
			d.log.Warn("declaration not sent; the node gets it on its next sync", "node", inputs[i].Node, "err", err)
		}
	}
	_ = d.conns.publisher.Flush()
}
