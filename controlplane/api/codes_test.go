package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestCodesAgreeWithTheHost: the host declares the codes it reads and reports on its
// own side (host/wire imports nothing of the control plane), so this reads both
// declarations from their source. Every refusal code the host knows must mean the
// same here, and both sides must know the same status codes: the control plane acts
// on them (reconcile leaves a node alone that failed to apply and retries by itself).
func TestCodesAgreeWithTheHost(t *testing.T) {
	ours := constants(t, "protocol.go")
	host := constants(t, "../../host/wire/wire.go")
	// A code is lower-case words joined by underscores, which also leaves out
	// StatusSuffix and its like.
	code := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	pick := func(m map[string]string, prefix string) map[string]string {
		out := map[string]string{}
		for name, v := range m {
			if strings.HasPrefix(name, prefix) && code.MatchString(v) {
				out[name] = v
			}
		}
		return out
	}
	ourCodes, hostCodes := pick(ours, "Code"), pick(host, "Code")
	if len(ourCodes) < 10 || len(hostCodes) < 10 {
		t.Fatalf("found %d codes here and %d on the host: the source scan is broken", len(ourCodes), len(hostCodes))
	}
	for name, v := range hostCodes {
		if ourCodes[name] != v {
			t.Errorf("the host's %s is %q, the control plane's %q", name, v, ourCodes[name])
		}
	}
	// The sync's tag travels in a header both sides name.
	if ours["SyncHeader"] == "" || ours["SyncHeader"] != host["SyncHeader"] {
		t.Errorf("the sync tag's header is %q here and %q on the host", ours["SyncHeader"], host["SyncHeader"])
	}
	ourStatus, hostStatus := pick(ours, "Status"), pick(host, "Status")
	if len(ourStatus) == 0 || !maps.Equal(ourStatus, hostStatus) {
		t.Errorf("status codes differ:\n here %v\n host %v", sorted(ourStatus), sorted(hostStatus))
	}
}

// constants returns the string constants a Go source file declares, by name.
func constants(t *testing.T, path string) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, decl := range file.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if i >= len(vs.Values) {
					continue
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[id.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

func sorted(m map[string]string) []string {
	var out []string
	for name, v := range m {
		out = append(out, name+"="+v)
	}
	slices.Sort(out)
	return out
}
