package state

import (
	"fmt"
	"slices"
	"time"
)

// ControlNode is a member of the control plane: a Raft member running a broker.
type ControlNode struct {
	ID string `json:"id"`
	// Broker is the client address hosts dial; Raft and Cluster are where control
	// nodes reach each other.
	Broker   string    `json:"broker"`
	Raft     string    `json:"raft"`
	Cluster  string    `json:"cluster"`
	JoinedAt time.Time `json:"joined_at"`
	// CurveKey is the node's public curve key: new signing keys are sealed to it.
	CurveKey string `json:"curve_key,omitempty"`
	// Probe is the id of the probe entry appended for the node's join (ProbeCmd): a
	// joiner that caught up from a snapshot taken after that entry never applies it,
	// and learns it here instead, from the same replicated log.
	Probe string `json:"probe,omitempty"`
	// Pin is the hex SHA-256 of the node's TLS leaf's SubjectPublicKeyInfo: the other
	// control nodes accept routes and Raft connections from this key only while the
	// node is a member (ControlPins). Operator is the public key of the operator
	// credentials issued with the leaf, refused once the node is removed
	// (RevokedOperators). Both are empty for a node that joined before the mesh
	// recorded them.
	Pin      string `json:"pin,omitempty"`
	Operator string `json:"operator,omitempty"`
	// Removed control nodes stay listed, shown removed, until a new machine joins
	// under the id with a new control token.
	Removed   bool      `json:"removed,omitempty"`
	RemovedAt time.Time `json:"removed_at,omitzero"`
	// NeverServed is set on a node admitted under RulesBrokersWhenServing until the
	// leader hears its `meshctl serve` (ControlServingCmd): an admitted node whose
	// join is not finished, was rolled back or interrupted, or whose serve has not
	// started is no broker for hosts to dial, and is left out of Brokers. Its pin
	// and addresses count as a member's all the same (ControlPins, routes, Raft):
	// the join needs them. Unset on every node admitted before, or by older rules,
	// which were listed at their admission.
	NeverServed bool `json:"never_served,omitempty"`
}

// ControlAddrs are the addresses a control token admits a node with, fixed when the
// token is minted (its TLS identity carries them), and the pin of that identity's key
// and the public key of its operator credentials (ControlNode.Pin, Operator).
type ControlAddrs struct {
	Broker   string `json:"broker"`
	Raft     string `json:"raft"`
	Cluster  string `json:"cluster"`
	Pin      string `json:"pin,omitempty"`
	Operator string `json:"operator,omitempty"`
}

// ControlServingCmd lists, in Brokers, a control node admitted under
// RulesBrokersWhenServing (NeverServed), once the leader heard it serve. JoinedAt is
// the admission's time as the leader read it: an entry proposed for a machine the
// id no longer names (removed, and another admitted under it since) changes nothing.
type ControlServingCmd struct {
	Node     string    `json:"node"`
	JoinedAt time.Time `json:"joined_at"`
}

// OpControlServing names ControlServingCmd. It is always stamped with
// RulesBrokersWhenServing: only an admission stamped with them records a node
// NeverServed.
const OpControlServing = "control_serving"

// RemoveControlCmd takes a control node out of the control plane's membership.
type RemoveControlCmd struct {
	Node string `json:"node"`
}

// OpRemoveControl names RemoveControlCmd.
const OpRemoveControl = "remove_control"

// ErrLastControlNode refuses removing the only control node.
var ErrLastControlNode = fmt.Errorf("%w: it is the last control node", ErrBadCommand)

// Membership returns the version of the control nodes' membership and their
// brokers, as hosts receive it signed.
func (s *State) Membership() (uint64, []string) { return s.MembershipVersion, s.Brokers() }

// Brokers lists the client addresses of the control nodes, in the order they joined:
// what tokens carry and hosts try in order. A node admitted that was never heard
// serving (NeverServed) is not listed: nothing answers at its address yet, and
// hosts whose first broker it were would leave a working broker to dial it, again
// and again (decision 0020).
func (s *State) Brokers() []string {
	nodes := s.ActiveControlNodes()
	out := make([]string, 0, len(nodes))
	for _, c := range nodes {
		if !c.NeverServed {
			out = append(out, c.Broker)
		}
	}
	return out
}

// BootstrapCAHolder returns the control node that bootstrapped the mesh, and so was
// given the CA key, while that machine is still a member; "" once it was removed,
// or another machine joined under its id since (CAHolder names the id only).
func (s *State) BootstrapCAHolder() string {
	c, ok := s.ControlNodes[s.CAHolder]
	if !ok || c.Removed || !c.JoinedAt.Equal(s.CreatedAt) {
		return ""
	}
	return c.ID
}

