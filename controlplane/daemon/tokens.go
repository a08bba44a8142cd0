package daemon

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/tokenfmt"
)

// tokenView is a token as operators see it: never its secret, nor its sealed
// control identity.
func tokenView(t *state.Token, s string) api.TokenView {
	return api.TokenView{ID: t.ShortID(), Node: t.Node, Role: t.Role, Labels: t.Labels,
		CreatedAt: t.CreatedAt.UTC(), ExpiresAt: t.Expiry.UTC(), State: s, UsedAt: t.UsedAt.UTC(), CancelledAt: t.CancelledAt.UTC()}
}

// listTokens answers `meshctl token list` from this node's copy of the state.
func (d *Daemon) listTokens(req api.TokenListRequest) (api.TokenListResult, error) {
	if req.Node != "" {
		if err := tokenfmt.CheckNodeID(req.Node); err != nil {
			return api.TokenListResult{}, badRequest("%v", err)
		}
	}
	now := d.now()
	out := api.TokenListResult{Tokens: []api.TokenView{}}
	d.fsm.Read(func(s *state.State) {
		for _, t := range s.Tokens {
			if req.Node == "" || t.Node == req.Node {
				out.Tokens = append(out.Tokens, tokenView(t, s.ShownState(t, now)))
			}
		}
	})
	slices.SortFunc(out.Tokens, func(a, b api.TokenView) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// cancelTokens makes pending tokens of a node useless at once: the enrolment
// handler decides through the log, so no control node admits one after the command
// commits. A connection the broker already admitted with one of them can only be
// refused, and its grant runs out within authn.EnrolConnectionLifetime.
//
// A request that names its tokens (meshctl from 2026-12-06 names those it read
// pending) cancels those and nothing else (state.RulesCancelByID): a token minted
// since, by another operator's `token --replace` or between a cancellation and its
// rerun, is left pending and named in the answer. A request without ids (an older
// meshctl) cancels every token of the node pending when it applies, as before.
func (d *Daemon) cancelTokens(req api.TokenCancelRequest) (api.TokenCancelResult, error) {
	out := api.TokenCancelResult{Node: req.Node, Cancelled: []api.TokenView{}}
	if err := tokenfmt.CheckNodeID(req.Node); err != nil {
		return out, badRequest("%v", err)
	}
	if len(req.IDs) > api.MaxCancelTokens {
		return out, badRequest("%d tokens in one request; at most %d", len(req.IDs), api.MaxCancelTokens)
	}
	var ids []string
	for _, id := range req.IDs {
		if err := api.CheckTokenID(id); err != nil {
			return out, badRequest("%v", err)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	cmd := &state.CancelTokensCmd{Node: req.Node}
	c := state.Command{Op: state.OpCancelTokens, CancelTokens: cmd}
	var notPending []api.TokenView
	if len(ids) > 0 {
		var err error
		if c.Rules, notPending, err = d.cancelByID(req.Node, ids); err != nil {
			return out, err
		}
		if c.Rules != 0 {
			cmd.IDs = ids // the state machine's answer says which were not pending
		}
	}
	res, err := d.commit(c)
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, state.ErrNoToken) || errors.Is(res.Err, state.ErrNoSuchToken) {
			return out, &api.Error{Code: api.CodeNotFound, Message: res.Err.Error() + "; meshctl token list shows the tokens the mesh knows"}
		}
		return out, refusal(res.Err)
	}
	now := d.now()
	for i := range res.Tokens {
		t := &res.Tokens[i]
		out.Cancelled = append(out.Cancelled, tokenView(t, state.TokenCancelled))
		d.log.Info("token cancelled", "node", req.Node, "token", t.ShortID())
	}
	for i := range res.NotPending {
		out.NotPending = append(out.NotPending, tokenView(&res.NotPending[i], res.NotPending[i].StateAt(now)))
	}
	if notPending != nil {
		out.NotPending = notPending
	}
	for i := range res.StillPending {
		t := &res.StillPending[i]
		out.StillPending = append(out.StillPending, tokenView(t, state.TokenPending))
		d.log.Info("token left pending: not named by the cancellation (minted since its operator looked)", "node", req.Node, "token", t.ShortID())
	}
	return out, nil
}

// cancelByID checks a cancellation that names tokens of node (ids) before it is
// proposed, and returns the rules to stamp it with: state.RulesCancelByID when every
// member of Raft applies them. A name that is none of the node's tokens is refused
// here, naming it. While a member may apply older rules, which ignore the names and
// cancel every pending token of the node, the command goes without them (and
// unstamped) only if no pending token of the node is left out of the names: it then
// cancels what was named, as every node applies it alike; notPending is then what
// the names found already used, expired or cancelled. A token minted since is
// refused older_control_node, naming it: cancelled, it would be the token another
// operator just handed out.
func (d *Daemon) cancelByID(node string, ids []string) (rules int, notPending []api.TokenView, err error) {
	now := d.now()
	var known, unnamed []string
	found := false
	d.fsm.Read(func(s *state.State) {
		for _, t := range s.Tokens {
			if t.Node != node {
				continue
			}
			found = true
			named := slices.Contains(ids, t.ShortID())
			if named {
				known = append(known, t.ShortID())
			}
			switch st := t.StateAt(now); {
			case named && st != state.TokenPending:
				notPending = append(notPending, tokenView(t, s.ShownState(t, now)))
			case !named && st == state.TokenPending:
				unnamed = append(unnamed, fmt.Sprintf("%s (minted %s)", t.ShortID(), t.CreatedAt.UTC().Format(time.RFC3339)))
			}
		}
	})
	if !found {
		return 0, nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("node %s: %v; meshctl token list shows the tokens the mesh knows", node, state.ErrNoToken)}
	}
	var unknown []string
	for _, id := range ids {
		if !slices.Contains(known, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return 0, nil, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf(
			"node %s has no token %s: nothing was cancelled; meshctl token list --node %s shows its tokens (a token is forgotten a day after it expires)",
			node, strings.Join(unknown, ", "), node)}
	}
	if rules = d.rulesFor(state.RulesCancelByID); rules != 0 {
		return rules, nil, nil
	}
	if len(unnamed) > 0 {
		slices.Sort(unnamed)
		return 0, nil, &api.Error{Code: api.CodeOlderControlNode, Message: fmt.Sprintf(
			"%s has pending token %s, not among those named (minted since they were read, perhaps by another operator's token --replace), and %s an older meshctl (by its last heartbeat, or it was never heard from), which would cancel it too: nothing was cancelled; look (meshctl token list --node %s), and cancel once every control node is upgraded, or with that token named too",
			node, strings.Join(unnamed, ", "), controlNodesRun(d.notOnRules(state.RulesCancelByID)), node)}
	}
	slices.SortFunc(notPending, func(a, b api.TokenView) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return 0, notPending, nil
}
