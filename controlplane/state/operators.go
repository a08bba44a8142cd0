package state

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Operator is one person's (or one automation's) operator credentials, issued by
// `meshctl operator add` where the operator account key is: what the mesh keeps of
// them is their name and public key, never the seed. Revoked, the key is refused at
// login and its open connections are closed; the name can be issued anew.
type Operator struct {
	Name string `json:"name"`
	Key  string `json:"key"`
	// IssuedAt and Expires are the credentials' own (the user JWT's issue time is
	// the leader's when recorded; its expiry is Expires).
	IssuedAt time.Time `json:"issued_at"`
	Expires  time.Time `json:"expires"`
	// IssuedBy is the control node that issued them.
	IssuedBy  string    `json:"issued_by,omitempty"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
}

// Active reports whether o may log in at at: not revoked and not expired.
func (o Operator) Active(at time.Time) bool {
	return o.RevokedAt.IsZero() && at.Before(o.Expires)
}

// OperatorRetention is how long the record of revoked operator credentials stays
// after the credentials expire: a revoked key stays refused by its record for as
// long as its JWT would let it in, and that long again, so that no broker whose
// clock runs behind the leader's admits it once the record is gone.
const OperatorRetention = 90 * 24 * time.Hour

// ExpiredOperatorRetention is how long the record of credentials that expired
// unrevoked stays: listed a while (`meshctl operator list`), not so long that an
// automation issued credentials every hour fills MaxOperators.
const ExpiredOperatorRetention = 7 * 24 * time.Hour

// MaxOperators bounds the operator credentials the state records at once, revoked
// and expired ones within their retention included.
const MaxOperators = 1000

// AddOperatorCmd records operator credentials issued under Name with the public
// key Key, valid until Expires. Stamped with RulesOperators; with Renew, with
// RulesOperatorRenewal.
type AddOperatorCmd struct {
	Name     string    `json:"name"`
	Key      string    `json:"key"`
	Expires  time.Time `json:"expires"`
	IssuedBy string    `json:"issued_by,omitempty"`
	// Renew records them beside valid credentials of the same name (`meshctl
	// operator add NAME --renew`), which stay valid: the holder moves to the new
	// file before the old one expires or is revoked by its key.
	Renew bool `json:"renew,omitempty"`
}

// MaxValidPerName is how many valid credentials one name may hold at once: the
// ones in use and their renewal.
const MaxValidPerName = 2

// RevokeOperatorsCmd revokes the active operator credentials issued under each of
// Names. Stamped with RulesOperators; with Keys, with RulesOperatorRenewal.
type RevokeOperatorsCmd struct {
	Names []string `json:"names"`
	// Keys, when given, are the only credentials revoked: each must be recorded
	// under one of Names (`meshctl operator revoke NAME --key KEY`, the older of a
	// renewal).
	Keys []string `json:"keys,omitempty"`
}

// Operations on operator credentials.
const (
	OpAddOperator     = "add_operator"
	OpRevokeOperators = "revoke_operators"
)

// Errors of the operator credentials' commands.
var (
	// ErrOperatorExists: active credentials are recorded under the name.
	ErrOperatorExists = errors.New("operator credentials are issued under this name and still valid: renew them (meshctl operator add NAME --renew: both stay valid until the older expires or is revoked by its key), revoke them first (meshctl operator revoke NAME), or choose another name")
	// ErrOperatorRenewals: a renewal under a name that holds MaxValidPerName
	// valid credentials already.
	ErrOperatorRenewals = errors.New("this name holds as many valid credentials as it may (2: the ones in use and their renewal)")
	// ErrNothingToRenew: a renewal under a name that holds no valid credentials
	// (revoked since the renewal was asked for, or expired): it records nothing,
	// so that a revocation of the name is never undone by a renewal in flight.
	ErrNothingToRenew = errors.New("no valid operator credentials are recorded under this name to renew (revoked or expired): operator add NAME without --renew issues new ones, if that person is to have them")
	// ErrOperatorKeyNotNamed: a key a revocation names is not recorded under
	// its name.
	ErrOperatorKeyNotNamed = errors.New("no operator credentials with this key are recorded under this name (meshctl operator list --json shows each name's keys)")
	// ErrUnknownOperator: no credentials are recorded under the name.
	ErrUnknownOperator = errors.New("no operator credentials are recorded under this name (meshctl operator list shows those that are)")
	// ErrTooManyOperators: the state records MaxOperators credentials already.
	ErrTooManyOperators = errors.New("the mesh records as many operator credentials as it may")
)

