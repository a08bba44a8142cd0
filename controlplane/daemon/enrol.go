package daemon

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strings"

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
//
// It answers only on the inbox bound to the key the request registers, and only once
// the request proves possession of that key: the broker lets nobody but the
// connection that proved the key subscribe there, so the reply reaches the requester
// and nobody else. A request that cannot show this is dropped unanswered.
func (d *Daemon) handleEnrol(m *nats.Msg) {
	node := strings.TrimPrefix(m.Subject, api.EnrolPrefix)
	if len(m.Data) > d.guard.budgets.MaxEnrol {
		d.guard.drop("enrol", ReasonTooLarge, node, "enrolment request over its budget")
		return
	}
	// The clients enrolling a node share one message budget: a flood costs a map
	// lookup per message, and the clients' connections end within 30 seconds.
	if !d.guard.spend(enrolBudgetKey + node) {
		d.guard.drop("enrol", ReasonRate, node, "enrolment requests over the node's budget")
		return
	}
	req, err := api.Decode[api.EnrolRequest](m.Data)
	if err != nil {
		d.guard.drop("enrol", ReasonMalformed, node, err.Error())
		return
	}
	if !replyUnder(m.Reply, api.EnrolInbox(node, req.PublicKey)+".") || !nkeys.IsValidPublicUserKey(req.PublicKey) {
		d.dropReply("enrol", node, m.Reply)
		return
	}
	kp, _ := nkeys.FromPublicKey(req.PublicKey)
	proof, err := base64.StdEncoding.DecodeString(req.KeyProof)
	if err != nil || kp.Verify(api.KeyProofMessage(req.Mesh, req.Node, req.PublicKey), proof) != nil {
		d.guard.drop("enrol", ReasonBadProof, node, "key_proof does not verify: the joiner must sign with the key it registers")
		return
	}
	resp := d.enrol(node, req)
	data, err := json.Marshal(resp)
	if err != nil {
		d.log.Error("encode enrolment reply", "err", err)
		return
	}
	if err := d.conns.hosts.Publish(m.Reply, data); err != nil {
		d.log.Warn("enrolment reply not sent", "node", node, "err", err)
	}
}

// enrolBudgetKey prefixes the message budget of a node's enrolling clients, apart
// from the node's own once enrolled.
const enrolBudgetKey = "enrol:"

func (d *Daemon) enrol(node string, req api.EnrolRequest) api.EnrolResponse {
	refuse := func(code, msg string) api.EnrolResponse {
		d.guard.refuse("enrol", Reason(code), node, msg)
		return api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: code, Message: msg}}
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
	// Answer a hopeless request without touching the log.
	now := d.now().UTC()
	var pre error
	d.fsm.Read(func(s *state.State) { _, pre = s.TokenState(id, req.Node, req.Role, req.PublicKey, now) })
	if pre != nil {
		return refuse(refusalCode(pre), pre.Error())
	}
	// The secret is this mesh's; the rest of the token must be too, in every part the
	// host relies on, or the host would refuse the answer after the token was consumed.
	if !strings.EqualFold(req.CAPin, d.cfg.CAPin) {
		return refuse(api.CodeTokenOtherMesh, "the token pins another CA than this mesh's: it was not minted by this mesh (or the mesh's CA was replaced since); mint a new token")
	}
	var keys []string
	d.fsm.Read(func(s *state.State) { keys = slices.Clone(s.Keyring.Keys) })
	if !slices.Contains(keys, strings.ToLower(req.SigningKey)) {
		return refuse(api.CodeTokenStaleKey, "the token names a signing key the mesh no longer holds (it was rotated and retired since the token was minted): mint a new token")
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: now, Enrol: &state.EnrolCmd{
		TokenID: id, Node: req.Node, Role: req.Role, PublicKey: req.PublicKey, CurveKey: req.CurveKey,
	}}, commitTimeout)
	if err != nil {
		if errors.Is(err, replication.ErrNotLeader) {
			return refuse(api.CodeUnavailable, "the control plane is electing a leader; run enrol again in a few seconds")
		}
		return refuse(api.CodeUnavailable, "the enrolment could not be committed: "+err.Error())
	}
	if res.Err != nil {
		return refuse(refusalCode(res.Err), res.Err.Error())
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
		d.metrics.enrolments.WithLabelValues("control").Inc()
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
	var (
		in      state.DeclarationInput
		members state.MembershipInput
	)
	d.fsm.Read(func(s *state.State) {
		resp.Brokers = s.Brokers()
		resp.Keyring = s.Keyring.Envelope
		in, ok = s.DeclarationInput(req.Node)
		members = s.MembershipInput()
	})
	if !ok {
		return refuse(api.CodeInternal, "the node was revoked or removed right after its enrolment")
	}
	var err2 error
	if resp.Declaration, err2 = d.signer.declaration(in); err2 == nil {
		resp.Membership, err2 = d.signer.membership(members, now)
	}
	if err2 != nil {
		return refuse(api.CodeInternal, err2.Error())
	}
	d.log.Info("node enrolled", "node", req.Node, "role", resp.Role, "key", req.PublicKey)
	d.metrics.enrolments.WithLabelValues("host").Inc()
	return resp
}

func ptr[T any](v T) *T { return &v }
