package main

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"mesh/controlplane/api"
	"mesh/tokenfmt"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) Type() string       { return "string" }

// labelFlag is a repeatable k=v flag.
type labelFlag map[string]string

func (l labelFlag) String() string { return strings.Join(labelPairs(l), ",") }
func (l labelFlag) Type() string   { return "k=v" }

// removed returns the keys given as "k=", to remove, sorted.
func (l labelFlag) removed() []string {
	var keys []string
	for k, v := range l {
		if v == "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// Set takes one k=v. A key given twice with two values is refused, not the last
// kept: labels given together must all match (or all be set), and a node has one
// value for a key, so `--label tier=web --label tier=db` meant something else
// ("web or db"), and selected only the db nodes.
func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not key=value", v)
	}
	if err := api.CheckLabel(k, val); err != nil {
		return err
	}
	if was, twice := l[k]; twice {
		if was == val {
			return nil
		}
		return twiceLabelError{key: k, was: was, val: val}
	}
	if len(l) == api.MaxLabels {
		return fmt.Errorf("more than %d labels", api.MaxLabels)
	}
	l[k] = val
	return nil
}

// valuedLabels is --label where each label needs its value: a selector (declare,
// nodes, status) or a new node's labels (token). There, k= is refused as a usage
// error: an empty value selected every node without the key, so that
// `declare --label tier=$TIER` with TIER unset replaced the files of every node
// without a tier, and a token's tier= gave its node a label no command sets.
// Only `meshctl label NODE k=` takes it, to remove k.
type valuedLabels struct {
	labelFlag
	// mint says the labels are a token's, given to its node, not a selector.
	mint bool
}

func (l valuedLabels) Set(v string) error {
	if k, val, ok := strings.Cut(v, "="); ok && k != "" && val == "" {
		return emptyLabelError{key: k, mint: l.mint}
	}
	err := l.labelFlag.Set(v)
	var twice twiceLabelError
	if errors.As(err, &twice) && !l.mint {
		twice.selector = true
		return twice
	}
	return err
}

// twiceLabelError refuses a key given twice with two values: as labels to set
// (meshctl label, a token's), a node has one value for a key; as a selector, no
// node matches both.
type twiceLabelError struct {
	key, was, val string
	selector      bool
}

func (e twiceLabelError) Error() string {
	if e.selector {
		return fmt.Sprintf("label %s is given twice, =%s and =%s: a node has one value for a key, and every label given must hold; give the key once (run the command once per value to cover several)", e.key, e.was, e.val)
	}
	return fmt.Sprintf("label %s is given twice, =%s and =%s: a node has one value for a key; give the key once", e.key, e.was, e.val)
}

// emptyLabelError refuses --label k= where a label needs its value.
type emptyLabelError struct {
	key  string
	mint bool
}

func (e emptyLabelError) Error() string {
	what := "nodes are selected by a label's value (an empty one is not \"nodes without " + e.key + "\"); nothing was sent"
	if e.mint {
		what = "a token gives its node each label with its value; nothing was minted"
	}
	return fmt.Sprintf("--label %s= has an empty value: %s. Give the value (--label %s=VALUE). A shell variable left unset or empty gives this (--label %s=$VAR): set it, or write --label \"%s=${VAR:?}\" so that the shell refuses an unset one", e.key, what, e.key, e.key, e.key)
}

// labelPairs is labels as key=value, sorted by key.
func labelPairs(labels map[string]string) []string {
	out := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, k+"="+labels[k])
	}
	return out
}

// formatLabels is labels as a person reads them: key=value, space-separated, sorted.
func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "(none)"
	}
	return strings.Join(labelPairs(labels), " ")
}

// checkTargets refuses, before anything is sent, node ids that cannot be ids and a
// role no node has: the control plane answered both "matches no node" (exit 4), or
// worse, a malformed id as a malformed token field.
func checkTargets(nodes []string, role string) error {
	for _, n := range nodes {
		if err := tokenfmt.CheckNodeID(n); err != nil {
			if first, _, list := strings.Cut(n, ","); list && tokenfmt.CheckNodeID(first) == nil {
				// As --servers takes them: said what --node takes (a walkthrough).
				return usagef("node %q: %v; name several nodes with --node each (--node %s --node ...)", n, err, first)
			}
			return usagef("node %q: %v", n, err)
		}
	}
	if role != "" {
		if _, err := tokenfmt.ParseRole(role); err != nil {
			return usagef("--role %q: a node's role is worker or control", role)
		}
	}
	return nil
}

// repeatable marks a flag value that may be given more than once (each adds to it).
type repeatable interface{ repeatable() }

func (*stringList) repeatable() {}
func (labelFlag) repeatable()   {}
func (*stateFlag) repeatable()  {}

// givenTwiceError is a flag that takes one value given more than once: the last
// one used to win silently, so `declare --file a.json --file b.json` declared b
// alone (its files removed a's), and `--role control --role worker` selected the
// workers.
type givenTwiceError struct{ name, first, second string }

func (e givenTwiceError) Error() string {
	return fmt.Sprintf("--%s given twice (%q, then %q): it takes one value; give it once", e.name, e.first, e.second)
}

// onceValue refuses a second value for a flag that takes one.
type onceValue struct {
	pflag.Value
	name  string
	given bool
	first string
}

func (o *onceValue) Set(v string) error {
	// The same value again means the same (and shell completion parses a command
	// line twice).
	if o.given && v != o.first {
		return givenTwiceError{o.name, o.first, v}
	}
	o.given, o.first = true, v
	return o.Value.Set(v)
}

// onceOptional is onceValue for a flag whose value may be left out (--wait).
type onceOptional struct {
	*onceValue
	opt optionalValue
}

func (o onceOptional) accepts(arg string) bool { return o.opt.accepts(arg) }

// onceOnly makes every flag of fs that takes one value refuse a second one. Lists
// (repeatable, --servers) and switches (--json twice means the same) are left as
// they are.
func onceOnly(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Value.(repeatable); ok {
			return
		}
		if t := f.Value.Type(); t == "bool" || strings.HasSuffix(t, "Slice") || strings.HasSuffix(t, "Array") {
			return
		}
		o := &onceValue{Value: f.Value, name: f.Name}
		if opt, ok := f.Value.(optionalValue); ok {
			f.Value = onceOptional{o, opt}
			return
		}
		f.Value = o
	})
}
