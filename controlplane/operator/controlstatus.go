package operator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// DefaultGatherWait is how long ControlStatus waits for control nodes to answer. A
// running control node answers in milliseconds, from any broker of the mesh; one
// that has not answered by then is not running, or its broker has no route to the
// broker this client reached.
const DefaultGatherWait = 2 * time.Second

// ControlStatus asks every control node for its own view of the control plane
// (api.ControlStatusSubject) and returns the answers, sorted by node. It needs no
// leader: it is how an operator sees which control nodes run when the quorum is
// lost. It returns once every member of the Raft configurations the answers hold
// has answered, or after wait. With no answer at all, the error is ErrUnreachable.
func (c *Client) ControlStatus(wait time.Duration) ([]api.ControlStatus, error) {
	if wait <= 0 {
		wait = DefaultGatherWait
	}
	data, err := api.EncodeAdminRequest(api.OpControlStatus, api.ControlStatusRequest{})
	if err != nil {
		return nil, err
	}
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := c.nc.PublishRequest(api.ControlStatusSubject, inbox, data); err != nil {
		return nil, err
	}
	if err := c.nc.Flush(); err != nil {
		return nil, err
	}
	answers := map[string]api.ControlStatus{}
	var problems []error
	deadline := time.Now().Add(wait)
	for len(answers) == 0 || !allAnswered(answers) {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		m, err := sub.NextMsg(left)
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
			break // ErrNoResponders: no control node subscribes behind the broker reached
		}
		if err != nil {
			return nil, err
		}
		s, err := decodeControlStatus(m.Data)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		answers[s.Node] = s
	}
	if c.denied.has(api.ControlStatusSubject) {
		// Only an active operator's credentials reach every control node's own
		// view: a removed control node's read through the leader alone (exit 4,
		// as their changes; it was exit 1, in words that named no way out: a
		// walkthrough).
		return nil, fmt.Errorf("%w (control status asks every control node, on %s, which they may not); meshctl nodes with these credentials reads the leader's view", ErrReadOnly, api.ControlStatusSubject)
	}
	if len(answers) == 0 {
		if len(problems) > 0 {
			return nil, errors.Join(problems...)
		}
		return nil, fmt.Errorf("%w: no control node answered a status request within %s (none runs behind the broker reached, or it is older than this meshctl)", ErrUnreachable, wait)
	}
	out := make([]api.ControlStatus, 0, len(answers))
	for _, s := range answers {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b api.ControlStatus) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	return out, nil
}

// allAnswered reports whether every member of the Raft configurations in answers
// has answered.
func allAnswered(answers map[string]api.ControlStatus) bool {
	for _, s := range answers {
		for _, m := range s.Members {
			if _, ok := answers[m.ID]; !ok {
				return false
			}
		}
	}
	return true
}

func decodeControlStatus(data []byte) (api.ControlStatus, error) {
	var resp api.AdminResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return api.ControlStatus{}, fmt.Errorf("malformed reply from a control node: %w", err)
	}
	if resp.Error != nil {
		return api.ControlStatus{}, resp.Error
	}
	var s api.ControlStatus
	if err := json.Unmarshal(resp.Result, &s); err != nil || s.Node == "" {
		return api.ControlStatus{}, fmt.Errorf("malformed reply from a control node: %v", err)
	}
	return s, nil
}
