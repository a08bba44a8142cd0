package daemon

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/declarations"
)

// A dry run of a declaration (`meshctl declare --dry-run`): what each selected node
// would be given, compared with what is declared for it now. It reads the state once,
// briefly, and compares outside the lock; it commits, signs and publishes nothing.

// planRoom is the least room a group needs to be listed at all: below it the
// remaining groups are only counted.
const planRoom = 1 << 10

// fileDiff is how the files of one body differ from another's. The host applies the
// new body whole: files added or changed are written, and files the old body
// declared and the new one does not are removed (host/apply).
type fileDiff struct {
	added     []api.PlanFile
	changed   []api.PlanChange
	removed   []api.PlanFile
	unchanged int
}

// diffBodies compares the files of the body declared now (old) with those of the
// new body, each list in path order.
func diffBodies(old, new declarations.Body) (fileDiff, error) {
	var d fileDiff
	before := make(map[string]declarations.File, len(old.Files))
	for _, f := range old.Files {
		before[f.Path] = f
	}
	seen := make(map[string]bool, len(new.Files))
	for _, f := range new.Files {
		seen[f.Path] = true
		to, toData, err := planFile(f)
		if err != nil {
			return d, err
		}
		o, ok := before[f.Path]
		if !ok {
			d.added = append(d.added, to)
			continue
		}
		from, fromData, err := planFile(o)
		if err != nil {
			return d, err
		}
		var what []string
		if !bytes.Equal(fromData, toData) {
			what = append(what, api.PlanContent)
		}
		if from.Mode != to.Mode {
			what = append(what, api.PlanMode)
		}
		// An owner (group) the new body leaves out is kept on the host, whatever
		// the file has (declarations.md): no change. The plan said `owner "1234"
		// -> ""`, which the host never does (a docs walkthrough).
		if to.Owner != "" && from.Owner != to.Owner {
			what = append(what, api.PlanOwner)
		}
		if to.Group != "" && from.Group != to.Group {
			what = append(what, api.PlanGroupOf)
		}
		if len(what) == 0 {
			d.unchanged++
			continue
		}
		from.Path, to.Path = "", ""
		d.changed = append(d.changed, api.PlanChange{Path: f.Path, What: what, From: from, To: to})
	}
	for _, f := range old.Files {
		if seen[f.Path] {
			continue
		}
		pf, _, err := planFile(f)
		if err != nil {
			return d, err
		}
		d.removed = append(d.removed, pf)
	}
	byPath := func(a, b api.PlanFile) int { return cmp.Compare(a.Path, b.Path) }
	slices.SortFunc(d.added, byPath)
	slices.SortFunc(d.removed, byPath)
	slices.SortFunc(d.changed, func(a, b api.PlanChange) int { return cmp.Compare(a.Path, b.Path) })
	return d, nil
}

// planFile describes f without its content, and returns the content to compare.
func planFile(f declarations.File) (api.PlanFile, []byte, error) {
	data, err := f.Data()
	if err != nil {
		return api.PlanFile{}, nil, err
	}
	mode, err := f.FileMode()
	if err != nil {
		return api.PlanFile{}, nil, err
	}
	return api.PlanFile{Path: f.Path, Mode: fmt.Sprintf("%04o", uint32(mode)), Size: len(data), Owner: f.Owner, Group: f.Group}, data, nil
}

