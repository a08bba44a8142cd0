package daemon

import (
	"errors"
	"slices"
	"strings"

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

// cancelTokens makes every pending token of a node useless at once: the enrolment
// handler decides through the log, so no control node admits one after the command
// commits. A connection the broker already admitted with one of them can only be
// refused, and its grant runs out within authn.EnrolConnectionLifetime.
func (d *Daemon) cancelTokens(req api.TokenCancelRequest) (api.TokenCancelResult, error) {
	out := api.TokenCancelResult{Node: req.Node, Cancelled: []api.TokenView{}}
	if err := tokenfmt.CheckNodeID(req.Node); err != nil {
		return out, badRequest("%v", err)
	}
	res, err := d.commit(state.Command{Op: state.OpCancelTokens, CancelTokens: &state.CancelTokensCmd{Node: req.Node}})
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, state.ErrNoToken) {
			return out, &api.Error{Code: api.CodeNotFound, Message: res.Err.Error() + "; meshctl token list shows the tokens the mesh knows"}
		}
		return out, refusal(res.Err)
	}
	for i := range res.Tokens {
		out.Cancelled = append(out.Cancelled, tokenView(&res.Tokens[i], state.TokenCancelled))
	}
	if len(out.Cancelled) > 0 {
		d.log.Info("tokens cancelled", "node", req.Node, "count", len(out.Cancelled))
	}
	return out, nil
}
