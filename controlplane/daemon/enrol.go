package daemon

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/authn"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
	"mesh/tokenfmt"
)

// handleEnrol admits a node: it checks the token's proof (an older client's secret)
// against the token record, consumes the token through the log (atomically, bound to
// the joiner's key), and answers with everything the node needs, the first
// declaration signed.
//
// It answers only on the inbox bound to the key the request registers, and only once
// the request proves possession of that key: the broker lets nobody but the
// connection that proved the key subscribe there, so the reply reaches the requester
// and nobody else. A request that cannot show this is dropped unanswered.
func (d *Daemon) handleEnrol(m *nats.Msg) {
	// mesh.enrol.<node>.<key>, where the broker lets only the connection that proved
	// <key> publish; or mesh.enrol.<node>, which clients before it use.
	node, key, keyed := strings.Cut(strings.TrimPrefix(m.Subject, api.EnrolPrefix), ".")
	if strings.Contains(key, ".") {
		// One subscription takes every subject under the prefix; no client may
		// publish deeper ones (the broker's permissions), and none is served.
		d.guard.drop("enrol", ReasonMalformed, node, "an enrolment subject deeper than mesh.enrol.<node>.<key>")
		return
	}
	if payloadSize(m) > d.guard.budgets.MaxEnrol {
		d.guard.drop("enrol", ReasonTooLarge, node, "enrolment request over its budget")
		return
	}
	// On the keyed subject the budget is the one client's, and past it the client's
	// connections are closed: a flood queued on this subject delayed every other
	// enrolment by seconds, and the connection may live 30 s. On the old subject,
	// every client enrolling the node shares the budget, whatever its token (so a
	// client holding some other token could spend it), and no one connection can be
	// told from another: over it, a message is dropped.
	budget := enrolBudgetKey + node
	if keyed {
		budget += "." + key
	}
	if !d.guard.spend(budget) {
		d.guard.drop("enrol", ReasonRate, node, "enrolment requests over the client's budget")
		if keyed {
			d.disconnectKey(key, ReasonRate)
		}
		return
	}
	req, err := api.Decode[api.EnrolRequest](m.Data)
	if err != nil {
		d.guard.drop("enrol", ReasonMalformed, node, err.Error())
		return
	}
	if !keyed && (req.TokenID != "" || req.TokenProof != "" || req.CurveKey != "") {
		// On the old subject nothing says which key the publisher proved at login,
		// and proofs are the same every time they are made: a request read once on a
		// client's path, sent again here by anyone holding any token the mesh knows
		// (admitted under any node name for a few seconds), would be carried out, a
		// joining control node's with another curve key. No client ever sent a proof
		// (or a curve key, since joins moved to the keyed subject first) here.
		d.guard.drop("enrol", ReasonMalformed, node, "a request proving its token, or a joining control node's, is read only on mesh.enrol.<node>.<key> (meshhost and meshctl since decision 0017 ask there)")
		return
	}
	if keyed && req.PublicKey != key {
		d.guard.drop("enrol", ReasonMalformed, node, "public_key is not the key the subject names")
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
	data, err := d.encodeEnrolAnswer(resp)
	if err != nil {
		d.log.Error("encode enrolment reply", "err", err)
		return
	}
	// Paid for by its size, on the client's budget, as a sync's answer is: a
	// repeated enrolment is answered from the state with the node's declaration (up
	// to the 64 KiB an answer may be) on every subscription the key's connections
	// hold on its inbox. A first enrolment's answer, a few KiB, always fits the
	// budget; a repeat that does not is refused, and answered again once it refills.
	if !d.payAnswer(budget, req.PublicKey, len(data)) {
		d.guard.refuse(subjectEnrol, ReasonRate, node, "the client repeated its enrolment faster than its budget pays for sending the answer")
		data, _ = json.Marshal(api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: api.CodeUnavailable,
			Message: "this enrolment was repeated faster than its message budget allows for the answer's size"}})
	}
	if err := d.conns.hosts.Publish(m.Reply, data); err != nil {
		d.logRepeated(slog.LevelWarn, "enrolment reply not sent", "node", node, "err", err)
	}
}

// revokedCloseWait bounds how long an enrolment waits for the connections of the
// node id's revoked keys to close once it asked the brokers to close them.
const revokedCloseWait = 2 * time.Second