// buildPlan groups the targets of a dry run by the change the new body makes to
// what each holds (bodies, by digest: the preview's copies), most nodes first, and
// keeps the answer within budget bytes: counts stay whole, lists are cut.
func buildPlan(p state.DeclarePreview, body declarations.Body, digest string, budget int) (*api.DeclarePlan, error) {
	// Nodes holding the same body share a diff; nodes holding two bodies that
	// differ only in the order of their files share a group.
	diffs := map[string]fileDiff{}
	for d, raw := range p.Bodies {
		old := declarations.Body{}
		if len(raw) > 0 {
			var err error
			if old, err = declarations.ParseBody(raw); err != nil {
				// Declared under an older version's rules, which this one
				// refuses (a path element over 255 bytes, that no host could
				// apply): the dry run of the body that replaces it diffs
				// against it as the state holds it, canonical JSON.
				old = declarations.Body{}
				if json.Unmarshal(raw, &old) != nil {
					return nil, fmt.Errorf("the body declared now under digest %s does not parse: %w", d, err)
				}
			}
		}
		fd, err := diffBodies(old, body)
		if err != nil {
			return nil, err
		}
		diffs[d] = fd
	}
	type group struct {
		g   api.PlanGroup
		key string
	}
	var groups []*group
	byKey := map[string]*group{}
	keyOf := map[string]string{}
	for _, t := range p.Targets {
		key, ok := keyOf[t.BodyDigest]
		if !ok {
			fd := diffs[t.BodyDigest]
			k, err := json.Marshal([]any{fd.added, fd.changed, fd.removed, fd.unchanged})
			if err != nil {
				return nil, err
			}
			key = string(k)
			keyOf[t.BodyDigest] = key
		}
		g, ok := byKey[key]
		if !ok {
			fd := diffs[t.BodyDigest]
			g = &group{key: key, g: api.PlanGroup{Added: fd.added, Changed: fd.changed, Removed: fd.removed, Unchanged: fd.unchanged,
				AddedCount: len(fd.added), ChangedCount: len(fd.changed), RemovedCount: len(fd.removed)}}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.g.Count++
		g.g.Nodes = append(g.g.Nodes, api.Assignment{Node: t.Node, Version: t.Version})
	}
	// Targets come in node id order, so each group's nodes do, and its first node
	// breaks ties between groups of one size.
	slices.SortFunc(groups, func(a, b *group) int {
		if c := cmp.Compare(b.g.Count, a.g.Count); c != 0 {
			return c
		}
		return cmp.Compare(a.g.Nodes[0].Node, b.g.Nodes[0].Node)
	})
	plan := &api.DeclarePlan{Body: digest, Nodes: len(p.Targets), Skipped: p.Skipped, Groups: []api.PlanGroup{}}
	for _, g := range groups {
		if g.g.AddedCount+g.g.ChangedCount+g.g.RemovedCount == 0 {
			plan.Unchanged += g.g.Count
		} else {
			plan.Changing += g.g.Count
		}
	}
	room := budget - jsonSize(plan)
	for i, g := range groups {
		if room < planRoom {
			for _, rest := range groups[i:] {
				plan.OtherGroups++
				plan.OtherNodes += rest.g.Count
			}
			break
		}
		fitted, size := fitGroup(g.g, room)
		plan.Groups = append(plan.Groups, fitted)
		room -= size + 1
	}
	return plan, nil
}

// fitGroup returns g cut to at most room bytes of JSON, and its size. The paths come
// before the nodes: what changes is what an operator judges a plan by, and the
// count says how many nodes it reaches.
func fitGroup(g api.PlanGroup, room int) (api.PlanGroup, int) {
	if size := jsonSize(g); size <= room {
		return g, size
	}
	out := g
	out.Added, out.Changed, out.Removed, out.Nodes = nil, nil, nil, []api.Assignment{}
	out.Truncated = true
	size := jsonSize(out)
	// Each entry costs its JSON, a comma, and the list's name and brackets once.
	const listCost = 20
	take := func(entry any) bool {
		n := jsonSize(entry) + 1
		if size+n+listCost > room {
			return false
		}
		size += n
		return true
	}
	out.Added = fitting(g.Added, take)
	out.Changed = fitting(g.Changed, take)
	out.Removed = fitting(g.Removed, take)
	out.Nodes = fitting(g.Nodes, take)
	return out, jsonSize(out)
}

// fitting returns the first entries of list that take admits, stopping at the first
// it refuses (nil if none).
func fitting[T any](list []T, take func(any) bool) []T {
	var out []T
	for _, e := range list {
		if !take(e) {
			break
		}
		out = append(out, e)
	}
	return out
}

// declarePlan answers a dry run of a declaration validated as declare validates it:
// the nodes and versions it would reach now, and what would change on each, or the
// refusal declare would give (no node selected). It holds the state's read lock only
// to copy the targets and their bodies.
func (d *Daemon) declarePlan(sel state.Selector, body declarations.Body, canonical []byte) (api.DeclareResult, error) {
	out := api.DeclareResult{Assignments: []api.Assignment{}}
	var (
		p   state.DeclarePreview
		err error
	)
	d.fsm.Read(func(s *state.State) { p, err = s.PreviewDeclare(sel) })
	if err != nil {
		return out, refusal(err)
	}
	budget := api.MaxPlanSize
	if limit := d.answerBudget(); limit > 0 && limit < budget {
		// A broker configured with a smaller message cap: the answer must still pass.
		budget = limit
	}
	out.Plan, err = buildPlan(p, body, state.BodyDigest(canonical), budget)
	if err != nil {
		return out, err
	}
	d.log.Info("declaration dry run", "nodes", out.Plan.Nodes, "changing", out.Plan.Changing, "skipped", len(p.Skipped))
	return out, nil
}