// ActiveControlNodes returns copies of the control nodes not removed, oldest first.
func (s *State) ActiveControlNodes() []ControlNode {
	var out []ControlNode
	for _, c := range s.ControlNodes {
		if !c.Removed {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b ControlNode) int {
		if c := a.JoinedAt.Compare(b.JoinedAt); c != 0 {
			return c
		}
		return cmpString(a.ID, b.ID)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// idTaken refuses a node id that names an enrolled worker or an active control node,
// with an error that matches ErrNodeExists and says how to free the id.
func (s *State) idTaken(id string) error {
	if n, ok := s.Nodes[id]; ok && !n.Revoked {
		return fmt.Errorf("node %s: %w", id, ErrNodeExists)
	}
	if c, ok := s.ControlNodes[id]; ok && !c.Removed {
		return controlExistsError{node: id}
	}
	return nil
}

// controlExistsError is ErrNodeExists for an active control node's id, which a
// removal frees, not a revocation.
type controlExistsError struct{ node string }

func (e controlExistsError) Error() string {
	return "node " + e.node + ": a control node with this id is in the mesh; to give its id to a new machine, remove it first (meshctl control remove)"
}

// Is makes errors.Is(err, ErrNodeExists) hold.
func (e controlExistsError) Is(target error) bool { return target == ErrNodeExists }

func (s *State) applyRemoveControl(at time.Time, c *RemoveControlCmd) Result {
	n, ok := s.ControlNodes[c.Node]
	if !ok || n.Removed {
		return Result{Err: fmt.Errorf("%w: no active control node %s", ErrUnknownNode, c.Node)}
	}
	if len(s.ActiveControlNodes()) == 1 {
		return Result{Err: ErrLastControlNode}
	}
	n.Removed, n.RemovedAt = true, at
	if n.Operator != "" {
		// Kept apart from the record, which a new machine joining under the id
		// replaces: the removed machine keeps its credentials file.
		if s.RevokedOperators == nil {
			s.RevokedOperators = map[string]string{}
		}
		s.RevokedOperators[n.Operator] = n.ID
	}
	s.MembershipVersion++
	cn := *n
	return Result{Control: &cn}
}

// admitControl consumes a control token and records the control node with the
// addresses the token was minted for. Raft membership is the leader's business after
// this: the node is not a member until it proved it replicates. Under
// RulesBrokersWhenServing it is not listed to hosts either until it serves
// (ControlServingCmd), and the list, and so its version, stay as they were; under
// older rules it is listed at once.
func (s *State) admitControl(at time.Time, t *Token, c *EnrolCmd, rules int) Result {
	if !t.UsedAt.IsZero() {
		// A repeat of the same admission, whose answer was lost: the answer seals
		// the signing keys to the node's curve key, so it goes only to the machine
		// admitted, and only while it is a member.
		cn, ok := s.ControlNodes[c.Node]
		if !ok || cn.Removed || cn.CurveKey != c.CurveKey {
			return Result{Err: fmt.Errorf("%w: the control node this token admitted was removed, or another machine holds its id; mint a new control token", ErrTokenUsed)}
		}
		out := *cn
		return Result{Control: &out, Repeated: true}
	}
	if t.Control == nil {
		return Result{Err: fmt.Errorf("%w: control token without addresses", ErrBadCommand)}
	}
	t.UsedAt, t.UsedKey = at, c.PublicKey
	cn := &ControlNode{ID: c.Node, Broker: t.Control.Broker, Raft: t.Control.Raft, Cluster: t.Control.Cluster, JoinedAt: at, CurveKey: c.CurveKey,
		Pin: t.Control.Pin, Operator: t.Control.Operator, NeverServed: rules >= RulesBrokersWhenServing}
	s.ControlNodes[c.Node] = cn
	if !cn.NeverServed {
		s.MembershipVersion++
	}
	for id, sealed := range c.Reseal {
		// Only a token that holds its identity sealed to control nodes takes one
		// more copy; one dropped (cancelled, expired) since the proposal stays so.
		if o, ok := s.Tokens[id]; ok && id != c.TokenID && o.Role == RoleControl && len(o.SealedTo) > 0 {
			o.SealedTo[c.Node] = sealed
		}
	}
	out := *cn
	return Result{Control: &out}
}

// applyControlServing lists a control node heard serving: its broker joins Brokers,
// and the membership version grows with the list. A node listed already, or one
// admitted by older rules, is left as it is (Repeated): the leader may propose it
// twice before the first is applied, or a new leader again.
func (s *State) applyControlServing(c *ControlServingCmd) Result {
	n, ok := s.ControlNodes[c.Node]
	if !ok || n.Removed || !n.JoinedAt.Equal(c.JoinedAt) {
		return Result{Err: fmt.Errorf("%w: no active control node %s admitted at %s", ErrUnknownNode, c.Node, c.JoinedAt.UTC().Format(time.RFC3339Nano))}
	}
	if !n.NeverServed {
		out := *n
		return Result{Control: &out, Repeated: true}
	}
	n.NeverServed = false
	s.MembershipVersion++
	out := *n
	return Result{Control: &out}
}

// ControlPins returns the pins of the active control nodes' TLS keys, sorted, and
// the active nodes that have none (they joined before the mesh recorded pins).
// Routes and Raft connections are checked against the pins only when no node lacks
// one: such a node would otherwise be cut off from the others.
func (s *State) ControlPins() (pins, unpinned []string) {
	for _, c := range s.ControlNodes {
		switch {
		case c.Removed:
		case c.Pin == "":
			unpinned = append(unpinned, c.ID)
		default:
			pins = append(pins, c.Pin)
		}
	}
	slices.Sort(pins)
	slices.Sort(unpinned)
	return pins, unpinned
}
