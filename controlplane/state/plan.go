package state

import (
	"encoding/json"
	"slices"
)

// DeclareTarget is a node a declaration would reach: the version it would be given
// and the digest of the body declared for it now.
type DeclareTarget struct {
	Node       string
	Version    uint64
	BodyDigest string
}

// DeclarePreview is what applying a DeclareCmd with this selector would do now,
// changing nothing: a dry run of the declaration.
type DeclarePreview struct {
	Targets []DeclareTarget // in node id order, as applyDeclare assigns them
	Skipped []string        // as Result.Skipped
	// Bodies holds, by digest, every body the targets hold now: copies, so the
	// caller can compare them after the read lock is let go.
	Bodies map[string]json.RawMessage
}

// PreviewDeclare resolves sel as applyDeclare does at this index (the same nodes, the
// same skipped ones, the same next versions) and returns the bodies the targets
// hold, without changing anything. Err is ErrNoTargets where applyDeclare's would be.
func (s *State) PreviewDeclare(sel Selector) (DeclarePreview, error) {
	var p DeclarePreview
	p.Bodies = map[string]json.RawMessage{}
	for _, id := range s.Select(sel) {
		n, ok := s.Nodes[id]
		if !ok || n.Revoked {
			p.Skipped = append(p.Skipped, id)
			continue
		}
		d := n.Declared.BodyDigest
		p.Targets = append(p.Targets, DeclareTarget{Node: id, Version: n.nextVersion(), BodyDigest: d})
		if _, seen := p.Bodies[d]; !seen {
			// A digest the state holds no body for (none should be) stays nil: the
			// caller reads it as nothing declared.
			p.Bodies[d] = slices.Clone(s.Bodies[d])
		}
	}
	if len(p.Targets) == 0 {
		return p, ErrNoTargets
	}
	return p, nil
}
