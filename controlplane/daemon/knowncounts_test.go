package daemon

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"mesh/broker"
	"mesh/controlplane/authn"
)

// gathered is a scrape of d's registry: each series by its family and its labels
// (name=value, sorted, comma-separated).
func gathered(t *testing.T, d *Daemon) map[string]map[string]float64 {
	t.Helper()
	fams, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, f := range fams {
		series := map[string]float64{}
		for _, m := range f.GetMetric() {
			series[labelsOf(m)] = valueOf(m)
		}
		out[f.GetName()] = series
	}
	return out
}

func labelsOf(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(ls)
	return strings.Join(ls, ",")
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// TestCountersExportedFromTheStart: a control node just opened exports, at 0, every
// series of the counters of rare events that the code fixes (a spent token, a key the
// mesh does not know, a message over its budget, a violation of a host's grant, an
// admission, a login not bound to its session), so that an alert on increase() hears
// the first one after a restart; and every reason is a code, never a sentence.
func TestCountersExportedFromTheStart(t *testing.T) {
	d := fleet(t, 0)
	got := gathered(t, d)
	want := map[string][]string{}
	for _, k := range knownDrops() {
		want["mesh_control_messages_dropped_total"] = append(want["mesh_control_messages_dropped_total"], fmt.Sprintf("reason=%s,subject=%s", k.Reason, k.Subject))
	}
	for _, k := range knownRefusals() {
		want["mesh_control_requests_refused_total"] = append(want["mesh_control_requests_refused_total"], fmt.Sprintf("reason=%s,subject=%s", k.Reason, k.Subject))
	}
	for _, r := range knownKicks() {
		want["mesh_control_budget_disconnects_total"] = append(want["mesh_control_budget_disconnects_total"], "reason="+string(r))
	}
	for _, r := range append(authn.Refusals(), broker.Refusals()...) {
		want["mesh_broker_connections_refused_total"] = append(want["mesh_broker_connections_refused_total"], "reason="+r.Code)
	}
	// The two a refusal without a code is counted under (a walkthrough).
	want["mesh_broker_connections_refused_total"] = append(want["mesh_broker_connections_refused_total"], "reason="+broker.CodeRefused, "reason="+broker.CodeNotRefusal)
	for _, v := range broker.Violations() {
		want["mesh_broker_client_violations_total"] = append(want["mesh_broker_client_violations_total"], fmt.Sprintf("account=%s,kind=%s", v.Account, v.What))
	}
	want["mesh_control_enrolments_total"] = []string{"kind=host", "kind=control"}
	want["mesh_broker_unbound_logins_total"] = []string{"client=node", "client=operator", "client=enrolling"}
	for fam, series := range want {
		for _, s := range series {
			if v, ok := got[fam][s]; !ok || v != 0 {
				t.Errorf("%s{%s} = %v (exported: %v) on a node just opened, want 0", fam, s, v, ok)
			}
		}
	}
	code := regexp.MustCompile(`^[a-z_]+$`)
	for _, fam := range []string{"mesh_control_messages_dropped_total", "mesh_control_requests_refused_total",
		"mesh_control_budget_disconnects_total", "mesh_broker_connections_refused_total"} {
		for s := range got[fam] {
			for _, l := range strings.Split(s, ",") {
				if v, ok := strings.CutPrefix(l, "reason="); ok && !code.MatchString(v) {
					t.Errorf("%s{%s}: the reason is not a code", fam, s)
				}
			}
		}
	}
}

// TestKnownCountsListEveryCallSite: every (subject, reason) the package's code drops
// or refuses a message under, and every reason it closes a connection for, is in the
// lists the metrics export at 0 from the start, so a new call site cannot add a
// series that first appears at 1. Read from the source: the calls to the guard's
// drop, refuse and kicked, and to the helpers that drop for fixed reasons
// (admitNodeMessage, dropReply) and close connections for a given one. A refusal
// whose reason is a code worked out at run time (an enrolment's, an operator's) is
// not read here: enrolRefusals lists the enrolment's.
func TestKnownCountsListEveryCallSite(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := reasonConstants(pkgs["daemon"])
	drops, refusals, kicks := map[DropKey]bool{}, map[DropKey]bool{}, map[Reason]bool{}
	for _, k := range knownDrops() {
		drops[k] = true
	}
	for _, k := range knownRefusals() {
		refusals[k] = true
	}
	for _, r := range knownKicks() {
		kicks[r] = true
	}
	calls := 0
	for _, f := range pkgs["daemon"].Files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			kinds := localStrings(fn)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				at := fset.Position(call.Pos())
				subject := func(i int) (string, bool) { return stringArg(call, i, kinds) }
				reason := func(i int) (Reason, bool) { return reasonArg(call, i, reasons) }
				check := func(known map[DropKey]bool, what string, s string, rs ...Reason) {
					for _, r := range rs {
						calls++
						if !known[DropKey{Subject: s, Reason: r}] {
							t.Errorf("%s: %s subject=%s reason=%s is not listed in knowncounts.go", at, what, s, r)
						}
					}
				}
				switch sel.Sel.Name {
				case "drop", "refuse":
					s, okS := subject(0)
					r, okR := reason(1)
					if !okR {
						return true
					}
					if !okS {
						// The helpers' own drops, for their callers' subjects:
						// what the lists take them to drop for.
						helper := map[string][]Reason{"admitNodeMessage": admitReasons(), "dropReply": replyReasons()}[fn.Name.Name]
						if helper != nil && sel.Sel.Name == "drop" && !slices.Contains(helper, r) {
							t.Errorf("%s: %s drops for %s, which knowncounts.go does not list for it", at, fn.Name.Name, r)
						}
						return true
					}
					if sel.Sel.Name == "drop" {
						check(drops, "a drop", s, r)
					} else {
						check(refusals, "a refusal", s, r)
					}
				case "admitNodeMessage":
					if s, ok := subject(0); ok {
						check(drops, "a drop", s, admitReasons()...)
					}
				case "dropReply":
					if s, ok := subject(0); ok {
						check(drops, "a drop", s, replyReasons()...)
					}
				case "kicked", "disconnectNode", "disconnectKey", "kickAll":
					i := 0
					if sel.Sel.Name != "kicked" {
						i = 1
					}
					if r, ok := reason(i); ok {
						calls++
						if !kicks[r] {
							t.Errorf("%s: a disconnection for %s is not listed in knowncounts.go", at, r)
						}
					}
				}
				return true
			})
		}
	}
	if calls < 30 {
		t.Fatalf("read %d calls that count; the package has more: the reading is broken", calls)
	}
}

