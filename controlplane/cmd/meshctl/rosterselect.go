package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"mesh/controlplane/api"
)

// rosterSelection narrows what `nodes` and `status` show to the nodes of a role,
// carrying labels, in states: a fleet of thousands lists thousands of lines, and an
// operator asks about a rack, a tier or the nodes offline. Every given criterion must
// match; --role and --label match as declare's do, so that `nodes --label k=v` lists
// the nodes `declare --label k=v` reaches (revoked ones aside). The roster is read whole and
// narrowed here: a control plane of any version answers, and 10,000 nodes read in a
// quarter of a second (docs/benchmarks.md).
type rosterSelection struct {
	role   string
	labels labelFlag
	states stateFlag
	// body is a prefix of the digest of the body declared (--body): the nodes a
	// declaration reached, as `declare` named its body.
	body string
}

// minBodyPrefix is the shortest prefix of a body's digest --body takes: shorter
// ones match bodies by chance.
const minBodyPrefix = 8

// rosterStates are the states --state takes: a node's STATE column.
var rosterStates = []string{api.StateAlive, api.StateOffline, api.StateRevoked}

// stateFlag is a repeatable --state, each value one state or several separated by
// commas.
type stateFlag []string

func (s *stateFlag) String() string { return strings.Join(*s, ",") }
func (s *stateFlag) Type() string   { return "state" }

func (s *stateFlag) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if !slices.Contains(rosterStates, part) {
			return fmt.Errorf("%q is not a node state: give %s", part, strings.Join(rosterStates, ", "))
		}
		if !slices.Contains(*s, part) {
			*s = append(*s, part)
		}
	}
	return nil
}

func (sel *rosterSelection) register(c *cobra.Command) {
	sel.labels = labelFlag{}
	fs := c.Flags()
	fs.StringVar(&sel.role, "role", "", "show only the nodes of this role")
	fs.Var(valuedLabels{labelFlag: sel.labels}, "label", "show only the nodes carrying this label k=v (repeatable: all must match; v may not be empty)")
	fs.Var(&sel.states, "state", "show only the nodes in this state: "+strings.Join(rosterStates, ", ")+" (repeatable, or comma-separated: any may match)")
	fs.Var((*bodyFlag)(&sel.body), "body", "show only the nodes declared this body: its digest, as declare says it, or its first 8 or more hex digits")
	_ = c.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]cobra.Completion{"worker"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(rosterStates, cobra.ShellCompDirectiveNoFileComp))
}

// active says whether any criterion was given.
func (sel *rosterSelection) active() bool {
	return sel.role != "" || len(sel.labels) > 0 || len(sel.states) > 0 || sel.body != ""
}

// bodyFlag is --body: a body's digest, or a prefix of it, lowercase hex.
type bodyFlag string

func (b *bodyFlag) String() string { return string(*b) }
func (b *bodyFlag) Type() string   { return "digest" }

func (b *bodyFlag) Set(v string) error {
	if len(v) < minBodyPrefix || len(v) > 64 || strings.Trim(v, "0123456789abcdef") != "" {
		return fmt.Errorf("%q is not a body's digest: give the digest declare said, or its first %d or more lowercase hex digits", v, minBodyPrefix)
	}
	*b = bodyFlag(v)
	return nil
}

// keep says whether n matches every criterion given.
func (sel *rosterSelection) keep(n api.NodeView) bool {
	if sel.role != "" && n.Role != sel.role {
		return false
	}
	for k, v := range sel.labels {
		// As the control plane matches declare's --label; an empty value, which
		// the flag refuses, matches nothing.
		if v == "" || n.Labels[k] != v {
			return false
		}
	}
	if sel.body != "" && !strings.HasPrefix(n.DeclaredBody, sel.body) {
		return false
	}
	return len(sel.states) == 0 || slices.Contains(sel.states, n.State)
}

// apply narrows res's nodes to the selection, in place.
func (sel *rosterSelection) apply(res *api.NodesResult) {
	if sel.active() {
		res.Nodes = slices.DeleteFunc(res.Nodes, func(n api.NodeView) bool { return !sel.keep(n) })
	}
}

// String is the selection as its flags, for messages: "--role worker --label rack=a".
func (sel *rosterSelection) String() string {
	var parts []string
	if sel.role != "" {
		parts = append(parts, "--role "+sel.role)
	}
	for _, kv := range labelPairs(sel.labels) {
		parts = append(parts, "--label "+kv)
	}
	if len(sel.states) > 0 {
		parts = append(parts, "--state "+sel.states.String())
	}
	if sel.body != "" {
		parts = append(parts, "--body "+sel.body)
	}
	return strings.Join(parts, " ")
}
