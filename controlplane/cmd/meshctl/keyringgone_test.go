package main

import (
	"strings"
	"testing"

	"mesh/controlplane/api"
)

// TestSigningKeyStatusNamesANodePastTheHistory: a node the chain of keyrings no
// longer reaches is marked as such, with what to do, and keeps the exit of a node
// behind (5), where it read "no (behind)", as if it would catch up.
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
	if err := keyringNotAcknowledged(res); err == nil {
		t.Fatal("a node past the history counts as acknowledged")
	}
}