// applyAddOperator records c. The same command again (its answer lost) is
// Repeated; another key under a name whose credentials are active is refused
// unless it renews them (rules >= RulesOperatorRenewal, MaxValidPerName), as is a
// control node's own key. A renewal under a name with no valid credentials is
// refused: committed after the name's revocation, it would let its holder back in.
func (s *State) applyAddOperator(at time.Time, c *AddOperatorCmd, rules int) Result {
	if c.Name == "" || c.Key == "" || !c.Expires.After(at) {
		return Result{Err: fmt.Errorf("%w: operator credentials need a name, a key and an expiry after now", ErrBadCommand)}
	}
	if o, ok := s.Operators[c.Key]; ok {
		if o.Name == c.Name && o.RevokedAt.IsZero() {
			out := *o
			return Result{Operators: []Operator{out}, Repeated: true}
		}
		return Result{Err: fmt.Errorf("%w: the key is recorded already (as %q)", ErrBadCommand, o.Name)}
	}
	if _, ok := s.RevokedOperators[c.Key]; ok {
		return Result{Err: fmt.Errorf("%w: the key is a removed control node's", ErrBadCommand)}
	}
	for _, n := range s.ControlNodes {
		if n.Operator == c.Key {
			return Result{Err: fmt.Errorf("%w: the key is control node %s's own", ErrBadCommand, n.ID)}
		}
	}
	valid := 0
	var last time.Time
	for _, o := range s.Operators {
		if o.Name == c.Name && o.Active(at) {
			valid++
			if o.Expires.After(last) {
				last = o.Expires
			}
		}
	}
	switch renew := c.Renew && rules >= RulesOperatorRenewal; {
	case valid > 0 && !renew:
		return Result{Err: fmt.Errorf("%w (%q, until %s)", ErrOperatorExists, c.Name, last.UTC().Format(time.RFC3339))}
	case valid >= MaxValidPerName:
		return Result{Err: fmt.Errorf("%w (%q): revoke the one no longer in use by its key first (meshctl operator list shows both, with their keys; a renewal whose file was never written is the newer): meshctl operator revoke %s --key KEY", ErrOperatorRenewals, c.Name, c.Name)}
	case valid == 0 && renew:
		return Result{Err: fmt.Errorf("%w (%q)", ErrNothingToRenew, c.Name)}
	}
	if len(s.Operators)-s.purgeableOperators(at) >= MaxOperators {
		return Result{Err: fmt.Errorf("%w (%d): revoke those no longer used; records of expired credentials are dropped %s after they expire, of revoked ones %s after", ErrTooManyOperators, MaxOperators, ExpiredOperatorRetention, OperatorRetention)}
	}
	// Only now that it is carried out: a refused command changes nothing.
	s.purgeOperators(at)
	if s.Operators == nil {
		s.Operators = map[string]*Operator{}
	}
	o := &Operator{Name: c.Name, Key: c.Key, IssuedAt: at, Expires: c.Expires, IssuedBy: c.IssuedBy}
	s.Operators[c.Key] = o
	return Result{Operators: []Operator{*o}}
}

// applyRevokeOperators revokes the credentials named: every name must be recorded
// (ErrUnknownOperator otherwise, nothing revoked). A name whose credentials are all
// revoked already is answered with them, unchanged (a revocation run again).
//
// With Keys (rules >= RulesOperatorRenewal), those keys alone are revoked, each of
// which must be recorded under one of Names (ErrOperatorKeyNotNamed otherwise,
// nothing revoked).
func (s *State) applyRevokeOperators(at time.Time, c *RevokeOperatorsCmd, rules int) Result {
	var res Result
	for _, name := range c.Names {
		if !slices.ContainsFunc(s.operatorKeys(), func(k string) bool { return s.Operators[k].Name == name && !s.operatorPurgeable(k, at) }) {
			if len(c.Names) > 1 {
				// "bbob not found" read as alice revoked (a walkthrough).
				return Result{Err: fmt.Errorf("%w: %q; nothing was revoked, the other names (%s) included: run it again without %q", ErrUnknownOperator, name, quotedNames(c.Names, name), name)}
			}
			return Result{Err: fmt.Errorf("%w: %q; nothing was revoked", ErrUnknownOperator, name)}
		}
	}
	byKey := len(c.Keys) > 0 && rules >= RulesOperatorRenewal
	if byKey {
		for _, k := range c.Keys {
			if o, ok := s.Operators[k]; !ok || !slices.Contains(c.Names, o.Name) || s.operatorPurgeable(k, at) {
				return Result{Err: fmt.Errorf("%w: %s", ErrOperatorKeyNotNamed, k)}
			}
		}
	}
	s.purgeOperators(at)
	for _, k := range s.operatorKeys() {
		o := s.Operators[k]
		if !slices.Contains(c.Names, o.Name) || byKey && !slices.Contains(c.Keys, k) {
			continue
		}
		if o.RevokedAt.IsZero() {
			o.RevokedAt = at
		}
		res.Operators = append(res.Operators, *o)
	}
	return res
}

