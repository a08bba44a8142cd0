package daemon

import (
	"runtime"
	"sync"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// publishDeclarations signs and sends each node's declaration. Signing dominates a
// fleet-wide declaration (Ed25519, ~20 µs each), so it runs on every core; sending
// follows in node order, from the publisher's connection.
func (d *Daemon) publishDeclarations(nodes []string) {
	envs := make([][]byte, len(nodes))
	d.fsm.Read(func(s *state.State) {
		workers := min(runtime.GOMAXPROCS(0), max(1, len(nodes)/64))
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < len(nodes); i += workers {
					n, ok := s.Nodes[nodes[i]]
					if !ok || n.Revoked {
						continue
					}
					env, err := d.signer.declaration(s, n)
					if err != nil {
						d.log.Error("declaration not signed", "node", nodes[i], "err", err)
						continue
					}
					envs[i] = env
				}
			}()
		}
		wg.Wait()
	})
	for i, env := range envs {
		if env == nil {
			continue
		}
		if err := d.conns.publisher.Publish(api.DeclarationSubject(nodes[i]), env); err != nil {
			d.log.Warn("declaration not sent; the node gets it on its next sync", "node", nodes[i], "err", err)
		}
	}
	_ = d.conns.publisher.Flush()
}
