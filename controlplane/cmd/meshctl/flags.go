package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
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

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("label %q is not key=value", v)
	}
	l[k] = val
	return nil
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
