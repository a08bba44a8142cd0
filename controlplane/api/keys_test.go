package api

import (
	"errors"
	"strings"
	"testing"
)

// TestAdminRequestReadOneWayOnly: encoding/json alone reads an operator request
// with a member twice (the last one winning: {"node":"web-1","node":"db-1"}
// revokes db-1, while a log or a proxy that reads the first sees web-1) or with a
// name in another case ("Node"). Both are refused with ErrAdminRequest, in the
// envelope and in the arguments; label keys that differ in case are distinct
// labels and stay accepted.
func TestAdminRequestReadOneWayOnly(t *testing.T) {
	for _, tc := range []struct {
		name, req, says string
	}{
		{"node twice", `{"v":2,"op":"revoke","args":{"node":"web-1","node":"db-1"}}`, `member "node" appears twice`},
		{"node in another case", `{"v":2,"op":"revoke","args":{"Node":"db-1"}}`, `member "Node" is field "node"`},
		{"op twice", `{"v":2,"op":"ping","op":"revoke","args":{"node":"web-1"}}`, `member "op" appears twice`},
		{"args in another case", `{"v":2,"op":"revoke","ARGS":{"node":"web-1"}}`, `member "ARGS" is field "args"`},
		{"v twice", `{"v":1,"v":2,"op":"revoke","args":{"node":"web-1"}}`, `member "v" appears twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r RevokeRequest
			err := DecodeAdminRequest(OpRevoke, []byte(tc.req), &r)
			if !errors.Is(err, ErrAdminRequest) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("%v, want ErrAdminRequest saying %q", err, tc.says)
			}
		})
	}
	var l LabelRequest
	if err := DecodeAdminRequest(OpLabel, []byte(`{"v":2,"op":"label","args":{"node":"web-1","labels":{"Env":"a","env":"b"}}}`), &l); err != nil {
		t.Fatalf("labels differing in case: %v", err)
	}
}
