package declarations

import (
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"slices"
	"strconv"
	"testing"
)

// TestCodesListsEveryCode: every code Code returns, as its source spells them, is in
// Codes, once; a code added to Code and not to Codes would be folded into "other" by
// the control plane's metrics.
func TestCodesListsEveryCode(t *testing.T) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var returned []string
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "Code" || fn.Recv != nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			if ret, ok := n.(*ast.ReturnStmt); ok && len(ret.Results) == 1 {
				if lit, ok := ret.Results[0].(*ast.BasicLit); ok && lit.Kind == gotoken.STRING {
					if s, _ := strconv.Unquote(lit.Value); s != "" {
						returned = append(returned, s)
					}
				}
			}
			return true
		})
	}
	codes := Codes()
	if len(returned) < 10 {
		t.Fatalf("read %d codes from Code's source; the reading is broken", len(returned))
	}
	for _, c := range returned {
		if !slices.Contains(codes, c) {
			t.Errorf("Code returns %q, which Codes does not list", c)
		}
	}
	for _, c := range codes {
		if !slices.Contains(returned, c) {
			t.Errorf("Codes lists %q, which Code never returns", c)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(codes)))) != len(codes) {
		t.Errorf("Codes lists a code twice: %v", codes)
	}
}
