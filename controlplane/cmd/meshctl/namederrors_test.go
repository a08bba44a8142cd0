package main

import (
	"strings"
	"testing"

	"mesh/controlplane/api"
)

// TestNamedNodesShowTheirWholeError (a walkthrough): signing-key status and status
// say of a node past the keyring history "meshctl nodes NODE says how", and the
// row cut the error to 60 bytes, before the how. Named nodes get their error
// whole under the table; one that fits in the row is not said twice.
func TestNamedNodesShowTheirWholeError(t *testing.T) {
	long := "the node holds keyring epoch 7, older than the oldest the mesh keeps (epoch 11: the last 64, 32 rotations), and refused the chain it was sent; enrol it again: meshctl revoke web-4, then on the machine stop meshhost"
	var b strings.Builder
	printNamedErrors(&b, []api.NodeView{
		{ID: "web-4", LastError: &api.StatusError{Code: "keyring_gone", Message: long}},
		{ID: "web-5", LastError: &api.StatusError{Code: "apply_failed", Message: "short"}},
		{ID: "web-6"},
	})
	out := b.String()
	if !strings.Contains(out, "web-4: last error v0 keyring_gone: "+long) {
		t.Errorf("the long error is not shown whole:\n%s", out)
	}
	if strings.Contains(out, "web-5") || strings.Contains(out, "web-6") {
		t.Errorf("an error that fits its row, or none, is shown again:\n%s", out)
	}
}

// TestNamedNodesWholeErrorIsCleaned: a node's message is a host's text; printed
// whole it is cleaned as the row's is (api.CleanText): an escape sequence, a
// carriage return writing over the line and a line break reach the terminal as
// Go escapes or a space, never as themselves.
func TestNamedNodesWholeErrorIsCleaned(t *testing.T) {
	hostile := strings.Repeat("x", 70) + "\x1b]0;owned\a\x1b[2J\rfake line\nsecond\u202e"
	var b strings.Builder
	printNamedErrors(&b, []api.NodeView{{ID: "web-7", LastError: &api.StatusError{Code: "apply_failed", Message: hostile}}})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\a\r\u202e") || strings.Count(out, "\n") != 2 {
		t.Errorf("the whole error reaches the terminal raw: %q", out)
	}
	if !strings.Contains(out, `\x1b]0;owned\a\x1b[2J fake line second\u202e`) {
		t.Errorf("the whole error is not shown cleaned: %q", out)
	}
}
