package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestOlderControlPlaneRefusesDryRun: a control plane from before DeclareRequest
// had DryRun decodes the request into the type as it was then, strictly. It must
// refuse a dry run rather than ignore the member and declare for real.
func TestOlderControlPlaneRefusesDryRun(t *testing.T) {
	type olderDeclareRequest struct {
		Nodes  []string          `json:"nodes,omitempty"`
		Role   string            `json:"role,omitempty"`
		Labels map[string]string `json:"labels,omitempty"`
		All    bool              `json:"all,omitempty"`
		Body   json.RawMessage   `json:"body"`
	}
	data, err := EncodeAdminRequest(OpDeclare, DeclareRequest{All: true, Body: json.RawMessage(`{"files":[]}`), DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var older olderDeclareRequest
	err = DecodeAdminRequest(OpDeclare, data, &older)
	if !errors.Is(err, ErrAdminRequest) || !strings.Contains(err.Error(), `"dry_run"`) {
		t.Fatalf("an older control plane decoded a dry run as %+v, %v; want it refused naming dry_run", older, err)
	}
	// Today's control plane reads it.
	var req DeclareRequest
	if err := DecodeAdminRequest(OpDeclare, data, &req); err != nil || !req.DryRun {
		t.Fatalf("decoded %+v, %v; want a dry run", req, err)
	}
}