// reasonConstants maps the package's Reason constants by name to their values.
func reasonConstants(pkg *ast.Package) map[string]Reason {
	out := map[string]Reason{}
	for _, f := range pkg.Files {
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) && strings.HasPrefix(name.Name, "Reason") {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
							v, _ := strconv.Unquote(lit.Value)
							out[name.Name] = Reason(v)
						}
					}
				}
			}
		}
	}
	return out
}

// localStrings are fn's string constants (const kind = "revoked_sync").
func localStrings(fn *ast.FuncDecl) map[string]string {
	out := map[string]string{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if g, ok := n.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						out[name.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
		return true
	})
	return out
}

// stringArg is call's argument i when it is a string literal or a local constant.
func stringArg(call *ast.CallExpr, i int, consts map[string]string) (string, bool) {
	if i >= len(call.Args) {
		return "", false
	}
	switch a := call.Args[i].(type) {
	case *ast.BasicLit:
		if a.Kind == token.STRING {
			s, err := strconv.Unquote(a.Value)
			return s, err == nil
		}
	case *ast.Ident:
		s, ok := consts[a.Name]
		return s, ok
	}
	return "", false
}

// reasonArg is call's argument i when it names a Reason constant.
func reasonArg(call *ast.CallExpr, i int, reasons map[string]Reason) (Reason, bool) {
	if i >= len(call.Args) {
		return "", false
	}
	id, ok := call.Args[i].(*ast.Ident)
	if !ok {
		return "", false
	}
	r, ok := reasons[id.Name]
	return r, ok
}