// operatorKeys are the recorded operator keys, sorted: the order every node
// applies and answers in.
func (s *State) operatorKeys() []string {
	keys := make([]string, 0, len(s.Operators))
	for k := range s.Operators {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// operatorPurgeable reports whether the record under key is due to be dropped at
// at: revoked, OperatorRetention after the credentials expire; unrevoked,
// ExpiredOperatorRetention after they expire.
func (s *State) operatorPurgeable(key string, at time.Time) bool {
	o := s.Operators[key]
	keep := ExpiredOperatorRetention
	if !o.RevokedAt.IsZero() {
		keep = OperatorRetention
	}
	return at.Sub(o.Expires) > keep
}

func (s *State) purgeableOperators(at time.Time) int {
	n := 0
	for k := range s.Operators {
		if s.operatorPurgeable(k, at) {
			n++
		}
	}
	return n
}

// purgeOperators drops the records due (operatorPurgeable).
func (s *State) purgeOperators(at time.Time) {
	for k := range s.Operators {
		if s.operatorPurgeable(k, at) {
			delete(s.Operators, k)
		}
	}
}

// OperatorList returns the recorded operator credentials, by name then issue time.
func (s *State) OperatorList() []Operator {
	out := make([]Operator, 0, len(s.Operators))
	for _, o := range s.Operators {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b Operator) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := a.IssuedAt.Compare(b.IssuedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out
}

// OperatorRefused reports whether key is of operator credentials recorded and
// revoked (meshctl operator revoke): refused at login, whatever its JWT says.
func (f *FSM) OperatorRefused(key string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	o, ok := f.st.Operators[key]
	return ok && !o.RevokedAt.IsZero()
}

// OperatorStanding is what the state says of an operator key at login.
type OperatorStanding int

const (
	// OperatorUnrecorded: the key is no control node's and recorded by no name,
	// in a mesh that records every control node's: refused. Credentials issued
	// after the backup a mesh was restored from are such (their record went with
	// what the backup did not hold); so are credentials the operator account key
	// signed outside meshctl operator add.
	OperatorUnrecorded OperatorStanding = iota
	// OperatorRecorded: a control node's (active or removed), or recorded by name
	// and not revoked.
	OperatorRecorded
	// OperatorRevokedByName: recorded by name and revoked.
	OperatorRevokedByName
)

// OperatorStanding returns key's standing (OperatorStanding). While some control
// node was admitted before its credentials' key was recorded, the state cannot tell
// its key from an unrecorded one, and admits what is not refused.
func (f *FSM) OperatorStanding(key string) OperatorStanding {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if o, ok := f.st.Operators[key]; ok {
		if !o.RevokedAt.IsZero() {
			return OperatorRevokedByName
		}
		return OperatorRecorded
	}
	if _, ok := f.st.RevokedOperators[key]; ok {
		return OperatorRecorded
	}
	unrecorded := false
	for _, n := range f.st.ControlNodes {
		if n.Operator == key {
			return OperatorRecorded
		}
		unrecorded = unrecorded || n.Operator == "" && !n.Removed
	}
	if unrecorded {
		return OperatorRecorded
	}
	return OperatorUnrecorded
}

// quotedNames lists names but skip, quoted, comma-separated.
func quotedNames(names []string, skip string) string {
	var out []string
	for _, n := range names {
		if n != skip {
			out = append(out, strconv.Quote(n))
		}
	}
	return strings.Join(out, ", ")
}
