package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
	"mesh/tokenfmt"
)

// reservedOperatorName is the name bootstrap gives the first control node's own
// credentials.
const reservedOperatorName = "admin"

// MaxOperatorLife is the longest operator credentials the mesh records may live:
// credentials that never expire outlive whoever holds them.
const MaxOperatorLife = 2 * 366 * 24 * time.Hour

// operatorAdd records operator credentials issued by name (meshctl operator add): the
// request carries their user JWT, without its seed, which the leader reads the name,
// the key and the expiry from, and checks was issued by the mesh's operator account.
func (d *Daemon) operatorAdd(req api.OperatorAddRequest) (api.OperatorAddResult, error) {
	var out api.OperatorAddResult
	claims, err := jwt.DecodeUserClaims(req.JWT)
	if err != nil {
		return out, badRequest("the credentials' JWT cannot be read: %v", err)
	}
	var account string
	d.fsm.Read(func(s *state.State) { account = s.AdminAccount })
	now := d.now().UTC()
	switch {
	case claims.Issuer != account || claims.IssuerAccount != "":
		return out, badRequest("the credentials were not issued by this mesh's operator account key: meshctl operator add issues them on the control node that holds it")
	case !nkeys.IsValidPublicUserKey(claims.Subject):
		return out, badRequest("the credentials' subject is not a user key")
	case !plainOperatorJWT(claims):
		return out, badRequest("the credentials' JWT carries permissions, limits, tags or a bearer flag: the mesh grants operators their rights itself and records only plain credentials, as meshctl operator add issues them")
	case claims.Expires == 0:
		return out, badRequest("the credentials never expire: operator credentials issued by name must (meshctl operator add --ttl)")
	case time.Unix(claims.Expires, 0).After(now.Add(MaxOperatorLife)):
		return out, badRequest("the credentials expire %s, more than %s from now by the leader's clock", time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339), MaxOperatorLife)
	case !time.Unix(claims.Expires, 0).After(now):
		return out, badRequest("the credentials expired at %s by the leader's clock", time.Unix(claims.Expires, 0).UTC().Format(time.RFC3339))
	}
	if err := api.CheckOperatorName(claims.Name); err != nil {
		return out, badRequest("%v", err)
	}
	if d.controlNodeNamed(claims.Name, now) || strings.EqualFold(claims.Name, reservedOperatorName) {
		// The broker knows an operator by its name: these would read, in its
		// connection listings and logs, as a control node's own credentials.
		return out, badRequest("operator name %q is a control node's, or one a pending control token admits, in some letter case (or, admin, the first one's credentials'): choose another, so that the broker's listings tell them apart", claims.Name)
	}
	var twin string
	recorded := false
	d.fsm.Read(func(s *state.State) {
		for _, o := range s.Operators {
			switch {
			case o.Name == claims.Name:
				// Valid only: a revoked or expired record under the name kept
				// for months let a new twin in beside a valid one (a review).
				recorded = recorded || o.Active(now)
			case strings.EqualFold(o.Name, claims.Name):
				twin = o.Name
			}
		}
	})
	if twin != "" && !recorded {
		// `operator revoke alice` left Alice's credentials valid, and lists and
		// logs told the two apart by letter case alone (a docs walkthrough). A
		// name recorded already (twins recorded before this check) is the
		// renewal's or the refusal's business, as before: refused here, neither
		// twin could be renewed (a review).
		return out, badRequest("operator name %q differs from %q, recorded already, only in letter case: choose a name of its own (the same person's credentials are renewed under %q: meshctl operator add %s --renew, while they are valid)", claims.Name, twin, twin, twin)
	}
	issuedBy := d.cfg.Node
	if tokenfmt.CheckNodeID(req.IssuedBy) == nil {
		issuedBy = req.IssuedBy
	}
	rules := state.RulesOperators
	if req.Renew {
		rules = state.RulesOperatorRenewal
	}
	if older := d.notOnRules(rules); len(older) > 0 {
		return out, d.olderForOperators(older, rules)
	}
	res, err := d.commit(state.Command{Op: state.OpAddOperator, Rules: rules, AddOperator: &state.AddOperatorCmd{
		Name: claims.Name, Key: claims.Subject, Expires: time.Unix(claims.Expires, 0).UTC(), IssuedBy: issuedBy, Renew: req.Renew}})
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		return out, &api.Error{Code: refusalCode(res.Err), Message: res.Err.Error()}
	}
	out.Operator, out.Repeated = operatorView(res.Operators[0], now), res.Repeated
	if !res.Repeated {
		d.log.Info("operator credentials recorded", "name", claims.Name, "key", claims.Subject, "expires", out.Operator.Expires, "renewal", req.Renew)
	}
	return out, nil
}

// operatorList lists the recorded operator credentials.
func (d *Daemon) operatorList(api.OperatorListRequest) (api.OperatorListResult, error) {
	out := api.OperatorListResult{Operators: []api.OperatorView{}}
	var list []state.Operator
	d.fsm.Read(func(s *state.State) { list = s.OperatorList() })
	now := d.now()
	for _, o := range list {
		out.Operators = append(out.Operators, operatorView(o, now))
	}
	return out, nil
}

