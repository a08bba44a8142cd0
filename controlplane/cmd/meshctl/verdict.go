package main

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"mesh/controlplane/api"
)

// The verdict of `status` and `declare --wait` is one line on stderr saying which
// nodes have not converged, and why. Naming every node, a fleet's failure made it
// megabytes long (5,000 hosts whose hook fails: 1.3 MB from status, 3 MB from
// declare --wait), which journald splits past 48 KiB and nobody reads. Grouped by
// cause, with a count and the first few nodes of each, it stays a few KiB and
// says in one look which hook fails where; --json lists every node.

const (
	// maxShownPerCause is how many nodes the verdict names for each cause.
	maxShownPerCause = 5
	// maxVerdictLen bounds the verdict's line; the causes that do not fit are
	// counted.
	maxVerdictLen = 4 << 10
	// maxHookNameShown bounds a hook's name in a cause: the host's hooks file
	// names them, and a failure's message is free text.
	maxHookNameShown = 64
)

// causes groups nodes by why they have not converged.
type causes struct {
	list  []*cause // in the order first met
	byKey map[[2]string]*cause
	nodes int
}

// cause is one reason nodes have not converged, and the nodes it holds.
type cause struct {
	what  string   // "failing hook_failed in hook restart-app"
	hint  string   // what to do about it, said once
	count int      // nodes
	shown []string // the first maxShownPerCause, each as example made it
}

// add counts a node under what (and hint), shown as example if among the first.
func (c *causes) add(what, hint, example string) {
	c.nodes++
	key := [2]string{what, hint}
	g, ok := c.byKey[key]
	if !ok {
		if c.byKey == nil {
			c.byKey = map[[2]string]*cause{}
		}
		g = &cause{what: what, hint: hint}
		c.byKey[key] = g
		c.list = append(c.list, g)
	}
	g.count++
	if len(g.shown) < maxShownPerCause {
		g.shown = append(g.shown, example)
	}
}

// text is the cause as the verdict shows it: "12 failing apply_failed: web-2 (…),
// … and 7 more".
func (g *cause) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", g.count, g.what)
	if g.hint != "" {
		fmt.Fprintf(&b, " (%s)", g.hint)
	}
	b.WriteString(": " + strings.Join(g.shown, ", "))
	if more := g.count - len(g.shown); more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	return b.String()
}

