package state

import (
	"errors"
	"fmt"
	"slices"
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

// OperatorRetention is how long the record of operator credentials revoked or
// expired stays after that: `meshctl operator list` shows them, and a revoked key
// stays refused however long its JWT would have lived (the JWT's expiry bounds it:
// a record is dropped only once its credentials expired too).
const OperatorRetention = 90 * 24 * time.Hour

// MaxOperators bounds the operator credentials the state records at once, revoked
// and expired ones within their retention included.
const MaxOperators = 1000

// AddOperatorCmd records operator credentials issued under Name with the public
// key Key, valid until Expires. Stamped with RulesOperators.
type AddOperatorCmd struct {
	Name     string    `json:"name"`
	Key      string    `json:"key"`
	Expires  time.Time `json:"expires"`
	IssuedBy string    `json:"issued_by,omitempty"`
}

// RevokeOperatorsCmd revokes the active operator credentials issued under each of
// Names. Stamped with RulesOperators.
type RevokeOperatorsCmd struct {
	Names []string `json:"names"`
}

// Operations on operator credentials.
const (
	OpAddOperator     = "add_operator"
	OpRevokeOperators = "revoke_operators"
)

// Errors of the operator credentials' commands.
var (
	// ErrOperatorExists: active credentials are recorded under the name.
	ErrOperatorExists = errors.New("operator credentials are issued under this name and still valid: revoke them first (meshctl operator revoke), or choose another name")
	// ErrUnknownOperator: no credentials are recorded under the name.
	ErrUnknownOperator = errors.New("no operator credentials are recorded under this name (meshctl operator list shows those that are)")
	// ErrTooManyOperators: the state records MaxOperators credentials already.
	ErrTooManyOperators = errors.New("the mesh records as many operator credentials as it may")
)

// applyAddOperator records c. The same command again (its answer lost) is
// Repeated; another key under a name whose credentials are active is refused.
func (s *State) applyAddOperator(at time.Time, c *AddOperatorCmd) Result {
	s.purgeOperators(at)
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
	for _, o := range s.Operators {
		if o.Name == c.Name && o.Active(at) {
			return Result{Err: fmt.Errorf("%w (%q, until %s)", ErrOperatorExists, c.Name, o.Expires.UTC().Format(time.RFC3339))}
		}
	}
	if len(s.Operators) >= MaxOperators {
		return Result{Err: fmt.Errorf("%w (%d): revoke those no longer used; revoked and expired ones are dropped %s after", ErrTooManyOperators, MaxOperators, OperatorRetention)}
	}
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
func (s *State) applyRevokeOperators(at time.Time, c *RevokeOperatorsCmd) Result {
	s.purgeOperators(at)
	var res Result
	for _, name := range c.Names {
		if !slices.ContainsFunc(s.operatorKeys(), func(k string) bool { return s.Operators[k].Name == name }) {
			return Result{Err: fmt.Errorf("%w: %q", ErrUnknownOperator, name)}
		}
	}
	for _, k := range s.operatorKeys() {
		o := s.Operators[k]
		if !slices.Contains(c.Names, o.Name) {
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

// purgeOperators drops the records of credentials revoked or expired more than
// OperatorRetention ago whose JWT has expired too (a revoked key is refused as
// long as its credentials could log in).
func (s *State) purgeOperators(at time.Time) {
	for k, o := range s.Operators {
		ended := o.Expires
		if !o.RevokedAt.IsZero() && o.RevokedAt.Before(ended) {
			ended = o.RevokedAt
		}
		if at.Sub(ended) > OperatorRetention && at.After(o.Expires) {
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
		return a.IssuedAt.Compare(b.IssuedAt)
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