// operatorRevoke revokes the credentials issued under the names: the state refuses
// them at login from the commit on, and every control node closes the connections
// its broker holds with them (effectOperatorsRevoked).
func (d *Daemon) operatorRevoke(req api.OperatorRevokeRequest) (api.OperatorRevokeResult, error) {
	out := api.OperatorRevokeResult{Revoked: []api.OperatorView{}}
	if len(req.Names) == 0 || len(req.Names) > api.MaxOperatorNames {
		return out, badRequest("name 1 to %d operators to revoke", api.MaxOperatorNames)
	}
	for _, n := range req.Names {
		if err := api.CheckOperatorName(n); err != nil {
			return out, badRequest("%v", err)
		}
	}
	rules := state.RulesOperators
	if req.Keys != nil && len(req.Keys) == 0 {
		// "keys":[] (an empty variable in a script) revoked every key of the name,
		// as a revocation by name does; meshctl refused an empty --key, the API
		// did not (a review).
		return out, badRequest("keys is empty: name 1 to %d keys of the operator's credentials, or leave keys out to revoke all of them", api.MaxOperatorNames)
	}
	if len(req.Keys) > 0 {
		if len(req.Names) != 1 || len(req.Keys) > api.MaxOperatorNames {
			return out, badRequest("a revocation by key names one operator and 1 to %d of its keys", api.MaxOperatorNames)
		}
		for _, k := range req.Keys {
			if !nkeys.IsValidPublicUserKey(k) {
				return out, badRequest("%q is not an operator credentials' key (meshctl operator list --json shows them)", api.CleanText(k, 60))
			}
		}
		rules = state.RulesOperatorRenewal
	}
	if older := d.notOnRules(rules); len(older) > 0 {
		return out, d.olderForOperators(older, rules)
	}
	// A revocation made by this command is stamped with its time, at: one stamped
	// before it was made by an earlier one.
	at := d.now().UTC()
	res, err := d.commit(state.Command{Op: state.OpRevokeOperators, At: at, Rules: rules, RevokeOperators: &state.RevokeOperatorsCmd{Names: req.Names, Keys: req.Keys}})
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		return out, &api.Error{Code: refusalCode(res.Err), Message: res.Err.Error()}
	}
	now := d.now()
	for _, o := range res.Operators {
		v := operatorView(o, now)
		// Exactly this command's time, whatever the clock did since an earlier
		// one (a review).
		if v.AlreadyRevoked = !o.RevokedAt.Equal(at); !v.AlreadyRevoked {
			d.log.Info("operator credentials revoked", "name", o.Name, "key", o.Key)
		}
		out.Revoked = append(out.Revoked, v)
	}
	return out, nil
}

// plainOperatorJWT reports whether claims carry nothing but a user key, a name and
// times: what meshctl operator add signs. Anything else (permissions, limits, a
// bearer flag that nats-server's connection listing hides the JWT for, tags) the
// mesh's authentication would not honour as the JWT says.
func plainOperatorJWT(claims *jwt.UserClaims) bool {
	plain, _ := json.Marshal(jwt.NewUserClaims(claims.Subject).UserPermissionLimits)
	got, err := json.Marshal(claims.UserPermissionLimits)
	return err == nil && bytes.Equal(plain, got) && claims.IssuerAccount == "" && len(claims.Tags) == 0
}

// controlNodeNamed reports whether name, in any letter case (a reader of the
// broker's listings takes CP-1 for cp-1), is a control node's id, or the id a
// pending control token admits.
func (d *Daemon) controlNodeNamed(name string, now time.Time) bool {
	id := strings.ToLower(name)
	found := false
	d.fsm.Read(func(s *state.State) {
		if _, found = s.ControlNodes[id]; found {
			return
		}
		for _, t := range s.Tokens {
			if t.Node == id && t.Role == state.RoleControl && t.StateAt(now) == state.TokenPending {
				found = true
				return
			}
		}
	})
	return found
}

// operatorNamed returns the recorded operator name that id, a control node's to be,
// is in some letter case ("" if none): the broker's listings would not tell the
// control node from that person.
func (d *Daemon) operatorNamed(id string) string {
	name := ""
	d.fsm.Read(func(s *state.State) {
		for _, o := range s.Operators {
			if strings.EqualFold(o.Name, id) {
				name = o.Name
				return
			}
		}
	})
	return name
}

func (d *Daemon) olderForOperators(older []string, rules int) error {
	what := "records no operator credentials by name"
	if rules >= state.RulesOperatorRenewal {
		what = "neither renews operator credentials nor revokes them by key"
	}
	return &api.Error{Code: api.CodeOlderControlNode, Message: fmt.Sprintf(
		"%s an older meshctl (by its last heartbeat, or it was never heard from), which %s: nothing was recorded; upgrade every control node first",
		controlNodesRun(older), what)}
}

func operatorView(o state.Operator, now time.Time) api.OperatorView {
	v := api.OperatorView{Name: o.Name, Key: o.Key, IssuedAt: o.IssuedAt, Expires: o.Expires, IssuedBy: o.IssuedBy, RevokedAt: o.RevokedAt, State: api.OperatorValid}
	switch {
	case !o.RevokedAt.IsZero():
		v.State = api.OperatorRevoked
	case !now.Before(o.Expires):
		v.State = api.OperatorExpired
	}
	return v
}
