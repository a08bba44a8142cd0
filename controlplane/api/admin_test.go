package api

import (
	"errors"
	"fmt"
	"testing"
)

// TestRefusedMember: an older control plane's refusal of a member it does not know
// is told by encoding/json's words whole, wrapped or not; a refusal that quotes a
// value spelled like the member (`key "key"`), or another code, is not it (a
// review: each caller read the member's name in quotes alone).
func TestRefusedMember(t *testing.T) {
	older := &Error{Code: CodeBadRequest, Message: `admin request malformed: args: json: unknown field "key" (send {"v":2,...})`}
	if !RefusedMember(older, "key") || !RefusedMember(fmt.Errorf("revoke: %w", older), "key") {
		t.Errorf("an older control plane's refusal of key not told: %v", older)
	}
	for name, err := range map[string]error{
		"another member":           older,
		"a value quoted":           &Error{Code: CodeBadRequest, Message: `key "key" is not a node's public key`},
		"another code":             &Error{Code: CodeNotFound, Message: `json: unknown field "key"`},
		"no refusal of the mesh's": errors.New(`json: unknown field "key"`),
	} {
		member := "key"
		if name == "another member" {
			member = "replace"
		}
		if RefusedMember(err, member) {
			t.Errorf("%s: %v taken for a refusal of %q", name, err, member)
		}
	}
}
