package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
)

// planNodesShown is how many nodes of a group the text plan names; --json has them
// all (up to the answer's cap).
const planNodesShown = 10

// writePlan prints a dry run's plan: each group of nodes with its change, then a
// summary line. Content is never printed, nor is it in the plan: declarations may
// hold secrets.
func writePlan(w io.Writer, p *api.DeclarePlan) {
	for _, g := range p.Groups {
		fmt.Fprintf(w, "%s: %s\n", planNodes(g), planVerdict(g))
		for _, f := range g.Added {
			fmt.Fprintf(w, "  + %s  (%s)\n", f.Path, planFileText(f))
		}
		for _, c := range g.Changed {
			fmt.Fprintf(w, "  ~ %s  (%s)\n", c.Path, planChangeText(c))
		}
		for _, f := range g.Removed {
			fmt.Fprintf(w, "  - %s  (%s)\n", f.Path, planFileText(f))
		}
		for _, p := range fileOverDirectory(g) {
			fmt.Fprintf(w, "  ! %s: the host holds a directory there (the files removed above were in it), and the applier never replaces a directory by a file: "+
				"the host applies none of the declaration (apply_failed) until the directory is removed there\n", p)
		}
		if g.Truncated {
			fmt.Fprintf(w, "  (cut to fit the answer: %d added, %d changed, %d removed in all; --json lists what fitted)\n",
				g.AddedCount, g.ChangedCount, g.RemovedCount)
		}
	}
	if p.OtherGroups > 0 {
		fmt.Fprintf(w, "%d more group(s) of %d node(s) with other changes, left out to fit the answer; declare to fewer nodes to see them\n",
			p.OtherGroups, p.OtherNodes)
	}
	for _, s := range p.Skipped {
		fmt.Fprintf(w, "skipped  %s (revoked or not a worker)\n", s)
	}
	fmt.Fprintf(w, "dry run: %d node(s) selected, %d would change, %d unchanged", p.Nodes, p.Changing, p.Unchanged)
	if len(p.Skipped) > 0 {
		fmt.Fprintf(w, ", %d skipped", len(p.Skipped))
	}
	fmt.Fprintln(w, "; nothing was declared")
}

// fileOverDirectory is the paths g adds as files where a file it removes lay in a
// directory of that name: the dry run showed "+ etc/app" and "- etc/app/a.conf",
// and the declaration then failed on every host (a docs walkthrough).
func fileOverDirectory(g api.PlanGroup) []string {
	var out []string
	for _, a := range g.Added {
		for _, r := range g.Removed {
			if strings.HasPrefix(r.Path, a.Path+"/") {
				out = append(out, a.Path)
				break
			}
		}
	}
	return out
}

// planNodes names a group's nodes, with the version each would get.
func planNodes(g api.PlanGroup) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d node(s) (", g.Count)
	for i, a := range g.Nodes {
		if i == planNodesShown {
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s v%d", a.Node, a.Version)
	}
	if more := g.Count - min(len(g.Nodes), planNodesShown); more > 0 {
		fmt.Fprintf(&b, " and %d more", more)
	}
	b.WriteString(")")
	return b.String()
}

// planVerdict sums a group's change up.
func planVerdict(g api.PlanGroup) string {
	if g.AddedCount+g.ChangedCount+g.RemovedCount == 0 {
		// The version is new all the same (a declaration is signed and sent
		// whatever it changes): said, as the new version beside each node was
		// read as a change (a newcomer's walkthrough).
		return fmt.Sprintf("no change (%d file(s) as they are; the new version is sent all the same)", g.Unchanged)
	}
	return fmt.Sprintf("%d to add, %d to change, %d to remove, %d unchanged", g.AddedCount, g.ChangedCount, g.RemovedCount, g.Unchanged)
}

func planFileText(f api.PlanFile) string {
	s := fmt.Sprintf("%s, %d bytes", f.Mode, f.Size)
	if f.Owner != "" || f.Group != "" {
		s += ", " + f.Owner + ":" + f.Group
	}
	return s
}

// planChangeText says what changes in a file: each of content, mode, owner and group
// that does, from what to what (content by its size only).
func planChangeText(c api.PlanChange) string {
	parts := make([]string, 0, len(c.What))
	for _, w := range c.What {
		switch w {
		case api.PlanContent:
			parts = append(parts, fmt.Sprintf("content, %d -> %d bytes", c.From.Size, c.To.Size))
		case api.PlanMode:
			parts = append(parts, fmt.Sprintf("mode %s -> %s", c.From.Mode, c.To.Mode))
		case api.PlanOwner:
			parts = append(parts, fmt.Sprintf("owner %q -> %q", c.From.Owner, c.To.Owner))
		case api.PlanGroupOf:
			parts = append(parts, fmt.Sprintf("group %q -> %q", c.From.Group, c.To.Group))
		default:
			parts = append(parts, w)
		}
	}
	return strings.Join(parts, "; ")
}

// olderDryRun explains the refusal of a control plane older than dry runs: it reads
// requests strictly, so it refuses the dry_run member (and declares nothing) rather
// than ignore it. The refusal carries no code of its own, only the decoder's text.
//
// A dry run not answered in time changed nothing either, whatever the client says
// of a change that timed out: it can be run again.
func olderDryRun(err error) error {
	if errors.Is(err, operator.ErrNoAnswer) {
		return fmt.Errorf("%w to the dry run within --timeout; a dry run changes nothing, so run it again", operator.ErrNoAnswer)
	}
	if api.RefusedMember(err, "dry_run") {
		return fmt.Errorf("%w\nthe control plane is older than this meshctl and cannot do a dry run; it declared nothing: upgrade the control plane to use --dry-run", err)
	}
	return err
}