// closeRevokedOf closes the connections the hosts account still holds under a key
// node was revoked under, and returns how many are still open after revokedCloseWait.
// The broker grants a node's subjects by its id (authn.NodeGrant), and refuses a
// revoked key only at login: a connection of the key, open since before the
// revocation, whose closing (enforceRevocations, RevokeGrace after the commit) was
// lost with a leader, hears the declarations of the machine enrolled next under the
// id until a listing of the brokers' connections closes it (a minute at most). The
// enrolment closes it first, or is not made.
func (d *Daemon) closeRevokedOf(node string) int {
	var open []string
	for _, r := range d.fsm.Revocations(node) {
		if d.presence.Open(r.Key) > 0 {
			open = append(open, r.Key)
			d.presence.Kick(r.Key)
		}
	}
	deadline := time.Now().Add(revokedCloseWait)
	for len(open) > 0 {
		n := 0
		for _, k := range open {
			n += d.presence.Open(k)
		}
		if n == 0 || time.Now().After(deadline) {
			if n > 0 {
				d.logRepeated(slog.LevelWarn, "an enrolment waits for connections of a revoked key of its node id to close", "node", node, "connections", n)
			}
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// encodeEnrolAnswer encodes an enrolment answer so that it fits what the hosts
// account lets the control plane publish and what a host reads (64 KiB each). An
// answer carries the node's current declaration, signed: a first enrolment's is empty,
// but a repeated one's is whatever has been declared for the node since, up to the
// 1 MiB a declaration may be, which the declaration subject carries and an answer
// cannot. Such an answer leaves the declaration out rather than not arrive at all; the
// declaration subject brings it, as every later one, once the node syncs.
func (d *Daemon) encodeEnrolAnswer(resp api.EnrolResponse) ([]byte, error) {
	data, err := json.Marshal(resp)
	limit := min(d.conns.hosts.MaxPayload(), api.MaxReplySize)
	if err != nil || int64(len(data)) <= limit || resp.Declaration == nil {
		return data, err
	}
	d.log.Debug("enrolment answer sent without the node's declaration: with it, it would exceed the hosts' message cap; the node receives it on its declaration subject when it syncs",
		"node", resp.Node, "bytes", len(data), "cap", limit)
	resp.Declaration = nil
	return json.Marshal(resp)
}

// enrolNotRecorded tells an enrolling client that the control plane can record
// nothing now: unavailable, which every agent takes as worth another try, since one
// that knew no disk_full took that for a refusal for good. It names no control
// node's path or error: the control node's log does, for its operators.
//
// What the mesh tells an enrolling client says what happened, not what to run: the
// client adds that (meshhost enrol, meshctl join), once.
const enrolNotRecorded = "the control plane cannot record enrolments now: a control node cannot write its Raft log (a full or read-only disk, or one that does not answer), which the mesh's operators must mend (meshctl control status names it); nothing was recorded and the token is not used"

// enrolBudgetKey prefixes the message budget of a node's enrolling clients, apart
// from the node's own once enrolled.
const enrolBudgetKey = "enrol:"

func (d *Daemon) enrol(node string, req api.EnrolRequest) api.EnrolResponse {
	// refuseSaying logs detail and tells the enrolling client msg: what the control
	// node knows of its own failure (its paths, its store's errors) is for its
	// operators, not for a client that has proved only a token.
	refuseSaying := func(code, msg, detail string) api.EnrolResponse {
		d.guard.refuse("enrol", Reason(code), node, detail)
		return api.EnrolResponse{V: api.ProtocolVersion, Error: &api.Error{Code: code, Message: msg}}
	}
	refuse := func(code, msg string) api.EnrolResponse { return refuseSaying(code, msg, msg) }
	answer := func(resp api.EnrolResponse, e *api.Error) api.EnrolResponse {
		if e != nil {
			return refuse(e.Code, e.Message)
		}
		return resp
	}
	if req.Node != node {
		return refuse(api.CodeBadRequest, "the request names node "+req.Node+" on the enrolment subject of "+node)
	}
	if req.Mesh != d.cfg.Mesh {
		return refuse(api.CodeTokenUnknown, "this is mesh "+d.cfg.Mesh+"; the token was minted for mesh "+req.Mesh)
	}
	if req.CurveKey != "" && req.Role != state.RoleControl {
		// Only a joining control node's key is sealed to; a host's would be kept in
		// the log entry unused, whatever the client put there.
		return refuse(api.CodeBadRequest, "curve_key is sent only by a joining control node (meshctl join), not by a host")
	}
	id, e := d.tokenOf(req)
	if e != nil {
		return refuse(e.Code, e.Message)
	}
	// The same enrolment sent again while this node carries it out (a host sends
	// it again unanswered, and a commit may take longer than that) waits for it,
	// and is then answered from the state as a repeat: one commit, not one a
	// sending, when commits are slow and hosts send again.
	done, ok := d.enrolling.start(id + " " + req.PublicKey)
	if !ok {
		return refuse(api.CodeUnavailable, "this enrolment is being carried out already, and as many of its sendings wait for it as may: its answer comes on an earlier sending")
	}
	defer done()
	// Answer a hopeless request without touching the log, and tell a repeat from a
	// first enrolment.
	now := d.now().UTC()
	var (
		pre    error
		repeat bool
	)
	d.fsm.Read(func(s *state.State) {
		var t *state.Token
		t, pre = s.TokenState(id, req.Node, req.Role, req.PublicKey, now)
		if pre == nil && t.UsedAt.IsZero() && !now.Before(t.Deadline()) {
			// Past the expiry the token's text says, within the second its record
			// outlives it (Token.Deadline).
			pre = fmt.Errorf("%w (at %s, as the token says)", state.ErrTokenExpired, t.Deadline().UTC().Format(time.RFC3339))
		}
		repeat = pre == nil && t.Role == state.RoleWorker && !t.UsedAt.IsZero()
	})
	if pre != nil {
		return refuse(refusalCode(pre), pre.Error())
	}
	// The token's id and proof are this mesh's; the rest of the token must be too, in
	// every part the host relies on, or the host would refuse the answer after the
	// token was consumed.
	if !strings.EqualFold(req.CAPin, d.cfg.CAPin) {
		return refuse(api.CodeTokenOtherMesh, "the token pins another CA than this mesh's: it was not minted by this mesh (or the mesh's CA was replaced since); mint a new token")
	}
	var keys []string
	d.fsm.Read(func(s *state.State) { keys = slices.Clone(s.Keyring.Keys) })
	if !slices.Contains(keys, strings.ToLower(req.SigningKey)) {
		return refuse(api.CodeTokenStaleKey, "the token names a signing key the mesh no longer holds (it was rotated and retired since the token was minted): mint a new token")
	}
	if repeat {
		// The same enrolment again, by the same key, before the token expired: the
		// host lost the answer. The log already holds the enrolment and would only
		// answer "repeat", so the answer comes from the state and nothing is
		// proposed: a host retrying (up to the node's budget of 20 a second, until
		// the token expires) costs a read and a signature, not a commit each time.
		// A control node's repeated admission still goes through the log, which
		// decides whether it may be repeated.
		return answer(d.enrolAnswer(req, state.RoleWorker, now, true))
	}
	if req.Role == state.RoleWorker {
		if open := d.closeRevokedOf(req.Node); open > 0 {
			return refuse(api.CodeUnavailable, fmt.Sprintf("%d connection(s) of a key this node id was revoked under are still open, and would hear the declarations of the machine enrolled now: they are being closed", open))
		}
	}
	// A control node's identity is opened before the enrolment is committed: one
	// this node cannot hand over must not use the token up.
	var (
		identity []byte
		reseal   map[string]state.SealedIdentity
	)
	if req.Role == state.RoleControl {
		if e = d.checkJoinerRules(req.Rules); e != nil {
			return refuse(e.Code, e.Message)
		}
		if identity, e = d.controlIdentity(id, req.Node); e != nil {
			return refuse(e.Code, e.Message)
		}
		if reseal, e = d.resealControlTokens(id, req.CurveKey); e != nil {
			return refuse(e.Code, e.Message)
		}
		// Nor one this node lacks signing keys for (admitControl checks again,
		// after a rotation that ran meanwhile).
		if _, err := d.keysToHandOver(); errors.Is(err, errKeysNotHeld) {
			return refuse(api.CodeUnavailable, err.Error())
		}
	}
	if why := d.noWritableQuorum(now); why != "" {
		// Nothing proposed, as for an operator's change (commit): committed
		// whenever there is room again, long after the client gave up.
		return refuseSaying(api.CodeUnavailable, enrolNotRecorded, "nothing can be committed now: "+why)
	}
	res, err := d.raft.Apply(state.Command{Op: state.OpEnrol, At: now, Rules: d.enrolRules(req.Role, req.Node), Enrol: &state.EnrolCmd{
		TokenID: id, Node: req.Node, Role: req.Role, PublicKey: req.PublicKey, CurveKey: req.CurveKey, Reseal: reseal,
	}}, commitTimeout)
	if err != nil {
		if errors.Is(err, replication.ErrNotLeader) {
			return refuse(api.CodeUnavailable, "the control plane is electing a leader")
		}
		if errors.Is(err, syscall.ENOSPC) {
			return refuseSaying(api.CodeUnavailable, enrolNotRecorded, fmt.Sprintf(
				"control node %s could not write its Raft log: its disk is full (%v); free space under %s", d.cfg.Node, err, d.opts.Dir))
		}
		// Perhaps recorded (a commit that did not return in time): the same key
		// sent again is answered from the mesh's records if it was.
		return refuseSaying(api.CodeUnavailable, "the control plane could not confirm the enrolment now (its log says why); if it was recorded, the same token and key are answered from the mesh's records",
			"the enrolment could not be committed: "+err.Error())
	}
	if res.Err != nil {
		return refuse(refusalCode(res.Err), res.Err.Error())
	}
	if res.Control != nil {
		adm, err := d.admitControl(req, identity, res.Control)
		if errors.Is(err, errKeysNotHeld) {
			return refuse(api.CodeUnavailable, err.Error())
		}
		if err != nil {
			return refuse(api.CodeInternal, err.Error())
		}
		resp := api.EnrolResponse{V: api.ProtocolVersion, OK: true, Mesh: d.cfg.Mesh, Node: req.Node, Role: state.RoleControl,
			CAPEM: string(d.caPEM), Control: adm}
		d.fsm.Read(func(s *state.State) {
			resp.Keyring = s.Keyring.Envelope
			resp.Brokers = s.Brokers()
		})
		if res.Repeated {
			d.log.Debug("control node admission repeated", "node", req.Node)
			return resp
		}
		d.log.Info("control node admitted; it joins Raft next", "node", req.Node, "raft", res.Control.Raft)
		d.metrics.enrolments.WithLabelValues(enrolledControl).Inc()
		return resp
	}
	// Repeated: the same enrolment sent again while its first sending was being
	// committed (a host sends it again when unanswered), recorded once.
	return answer(d.enrolAnswer(req, res.Node.Role, now, res.Repeated))
}

// tokenOf returns the id of the token an enrolment request presents: a client since
// decision 0018 names it and proves its secret by the secret's key, over the mesh,
// the node and the key it registers; an older one sends the secret.
func (d *Daemon) tokenOf(req api.EnrolRequest) (string, *api.Error) {
	if req.TokenID == "" && req.TokenProof == "" {
		id, ok := authn.SecretID(req.Secret)
		if !ok {
			return "", &api.Error{Code: api.CodeBadRequest, Message: "the request carries neither a token proof nor a secret of 64 hex digits"}
		}
		return id, nil
	}
	id := strings.ToLower(req.TokenID)
	proof, err := base64.StdEncoding.DecodeString(req.TokenProof)
	if b, herr := hex.DecodeString(id); herr != nil || len(b) != 32 || err != nil {
		return "", &api.Error{Code: api.CodeBadRequest, Message: "token_id is not 64 hex digits, or token_proof is not base64"}
	}
	var proofKey string
	d.fsm.Read(func(s *state.State) {
		if t, ok := s.Tokens[id]; ok {
			proofKey = t.ProofKey
		}
	})
	pk, _ := hex.DecodeString(proofKey)
	if !tokenfmt.VerifyProof(pk, req.Mesh, req.Node, req.PublicKey, proof) {
		// The broker checked a proof of some token of this node's to admit the
		// connection; this one names a token it does not prove.
		return "", &api.Error{Code: api.CodeTokenUnknown, Message: "the token proof does not verify against any token the mesh holds for this node"}
	}
	return id, nil
}

// enrolAnswer answers an enrolled node from the state: everything it needs, its
// current declaration signed. repeat says the enrolment was committed before.
func (d *Daemon) enrolAnswer(req api.EnrolRequest, role string, now time.Time, repeat bool) (api.EnrolResponse, *api.Error) {
	resp := api.EnrolResponse{
		V:        api.ProtocolVersion,
		OK:       true,
		Mesh:     d.cfg.Mesh,
		Node:     req.Node,
		Role:     role,
		CAPEM:    string(d.caPEM),
		Subjects: ptr(api.SubjectsFor(req.Node)),
	}
	var (
		in      state.DeclarationInput
		ok      bool
		members state.MembershipInput
	)
	d.fsm.Read(func(s *state.State) {
		resp.Brokers = s.Brokers()
		resp.Keyring = s.Keyring.Envelope
		in, ok = s.DeclarationInput(req.Node)
		members = s.MembershipInput()
	})
	if !ok || in.NodeKey != req.PublicKey {
		return resp, &api.Error{Code: api.CodeInternal, Message: "the node was revoked or enrolled again right after this enrolment"}
	}
	// The enrolling agent says nothing of batch proofs (an older one, enrolling
	// again for a lost answer, would refuse one): never an envelope kept from a
	// fan-out.
	in.BatchProofs = false
	var err error
	if resp.Declaration, err = d.signer.declaration(in); err == nil {
		resp.Membership, err = d.signer.membership(members, now)
	}
	if err != nil {
		return resp, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	if repeat {
		d.log.Debug("node enrolment repeated, answered from the state", "node", req.Node, "key", req.PublicKey)
		return resp, nil
	}
	// The agent the host names goes into the log only as one the control plane
	// would keep from its status (api.ValidAgent): the host is not trusted yet.
	agent := "unknown"
	if api.ValidAgent(req.Agent) {
		agent = req.Agent
	}
	d.log.Info("node enrolled", "node", req.Node, "role", resp.Role, "key", req.PublicKey, "agent", agent)
	d.metrics.enrolments.WithLabelValues(enrolledHost).Inc()
	return resp, nil
}

func ptr[T any](v T) *T { return &v }

// checkJoinerRules refuses, before anything is used up, a joining control node
// whose meshctl applies the log by rules older than those the state was built by
// (rules: what its join announced; none, from a join before the announcement,
// counts as the first rules). It would stop at the first entry it cannot apply,
// and its join be rolled back as a node "not replicating the log".
func (d *Daemon) checkJoinerRules(rules int) *api.Error {
	var built int
	d.fsm.Read(func(s *state.State) { built = s.Rules })
	if max(rules, 1) >= built {
		return nil
	}
	return &api.Error{Code: api.CodeOlderControlNode, Message: fmt.Sprintf(
		"this meshctl join applies the log by rules older than those the mesh's state was built by (rules %d): it could not follow the log; nothing was admitted and the token is not used: run the join with the meshctl the control nodes run",
		built)}
}

// enrolmentsInFlight are the enrolments a control node carries out, by token id and
// key, and how many sendings of each wait for it.
type enrolmentsInFlight struct {
	mu      sync.Mutex
	m       map[string]chan struct{}
	waiting map[string]int
}

// maxEnrolmentWaiters bounds the sendings of one enrolment that wait for it: each
// holds one of the enrolConcurrency handlers, and an honest host sends three at
// most in its 20 s; a client flooding its own enrolment would otherwise hold them
// all, and every other enrolment would queue behind it.
const maxEnrolmentWaiters = 2

// enrolmentWait bounds how long the same enrolment sent again waits for the one in
// flight: a commit's timeout and the wait for a revoked key's connections.
const enrolmentWait = commitTimeout + revokedCloseWait

// start waits, up to enrolmentWait, for the enrolment key names in flight here to
// end, then marks it in flight; done ends it. ok is false, nothing waited for, when
// maxEnrolmentWaiters sendings of it wait already.
func (f *enrolmentsInFlight) start(key string) (done func(), ok bool) {
	deadline := time.Now().Add(enrolmentWait)
	f.mu.Lock()
	for {
		ch, busy := f.m[key]
		if !busy {
			break
		}
		if f.waiting[key] >= maxEnrolmentWaiters {
			f.mu.Unlock()
			return nil, false
		}
		if f.waiting == nil {
			f.waiting = map[string]int{}
		}
		f.waiting[key]++
		f.mu.Unlock()
		timedOut := false
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			timedOut = true
		}
		f.mu.Lock()
		if f.waiting[key]--; f.waiting[key] == 0 {
			delete(f.waiting, key)
		}
		if timedOut {
			// Carried out beside it: the log decides between them.
			f.mu.Unlock()
			return func() {}, true
		}
	}
	if f.m == nil {
		f.m = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	f.m[key] = ch
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		close(ch)
	}, true
}
