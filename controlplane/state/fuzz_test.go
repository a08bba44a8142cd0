package state

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// FuzzApply feeds arbitrary log entries to an initialised state machine with nodes and
// tokens: nothing may panic, and the state must still snapshot and restore to the same
// bytes afterwards, unless the entry was of newer rules, which stops the machine.
func FuzzApply(f *testing.F) {
	for _, c := range history() {
		data, _ := json.Marshal(c)
		f.Add(data)
	}
	f.Add([]byte(`{"op":"enrol","at":"2001-02-03T04:05:06Z","enrol":{}}`))
	f.Add([]byte(`{"op":"declare","at":"2001-02-03T04:05:06Z","declare":{"selector":{"nodes":[""]},"body":null}}`))
	f.Add([]byte(`{"op":"status","at":"0001-01-01T00:00:00Z","status":{"reports":[{"node":"a"}]}}`))
	f.Add([]byte(`{"op":"label","at":"2001-02-03T04:05:06Z","label":{"node":"a","labels":null}}`))
	f.Add([]byte(fmt.Sprintf(`{"op":"add_operator","rules":%d,"at":"2001-02-03T04:05:06Z","add_operator":{"name":"alice","key":"UA","expires":"2002-01-01T00:00:00Z"}}`, RulesOperators)))
	f.Add([]byte(fmt.Sprintf(`{"op":"revoke_operators","rules":%d,"at":"2001-02-03T04:05:06Z","revoke_operators":{"names":["alice",""]}}`, RulesOperators)))
	f.Add([]byte(fmt.Sprintf(`{"op":"revoke_operators","rules":%d,"at":"2001-02-03T04:05:06Z","revoke_operators":{"names":["alice"]}}`, RulesOperators)))
	f.Add([]byte(fmt.Sprintf(`{"op":"add_operator","rules":%d,"at":"2001-02-03T04:05:06Z","add_operator":{"name":"alice","key":"UA2","expires":"2002-01-01T00:00:00Z","renew":true}}`, RulesOperatorRenewal)))
	f.Add([]byte(fmt.Sprintf(`{"op":"revoke_operators","rules":%d,"at":"2001-02-03T04:05:06Z","revoke_operators":{"names":["alice"],"keys":["UALICE1","UALICE1",""]}}`, RulesOperatorRenewal)))
	f.Add([]byte(fmt.Sprintf(`{"op":"label","rules":%d,"at":"2001-02-03T04:05:06Z","label":{"node":"a","labels":{"k":"v"}}}`, ApplyRules+1)))
	// Over the prefix below no node is revoked: these take the path that forgets
	// nothing (FuzzRestoreThenApply forgets, from a snapshot with b revoked).
	for _, nodes := range []string{`["a","b","c","a",""]`, `null`, `["zz"]`} {
		f.Add([]byte(fmt.Sprintf(`{"op":"forget_revoked","rules":%d,"at":"2101-02-03T04:05:06Z","forget_revoked":{"nodes":%s,"revoked_before":"2101-01-01T00:00:00Z"}}`, RulesForgetRevoked, nodes)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newMachine(t)
		for _, c := range history()[:12] {
			m.apply(c)
		}
		// Operator credentials recorded, for an entry to revoke (or repeat).
		m.apply(addOperatorCmd("alice", "UALICE1", t0, t0.Add(time.Hour)))
		m.applyRaw(data)
		// A second application of the same entry must not panic either.
		m.applyRaw(data)
		if stoppedAtNewerRules(t, m.f, nil) {
			return
		}
		snap := m.snapshot()
		g := NewFSM()
		if err := g.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
			t.Fatalf("restore own snapshot: %v", err)
		}
		if !bytes.Equal(snapshotBytes(t, g), snap) {
			t.Fatal("snapshot does not survive a restore")
		}
		// And the machine still works.
		m.apply(Command{Op: OpProbe, At: t0.Add(time.Hour), Probe: &ProbeCmd{ID: "after"}})
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
