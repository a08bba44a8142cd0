package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
)

// An operator's answer travels in one message, which the broker caps (its
// max_payload, 2 MiB by default). Lists that grow with the fleet (the roster, the
// progress of a declaration, a dry run's plan) are cut to fit, and an answer that
// still does not fit is answered with a short too_large rather than with nothing:
// meshctl reads silence as a control plane that is slow or down, and says so at
// the moment an operator needs the roster most (a fleet failing with long errors).

// answerMargin is what an answer's budget leaves of the message cap for what
// wraps its result (the AdminResponse envelope: a few dozen bytes) and for what
// is set after it was measured (a page's Next: a node id).
const answerMargin = 8 << 10

// answerBudget is the most bytes of JSON an operator answer's result may take.
func (d *Daemon) answerBudget() int {
	return int(d.conns.admin.MaxPayload()) - answerMargin
}

// encodeJSON encodes v as operator answers are sent: compact, and without Go's
// escaping of <, > and & (six bytes each), which is for JSON pasted into HTML and
// made a failing node's error message (a traceback's <module>, an HTML error page
// a health check fetched) up to six times its size. Every reader of these answers
// is Go's encoding/json (meshctl, the operator client), which reads both forms as
// the same text.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// jsonSize is the size of v as encodeJSON encodes it.
func jsonSize(v any) int {
	b, _ := encodeJSON(v)
	return len(b)
}

// fitInto returns how many of list's first entries fit in room bytes of JSON,
// each costing its own and a comma; at least one, so that a page always moves on
// (one entry past the budget is answered too_large, not by an empty page asked
// for again and again).
func fitInto[T any](list []T, room int) int {
	size := 0
	n := len(fitting(list, func(entry any) bool {
		size += jsonSize(entry) + 1
		return size <= room
	}))
	return max(n, min(1, len(list)))
}

// reply sends resp, the answer to an operator's request for op, to its reply
// subject. One the broker will not carry is answered with a short too_large
// instead (tooLarge).
func (d *Daemon) reply(op, to string, resp api.AdminResponse) {
	data, err := encodeJSON(resp)
	if err == nil {
		err = d.conns.admin.Publish(to, data)
	}
	if errors.Is(err, nats.ErrMaxPayload) {
		limit := d.conns.admin.MaxPayload()
		d.log.Warn("operator answer over the broker's message cap: answered too_large", "op", op, "bytes", len(data), "max_payload", limit)
		data, err = encodeJSON(api.AdminResponse{V: api.ProtocolVersion, Error: tooLarge(op, len(data), limit)})
		if err == nil {
			err = d.conns.admin.Publish(to, data)
		}
	}
	if err != nil {
		d.log.Warn("operator reply not sent", "op", op, "err", err)
	}
}

// tooLarge is the refusal sent in place of an answer to op of size bytes, over the
// broker's message cap of limit bytes: what happened, and what to do.
func tooLarge(op string, size int, limit int64) *api.Error {
	what := fmt.Sprintf("the answer to %s (%d bytes) exceeds the broker's message cap (%d bytes) and was not sent", op, size, limit)
	if !api.ReadOnly(op) {
		// Carried out: run again, a declaration would be declared twice.
		return &api.Error{Code: api.CodeTooLarge, Message: what + "; the change was carried out: look (meshctl nodes, token list, signing-key status) before running it again, and report it as a bug"}
	}
	return &api.Error{Code: api.CodeTooLarge, Message: what + "; ask for less at a time (nodes: a smaller limit; progress: fewer targets), as meshctl does by itself; if even one is too large, report it as a bug"}
}
