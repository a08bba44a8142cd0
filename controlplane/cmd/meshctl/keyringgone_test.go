package main

import (
	"strings"
	"testing"

	"mesh/controlplane/api"
)

// TestSigningKeyStatusNamesANodePastTheHistory: a node the chain of keyrings no
// longer reaches is marked as such, with what to do, where it read "no (behind)",
// as if it would catch up. It does not fail the exit, nor read as holding back a
// retirement: it never acknowledges, and the rotation's wait loop ran for ever (a
// docs walkthrough); a live node behind still fails it.
func TestSigningKeyStatusNamesANodePastTheHistory(t *testing.T) {
	res := api.KeyringStatus{Epoch: 70, Keys: []string{"k"}, Nodes: []api.KeyringAck{
		{Node: "old", State: api.StateAlive, Epoch: 2, Gone: true},
		{Node: "web", State: api.StateAlive, Epoch: 70},
	}}
	var out strings.Builder
	printKeyringStatus(&out, res)
	if !strings.Contains(out.String(), "epoch 2   no (past the keyring history: enrol it again)") || !strings.Contains(out.String(), "enrol each again") {
		t.Fatalf("signing-key status:\n%s", out.String())
	}
	if strings.Count(out.String(), "past the keyring history") != 1 {
		t.Fatalf("a node that follows is marked too:\n%s", out.String())
	}
	if err := keyringNotAcknowledged(res); err != nil {
		t.Fatalf("a node past the history fails the exit: %v", err)
	}
	res.Keys = []string{"k", "k2"}
	out.Reset()
	printKeyringStatus(&out, res)
	if strings.Contains(out.String(), "retire is refused") {
		t.Fatalf("a node past the history said to hold back the retirement:\n%s", out.String())
	}
	res.Nodes = append(res.Nodes, api.KeyringAck{Node: "late", State: api.StateAlive, Epoch: 69})
	if err := keyringNotAcknowledged(res); err == nil {
		t.Fatal("a live node behind does not fail the exit")
	}
}
