package daemon

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
)

// handleEnrol admits a node: it checks the secret against the token record, consumes
// the token through the log (atomically, bound to the joiner's key), and answers with
// everything the node needs, the first declaration signed.
func (d *Daemon) handleEnrol(m *nats.Msg) {
	node := strings.TrimPrefix(m.Subject, api.EnrolPrefix)
	resp := d.enrol(node, m.Data)
	data, err := json.Marshal(resp)
	if err != nil {
		d.log.Error("encode enrolment reply", "err", err)
		return
	}
	if err := m.Respond(data); err != nil {
		d.log.Warn("enrolment reply not sent", "node", node, "err", err)
	}
}

func (d *Daemon) enrol(node string, data []byte) api.EnrolResponse {
	refuse := func(code, msg string) api.EnrolResponse {
		d.log.Warn("enrolment refused", "node", node, "code", code, "reason", msg)
		return api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: code, Message: msg}}
	}
	req, err := api.Decode[api.EnrolRequest](data)
	if err != nil {
		return refuse(api.CodeBadRequest, err.Error())
	}
	if req.Node != node {
		return refuse(api.CodeBadRequest, "the request names node "+req.Node+" on the enrolment subject of "+node)
	}
	if req.Mesh != d.cfg.Mesh {
		return refuse(api.CodeTokenUnknown, "this is mesh "+d.cfg.Mesh+"; the token was minted for mesh "+req.Mesh)
	}
	id, ok := authn.SecretID(req.Secret)
	if !ok {
		return refuse(api.CodeBadRequest, "the secret is not 64 hex digits")
	}
	if !nkeys.IsValidPublicUserKey(req.PublicKey) {
		return refuse(api.CodeBadRequest, "public_key is not an nkey user public key")
	}
	kp, _ := nkeys.FromPublicKey(req.PublicKey)
	proof, err := base64.StdEncoding.DecodeString(req.KeyProof)
	if err != nil || kp.Verify(api.KeyProofMessage(req.Mesh, req.Node, req.PublicKey), proof) != nil {
		return refuse(api.CodeBadRequest, "key_proof does not verify: the joiner must sign with the key it registers")
	}

	// Answer a hopeless request without touching the log.
	now := d.now().UTC()
	var pre error
	d.fsm.Read(func(s *state.State) { _, pre = s.TokenState(id, req.Node, req.Role, req.PublicKey, now) })
	if pre != nil {
		return refuse(enrolCode(pre), pre.Error())
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: now, Enrol: &state.EnrolCmd{
		TokenID: id, Node: req.Node, Role: req.Role, PublicKey: req.PublicKey, CurveKey: req.CurveKey,
	}}, 10*time.Second)
	if err != nil {
		if errors.Is(err, replication.ErrNotLeader) {
			return refuse(api.CodeUnavailable, "the control plane is electing a leader; run enrol again in a few seconds")
		}
		return refuse(api.CodeUnavailable, "the enrolment could not be committed: "+err.Error())
	}
	if res.Err != nil {
		return refuse(enrolCode(res.Err), res.Err.Error())
	}
	if res.Control != nil {
		adm, err := d.admitControl(req, res.Control)
		if err != nil {
			return refuse(api.CodeInternal, err.Error())
		}
		resp := api.EnrolResponse{V: api.ProtocolVersion, OK: true, Mesh: d.cfg.Mesh, Node: req.Node, Role: state.RoleControl,
			CAPEM: string(d.caPEM), Control: adm}
		d.fsm.Read(func(s *state.State) {
			resp.Keyring = s.Keyring.Envelope
			resp.Brokers = s.Brokers()
		})
		d.log.Info("control node admitted; it joins Raft next", "node", req.Node, "raft", res.Control.Raft)
		return resp
	}

	resp := api.EnrolResponse{
		V:        api.ProtocolVersion,
		OK:       true,
		Mesh:     d.cfg.Mesh,
		Node:     req.Node,
		Role:     res.Node.Role,
		CAPEM:    string(d.caPEM),
		Subjects: ptr(api.SubjectsFor(req.Node)),
	}
	var signErr error
	d.fsm.Read(func(s *state.State) {
		resp.Brokers = s.Brokers()
		n := s.Nodes[req.Node]
		if n == nil {
			signErr = errors.New("node vanished after enrolment")
			return
		}
		resp.Keyring = s.Keyring.Envelope
		resp.Declaration, signErr = d.signer.declaration(s, n)
	})
	if signErr != nil {
		return refuse(api.CodeInternal, signErr.Error())
	}
	d.log.Info("node enrolled", "node", req.Node, "role", resp.Role, "key", req.PublicKey)
	return resp
}

// enrolCode maps the state machine's refusals to the protocol's codes.
func enrolCode(err error) string {
	switch {
	case errors.Is(err, state.ErrTokenUnknown):
		return api.CodeTokenUnknown
	case errors.Is(err, state.ErrTokenUsed):
		return api.CodeTokenUsed
	case errors.Is(err, state.ErrTokenExpired):
		return api.CodeTokenExpired
	case errors.Is(err, state.ErrTokenOtherNode):
		return api.CodeTokenOtherNode
	case errors.Is(err, state.ErrTokenWrongRole):
		return api.CodeTokenWrongRole
	case errors.Is(err, state.ErrNodeExists):
		return api.CodeNodeExists
	case errors.Is(err, state.ErrKeyRevoked):
		return api.CodeKeyRevoked
	}
	return api.CodeInternal
}

func ptr[T any](v T) *T { return &v }
