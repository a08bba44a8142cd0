package daemon

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestEveryStateRefusalHasItsCode checks that each error the state machine refuses a
// command with reaches the caller with the code that names it, wrapped or not, and
// that the table below lists every such error the state package declares: a new one
// must be given its code, or operators would be told "internal".
func TestEveryStateRefusalHasItsCode(t *testing.T) {
	want := map[string]struct {
		err  error
		code string
	}{
		"ErrNotInitialised": {state.ErrNotInitialised, api.CodeUnavailable},
		"ErrTokenUnknown":   {state.ErrTokenUnknown, api.CodeTokenUnknown},
		"ErrTokenUsed":      {state.ErrTokenUsed, api.CodeTokenUsed},
		"ErrTokenExpired":   {state.ErrTokenExpired, api.CodeTokenExpired},
		// A control token's own machine, resuming its join too late.
		"ErrTokenExpiredAdmitted": {state.ErrTokenExpiredAdmitted, api.CodeTokenExpired},
		"ErrTokenOtherNode":       {state.ErrTokenOtherNode, api.CodeTokenOtherNode},
		"ErrTokenWrongRole":       {state.ErrTokenWrongRole, api.CodeTokenWrongRole},
		"ErrTokenCancelled":       {state.ErrTokenCancelled, api.CodeTokenCancelled},
		"ErrNoToken":              {state.ErrNoToken, api.CodeNotFound},
		"ErrNoSuchToken":          {state.ErrNoSuchToken, api.CodeNotFound},
		"ErrNodeExists":           {state.ErrNodeExists, api.CodeNodeExists},
		"ErrKeyRevoked":           {state.ErrKeyRevoked, api.CodeKeyRevoked},
		"ErrKeyInUse":             {state.ErrKeyInUse, api.CodeKeyInUse},
		"ErrUnknownNode":          {state.ErrUnknownNode, api.CodeNotFound},
		"ErrBadCommand":           {state.ErrBadCommand, api.CodeBadRequest},
		"ErrNoTargets":            {state.ErrNoTargets, api.CodeNotFound},
		"ErrLastControlNode":      {state.ErrLastControlNode, api.CodeBadRequest},
		"ErrRotationPending":      {state.ErrRotationPending, api.CodeBadRequest},
		"ErrNothingToRetire":      {state.ErrNothingToRetire, api.CodeBadRequest},
		"ErrOutOfVersions":        {state.ErrOutOfVersions, api.CodeOutOfVersions},
		"ErrTokenPending":         {state.ErrTokenPending, api.CodeTokenPending},
		"ErrNodeRevoked":          {state.ErrNodeRevoked, api.CodeNodeRevoked},
		"ErrKeyMismatch":          {state.ErrKeyMismatch, api.CodeKeyMismatch},
		"ErrTooManyLabels":        {state.ErrTooManyLabels, api.CodeBadRequest},
		"ErrRotationMissesNode":   {state.ErrRotationMissesNode, api.CodeBadRequest},
		"ErrOperatorExists":       {state.ErrOperatorExists, api.CodeOperatorExists},
		"ErrUnknownOperator":      {state.ErrUnknownOperator, api.CodeNotFound},
		"ErrTooManyOperators":     {state.ErrTooManyOperators, api.CodeBadRequest},
		"ErrOperatorRenewals":     {state.ErrOperatorRenewals, api.CodeOperatorExists},
		"ErrOperatorKeyNotNamed":  {state.ErrOperatorKeyNotNamed, api.CodeNotFound},
		"ErrNothingToRenew":       {state.ErrNothingToRenew, api.CodeNotFound},
		// Not a refusal of a command: Raft's restore of a snapshot it cannot use.
		"ErrBadSnapshot": {state.ErrBadSnapshot, api.CodeInternal},
		// Not a refusal either: the state machine stopped at an entry of a newer
		// meshctl, which the node proposing it applies.
		"ErrNewerRules": {state.ErrNewerRules, api.CodeInternal},
	}
	for name, c := range want {
		if got := refusalCode(c.err); got != c.code {
			t.Errorf("%s: code %q, want %q", name, got, c.code)
		}
		wrapped := fmt.Errorf("node web-1: %w", c.err)
		if got := refusal(wrapped); got.Code != c.code || got.Message != wrapped.Error() {
			t.Errorf("%s wrapped: %+v, want code %q and the error's text", name, got, c.code)
		}
	}
	if got := refusalCode(fmt.Errorf("disk on fire")); got != api.CodeInternal {
		t.Errorf("an error of no state refusal: code %q, want %q", got, api.CodeInternal)
	}

	for _, name := range stateErrors(t) {
		if _, ok := want[name]; !ok {
			t.Errorf("state.%s has no code in this test: give it one in refusalCode and here", name)
		}
	}
}

// stateErrors lists the Err* variables the state package declares, from its source.
func stateErrors(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "state", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("state package source not found: %v", err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d state errors (%v): the source scan is broken", len(names), names)
	}
	return names
}