// line is the verdict after head ("3 live node(s)"): the causes, those of the
// most nodes first, in at most about maxVerdictLen bytes. The first cause is
// always shown (each is at most maxShownPerCause bounded examples); those past the
// bound are counted.
func (c *causes) line(head string) string {
	groups := slices.Clone(c.list)
	slices.SortStableFunc(groups, func(a, b *cause) int { return cmp.Compare(b.count, a.count) })
	// Room kept for the count of the causes left out and the pointer to --json.
	const tail = 128
	var b strings.Builder
	b.WriteString(head + ": ")
	cut := false
	for i, g := range groups {
		text := g.text()
		if i > 0 && b.Len()+2+len(text)+tail > maxVerdictLen {
			nodes := 0
			for _, rest := range groups[i:] {
				nodes += rest.count
			}
			fmt.Fprintf(&b, "; and %d more cause(s), of %d node(s)", len(groups)-i, nodes)
			cut = true
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(text)
		cut = cut || g.count > len(g.shown)
	}
	if cut {
		b.WriteString("; --json lists every node")
	}
	return b.String()
}

// failure is the cause a node's error puts it under (verb: "failing", "failed"),
// what to do about it, and the node shown with the end of its message, where a
// failing command says why. A hook's failure ("hook NAME: why", as the host
// reports it) is grouped by the hook's name.
func failure(verb, id, code, msg string) (what, hint, example string) {
	what = verb
	if code != "" {
		what += " " + oneLine(code, api.MaxStatusCodeLen)
	}
	if code == api.KeyShared {
		// The control plane's word, not a host's: one node, two machines.
		hint = "two machines hold one node's key: revoke the node, then enrol each machine again with a token of its own"
	}
	if code == api.KeyringGone {
		// The control plane's word too: the node cannot follow the signing keys.
		hint = "the nodes hold a keyring older than the 64 the mesh keeps and cannot follow the signing keys: revoke each, then enrol the machine again with a new token (meshctl nodes NODE says how)"
	}
	if code == api.StatusHookFailed {
		// Its files are applied; a command of the host's hooks file failed.
		hint = "fix the host, then `meshhost hooks retry` there"
		if names, why, ok := hooksOf(msg); ok {
			what += " in hook " + strings.Join(names, ", ")
			if len(names) > 1 {
				what = strings.Replace(what, " in hook ", " in hooks ", 1)
			}
			msg = why
		}
	}
	if msg == "" {
		return what, hint, id
	}
	if code == api.KeyShared {
		// Its message says how many, how long and from where first, and what to
		// do last, which the hint says: the head is kept, the addresses in it
		// (the cut kept the advice and lost them: a walkthrough).
		return what, hint, fmt.Sprintf("%s (%s)", id, headAndTail(msg, 160, 0))
	}
	// Long quoted text (a path, a command) shortened first, then the middle cut:
	// a host's "refusing "PATH": reason; advice" lost its reason to the cut, and
	// with a long path kept nothing but the path (a walkthrough).
	msg = shortenQuoted(msg, maxQuotedShown)
	return what, hint, fmt.Sprintf("%s (%s)", id, headAndTail(msg, firstClause(msg, 100, 180), 100))
}

// firstClause is how much of msg an example keeps at its head: through its first
// clause (to the first "; ") when that ends between min and max bytes in, else min.
func firstClause(msg string, min, max int) int {
	if i := strings.Index(msg, "; "); i >= min && i <= max {
		return i
	}
	return min
}

// maxQuotedShown bounds a quoted string within a node's error as an example shows
// it: its head and tail are kept, the middle marked.
const maxQuotedShown = 48

// shortenQuoted shortens each double-quoted string of s (as Go's %q writes one)
// longer than max bytes to its head and tail around "…".
func shortenQuoted(s string, max int) string {
	return quoted.ReplaceAllStringFunc(s, func(q string) string {
		// A reason within is no %q'd path: two quotes of a hook's output paired
		// across one (a review).
		if len(q) <= max || strings.Contains(q, ": ") || strings.Contains(q, "; ") {
			return q
		}
		inner := q[1 : len(q)-1]
		keep := (max - 5) / 2
		h, t := keep, len(inner)-keep
		for h > 0 && !utf8.RuneStart(inner[h]) {
			h--
		}
		for t < len(inner) && !utf8.RuneStart(inner[t]) {
			t++
		}
		return `"` + inner[:h] + "…" + inner[t:] + `"`
	})
}

// quoted is a double-quoted string as Go's %q writes one.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// hooksOf splits a hook's failure, "hook NAME: why", into the hook's name, shown
// as one short line, and why. Hooks that failed in one run are named first, quoted
// (`hooks "a", "b" failed: hook a: why; hook b: why`, host/agent's hookFailures),
// so that the names survive the cut of a long report and no hook's output is read
// as another hook: each is named, and why is the rest.
func hooksOf(msg string) (names []string, why string, ok bool) {
	if rest, found := strings.CutPrefix(msg, "hooks "); found {
		for {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, "", false
			}
			name, _ := strconv.Unquote(q)
			if name == "" {
				return nil, "", false
			}
			names = append(names, oneLine(name, maxHookNameShown))
			rest = rest[len(q):]
			if after, more := strings.CutPrefix(rest, ", "); more {
				rest = after
				continue
			}
			// " (and 3 more)": the names past what the head holds.
			if strings.HasPrefix(rest, " (and ") {
				if end := strings.Index(rest, " more)"); end > 0 {
					if n, err := strconv.Atoi(rest[len(" (and "):end]); err == nil && n > 0 {
						names = append(names, fmt.Sprintf("%d more", n))
						rest = rest[end+len(" more)"):]
					}
				}
			}
			why, ok = strings.CutPrefix(rest, " failed: ")
			return names, why, ok && len(names) > 1
		}
	}
	rest, found := strings.CutPrefix(msg, "hook ")
	if !found {
		return nil, "", false
	}
	name, why, ok := strings.Cut(rest, ": ")
	if !ok || name == "" || len(name) > maxHookNameShown {
		return nil, "", false
	}
	return []string{oneLine(name, maxHookNameShown)}, why, true
}
