package daemon

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/pki"
	"mesh/controlplane/replication"
	"mesh/controlplane/state"
	"mesh/declarations"
	"mesh/tokenfmt"
)

// MaxAdminRequest caps an operator request: a declaration body plus a little.
const MaxAdminRequest = declarations.MaxEnvelopeSize + 64<<10

// handleAdmin serves the operator API. Requests reach it only from the operators
// account, through the service import, so their reply subjects are ones the broker
// made ("_R_." and a token) that lead back to the requester and nowhere else; a
// request with any other reply is dropped. Every operation but a ping needs its
// explicit AdminRequest envelope, decoded strictly: another call's answer delivered
// here by a reflected reply subject decodes as nothing.
func (d *Daemon) handleAdmin(m *nats.Msg) {
	d.serveAdmin(strings.TrimPrefix(m.Subject, api.AdminPrefix), m)
}

// adminDispatch serves the operator API: reads on slots of their own, so that
// changes waiting on a commit never hold one (two `meshctl token` runs, resent
// while a leader's log write hung, took all eight shared slots, and `meshctl
// nodes` went unanswered: a review); changes on as many as adminChangesWaiting,
// one more refused at once. Neither waits in the subscription's goroutine for the
// other's slots.
func (d *Daemon) adminDispatch() nats.MsgHandler {
	reads := d.handlers.concurrently(adminConcurrency, d.handleAdmin)
	changes := d.handlers.atMost(adminChangesWaiting, d.handleAdmin, d.refuseChangeNow)
	return func(m *nats.Msg) {
		if api.ReadOnly(strings.TrimPrefix(m.Subject, api.AdminPrefix)) {
			reads(m)
			return
		}
		changes(m)
	}
}

// refuseChangeNow answers an operator's change that finds adminChangesWaiting
// changes taken already: nothing done, and said so (NotDone), which meshctl sends
// again while it waits for a leader.
func (d *Daemon) refuseChangeNow(m *nats.Msg) {
	op := strings.TrimPrefix(m.Subject, api.AdminPrefix)
	if !replyUnder(m.Reply, "_R_.") {
		d.dropReply("admin", op, m.Reply)
		return
	}
	ae := &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
		"control node %s has %d changes waiting their turn (a log write that does not return holds them: meshctl control status); nothing was done: send it again", d.cfg.Node, adminChangesWaiting)}
	d.guard.refuse("admin", Reason(ae.Code), op, ae.Message)
	d.reply(op, m.Reply, api.AdminResponse{V: api.ProtocolVersion, Error: ae, NotDone: true})
}

// retiredBudget names the one message budget that every removed control node's
// operator credentials share: they read now and then, and what a copy of such a
// file sends past it closes all their connections.
const retiredBudget = "retired:"

// retiredServices are the reads the operator credentials of removed control nodes
// request on the operator API's subjects, served apart (handleRetired).
func retiredServices() []broker.Renamed {
	var out []broker.Renamed
	for _, op := range api.AdminOps() {
		if api.ReadOnly(op) {
			out = append(out, broker.Renamed{Local: api.AdminSubject(op), Export: api.RetiredSubject(op)})
		}
	}
	return out
}

// handleRetired serves the reads of removed control nodes' operator credentials,
// which the broker renames to api.RetiredPrefix: in a queue of their own, under one
// budget, so that a copy of such a file flooding its reads neither delays an
// operator's change nor costs the leader more than a short queue. Past the budget,
// every connection of those credentials is closed (each may open a few a minute,
// authn.RetiredConnections). The broker imports nothing else for them; anything
// else arriving here is dropped.
func (d *Daemon) handleRetired(m *nats.Msg) {
	op := strings.TrimPrefix(m.Subject, api.RetiredPrefix)
	switch {
	case !api.ReadOnly(op):
		d.guard.drop("retired", ReasonMalformed, op, "not a read")
	case !d.guard.spend(retiredBudget):
		d.guard.drop("retired", ReasonRate, op, "reads of removed control nodes' credentials over their budget: their connections are closed")
		d.kickAll(broker.AccountRetired, ReasonRate, nil)
	default:
		d.serveAdmin(op, m)
	}
}

// serveAdmin answers operator request m for op.
func (d *Daemon) serveAdmin(op string, m *nats.Msg) {
	if !replyUnder(m.Reply, "_R_.") {
		d.dropReply("admin", op, m.Reply)
		return
	}
	var (
		result  any
		err     error
		by, key string
		// dryRun: a declaration's dry run, which changes nothing and is not
		// logged as a change (it was, as done: a review).
		dryRun bool
	)
	// An operation this node does not know is answered not_found below, as it
	// always was, not judged as a change (a newer meshctl's read, unsigned,
	// was refused as not signed: a review).
	change := !api.ReadOnly(op) && slices.Contains(api.AdminOps(), op)
	if change {
		// The signature is judged as the request arrives (a change may wait its
		// turn for minutes, and its time is the sending's); the key is named, and
		// judged, as it stands when the change runs (a revocation may come first:
		// revocations are changes too, so none commits between the judgement and
		// the change but one whose commit was left pending, waited for here).
		var signed string
		key, signed = d.checkSignature(op, m)
		// Changes run one at a time, as they did when the API was served by one
		// goroutine; reads run beside them.
		d.adminMu.Lock()
		defer d.adminMu.Unlock()
		by, err = d.judgeSigner(key, signed)
	}
	if err != nil {
		// Refused for who signed it: nothing runs.
	} else if len(m.Data) > MaxAdminRequest {
		err = badRequest("request of %d bytes exceeds the %d byte cap", len(m.Data), MaxAdminRequest)
	} else {
		switch op {
		case api.OpPing:
			result = api.PingResult{Mesh: d.cfg.Mesh, Node: d.cfg.Node, Leader: d.raft.IsLeader()}
		case api.OpTokenCreate:
			result, err = adminCall(op, m.Data, d.createToken)
		case api.OpTokenList:
			result, err = adminCall(op, m.Data, d.listTokens)
		case api.OpTokenCancel:
			result, err = adminCall(op, m.Data, d.cancelTokens)
		case api.OpDeclare:
			result, dryRun, err = d.declareCall(m)
		case api.OpNodes:
			result, err = adminCall(op, m.Data, d.nodes)
		case api.OpProgress:
			result, err = adminCall(op, m.Data, d.progress)
		case api.OpRevoke:
			result, err = adminCall(op, m.Data, d.revoke)
		case api.OpLabel:
			result, err = adminCall(op, m.Data, d.label)
		case api.OpControlAdd:
			result, err = adminCall(op, m.Data, d.controlAdd)
		case api.OpControlConfirm:
			result, err = adminCall(op, m.Data, d.controlConfirm)
		case api.OpControlAbort:
			result, err = adminCall(op, m.Data, d.controlAbort)
		case api.OpControlRemove:
			result, err = adminCall(op, m.Data, d.controlRemove)
		case api.OpSigningKeyRotate:
			result, err = adminCall(op, m.Data, d.rotateKey)
		case api.OpSigningKeyStatus:
			result, err = adminCall(op, m.Data, d.keyringStatus)
		case api.OpSigningKeyRetire:
			result, err = adminCall(op, m.Data, d.retireKey)
		case api.OpOperatorAdd:
			result, err = adminCall(op, m.Data, d.operatorAdd)
		case api.OpOperatorList:
			result, err = adminCall(op, m.Data, d.operatorList)
		case api.OpOperatorRevoke:
			result, err = adminCall(op, m.Data, d.operatorRevoke)
		default:
			// not_found, as every version answered it; said as what it most likely
			// is, a meshctl newer than this control node (a review).
			runs := "an older meshctl"
			if d.opts.Version != "" {
				runs = "meshctl " + d.opts.Version
			}
			err = &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("unknown operation %q: this control node runs %s, which does not know it; upgrade the control nodes (meshctl control status shows what each runs), or run the meshctl they run",
				api.CleanText(op, 64), runs)}
		}
	}
	resp := api.AdminResponse{V: api.ProtocolVersion}
	if err != nil {
		var ae *api.Error
		if !errors.As(err, &ae) {
			ae = &api.Error{Code: api.CodeInternal, Message: err.Error()}
		}
		resp.Error, resp.NotDone = ae, errors.Is(err, errNotDone)
		d.guard.refuse("admin", Reason(ae.Code), op, ae.Message)
	} else if resp.Result, err = encodeJSON(result); err != nil {
		// What was asked is carried out; its answer cannot be written (a value
		// no check kept out): said, not answered with nothing.
		d.log.Error("an operator's answer could not be written; report it as a bug", "op", op, "err", err)
		resp.Result = nil
		msg := "the answer could not be written (" + err.Error() + "); the control plane's log says more: report it as a bug"
		if !api.ReadOnly(op) {
			// Carried out: run again, a declaration would be declared twice.
			msg = "the change was carried out, but its answer could not be written (" + err.Error() + "): look (meshctl nodes, token list, signing-key status) before running it again, and report it as a bug"
		}
		resp.Error = &api.Error{Code: api.CodeInternal, Message: msg}
	}
	if change && !dryRun {
		d.logChange(op, m, by, key, resp)
	}
	d.reply(op, m.Reply, resp)
}

// logChange logs who asked for a change and how it ended. Who is the name the mesh
// records for the key that signed the request (api.OperatorSigHeader): a person's
// credentials by name (decision 0041) or a control node's own admin.creds (its id).
// Not the broker's word: nothing the broker puts in a request is out of a client's
// reach (a header line of its own is read before the broker's), and a signature
// needs the key's seed. Reads are not logged: they change nothing, and scripts poll.
func (d *Daemon) logChange(op string, m *nats.Msg, by, key string, resp api.AdminResponse) {
	outcome := "done"
	if resp.Error != nil {
		outcome = resp.Error.Code
	}
	attrs := []any{"op", api.CleanText(op, 64), "by", by}
	if key != "" {
		attrs = append(attrs, "key", key)
	}
	attrs = append(attrs, "outcome", outcome)
	if id := m.Header.Get(api.RequestHeader); id != "" {
		attrs = append(attrs, "request_id", api.CleanText(id, 64))
	}
	d.log.Info("operator change", attrs...)
}

// Who logChange says asked, when the request says nothing it can check.
const (
	byUnsigned     = "(unsigned)"      // an older meshctl, the nats CLI
	byBadSignature = "(bad signature)" // not the request that was signed
	byUnrecorded   = "(unrecorded key)"
)

// byOutOfTime is said of a request signed too far from this node's clock.
var byOutOfTime = fmt.Sprintf("(signed more than %d minutes off this node's clock)", int(api.MaxOperatorSigSkew/time.Minute))

// checkSignature checks the operator's signature of m: it returns the key that
// signed it, and "" when it is to be named (standingOfKey), or what to say instead.
func (d *Daemon) checkSignature(op string, m *nats.Msg) (key, instead string) {
	v := m.Header.Get(api.OperatorSigHeader)
	if v == "" {
		return "", byUnsigned
	}
	key, at, sig, ok := api.ParseOperatorSig(v)
	if !ok || !nkeys.IsValidPublicUserKey(key) {
		return "", byBadSignature
	}
	kp, _ := nkeys.FromPublicKey(key)
	if kp.Verify(api.OperatorSigned(op, at, m.Header.Get(api.RequestHeader), m.Data), sig) != nil {
		return key, byBadSignature
	}
	// A signature made long ago may be a copy: its signer is not named. (A
	// sending held back by an election, or a clock that is off, says so too.)
	if skew := d.now().Sub(time.Unix(at, 0)); skew < -api.MaxOperatorSigSkew || skew > api.MaxOperatorSigSkew {
		return key, byOutOfTime
	}
	return key, ""
}

// judgeSigner says who signed a change (what logChange names) and refuses it, as
// it is about to run, when its signer may not change anything: credentials no
// longer valid (standingOfKey), whatever the signature's time; a signature that
// does not verify; and with RequireSignedChanges, none, or one made too far from
// this node's clock. signed is checkSignature's word instead of the key's name.
func (d *Daemon) judgeSigner(key, signed string) (by string, err error) {
	term := d.raft.Status().Term
	if !d.changePending.Load() && term != d.currentTerm.Load() {
		// Leading in another term than the one whose barrier this node applied
		// (it stepped down and led again while the change waited its turn, or
		// it led from the start): what the terms between committed, a
		// revocation maybe, is applied first. A quorum that cannot write is
		// said at once, as commit says it, not after the barrier's wait.
		if why := d.noWritableQuorum(d.now()); why != "" {
			return signed, errors.Join(errNotDone, &api.Error{Code: api.CodeUnavailable, Message: "nothing can be committed now, and nothing was: " + why +
				"; free space under their data directories, or mend the disk that does not answer (meshctl control status names them), then run the command again"})
		}
		if err := d.raft.BarrierWithin(commitTimeout); err != nil {
			return signed, errors.Join(errNotDone, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
				"control node %s could not apply what was committed before this change (%v): nothing was done; run it again", d.cfg.Node, err)})
		}
		d.currentTerm.Store(term)
	}
	if d.changePending.Load() {
		// A change under this lock whose commit was left pending (a log write
		// that did not return) may be a revocation: applied after the judgement
		// below, it would let a change it should refuse commit after it (a
		// review). Everything before now is applied first, or nothing is done;
		// the wait is bounded as a commit's (a review: raft's timeout bounds only
		// the barrier's queueing).
		var berr error
		if why := d.noWritableQuorum(d.now()); why != "" {
			berr = errors.New(why)
		} else {
			berr = d.raft.BarrierWithin(commitTimeout)
		}
		if berr != nil {
			return signed, errors.Join(errNotDone, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
				"an earlier change on control node %s is not committed yet (%v): nothing was done; run it again once meshctl control status shows its log can be written", d.cfg.Node, berr)})
		}
		d.changePending.Store(false)
		d.currentTerm.Store(term)
	}
	by = signed
	if key != "" && signed != byBadSignature {
		// The signature verifies: the key is judged even when signed long ago
		// (a revoked key's holder sets the time; a review).
		name, refused := d.standingOfKey(key)
		if signed == "" {
			by = name
		}
		if refused != nil {
			return by, refused
		}
	}
	if refused := d.unsignedRefusal(signed); refused != nil {
		return by, refused
	}
	return by, nil
}

// standingOfKey is the name the mesh records for an operator key that signed a
// change, as the key stands now, and the change's refusal when the key's
// credentials are no longer admitted: revoked, expired, a removed control node's
// (which may only read), or unrecorded where every control node's key is recorded
// (as the login refuses them, authn). Such credentials reach the leader through a
// broker whose state has not applied their revocation (one cut from Raft, its
// routes up), or with a change that waited its turn behind the revocation: each
// broker judges the login by its own state, and the leader by its own (a review:
// the change was carried out and logged as by a revoked key).
func (d *Daemon) standingOfKey(key string) (by string, refused *api.Error) {
	now := d.now()
	by = byUnrecorded
	var whose, why, advice string
	const byName = "ask for new credentials (meshctl operator add NAME, where the operator account key is)"
	const removed = "use credentials by name, or an active control node's admin.creds"
	d.fsm.Read(func(s *state.State) {
		// Named with what the key is now: a revoked key (a leaked file signs as
		// well as ever) or a removed node's is said to be one.
		if o, ok := s.Operators[key]; ok {
			whose = fmt.Sprintf("%s's credentials", o.Name)
			switch {
			case !o.RevokedAt.IsZero():
				by, why, advice = o.Name+" (revoked key)", "were revoked at "+o.RevokedAt.UTC().Format(time.RFC3339), byName
			case !o.Active(now):
				by, why, advice = o.Name+" (expired key)", "expired at "+o.Expires.UTC().Format(time.RFC3339), byName
			default:
				by = o.Name
			}
			return
		}
		if node, ok := s.RevokedOperators[key]; ok {
			by, whose, why, advice = node+" (removed; its admin.creds)", "the admin.creds of "+node, "are a removed control node's, which may only read", removed
			return
		}
		for _, n := range s.ControlNodes {
			switch {
			case n.Operator == key && !n.Removed:
				by = n.ID + " (its admin.creds)"
				return
			case n.Operator == key:
				by, whose, why, advice = n.ID+" (removed; its admin.creds)", "the admin.creds of "+n.ID, "are a removed control node's, which may only read", removed
				return
			}
		}
	})
	switch {
	case by != byUnrecorded:
	case d.fsm.OperatorStanding(key) == state.OperatorUnrecorded:
		whose, why, advice = "the credentials", "are recorded by no name (issued outside meshctl operator add, or after the backup this mesh was restored from)", byName
	case d.opts.RequireSignedChanges:
		// The state admits an unrecorded key while a control node admitted by an
		// older version has none recorded (it cannot tell that node's key from
		// another), and so did this: any key made on the spot signed a change
		// under the flag, a revoked operator's at a lagging broker too (a review).
		whose, why, advice = "the credentials", "are recorded by no name, and this control plane carries out only changes signed by recorded credentials (serve --require-signed-changes; "+
			"a control node admitted by an older version has admin.creds of no recorded key)", byName
	}
	if why == "" {
		return by, nil
	}
	return by, &api.Error{Code: api.CodeCredentialsNotValid, Message: fmt.Sprintf(
		"%s that signed this change (key %s) %s: nothing was done; %s", api.CleanText(whose, 96), key, why, advice)}
}

// unsignedRefusal is the refusal of a change whose signature cannot name who
// made it (what checkSignature said instead of a key): always one that does not
// verify (no meshctl sends such a one: the request was changed since it was
// signed); with RequireSignedChanges, also one not signed, or signed too far from
// this node's clock.
func (d *Daemon) unsignedRefusal(instead string) *api.Error {
	switch {
	case instead == "":
		return nil
	case instead == byBadSignature:
		return &api.Error{Code: api.CodeNotSigned, Message: "the change's signature (" + api.OperatorSigHeader + ") does not verify: the operation, its body or its request id is not what was signed; nothing was done"}
	case !d.opts.RequireSignedChanges:
		return nil
	case instead == byUnsigned:
		return &api.Error{Code: api.CodeNotSigned, Message: "this control plane carries out only changes signed by their credentials' key (serve --require-signed-changes), and this one is not " +
			"(the stock nats CLI, or a meshctl older than the signature): nothing was done; make the change with a current meshctl"}
	case instead == byOutOfTime:
		return &api.Error{Code: api.CodeNotSigned, Message: fmt.Sprintf("the change was signed more than %d minutes off this control node's clock (serve --require-signed-changes): nothing was done; "+
			"set the clock of this machine or of the control node (date -u on each), then run it again", int(api.MaxOperatorSigSkew/time.Minute))}
	}
	return &api.Error{Code: api.CodeNotSigned, Message: "the change's signature cannot be checked (serve --require-signed-changes): nothing was done"}
}

// errNotDone marks an operator request's failure that left nothing done: the
// change never reached the Raft log, and sending it again is safe.
var errNotDone = errors.New("not carried out")

func adminCall[Req any, Res any](op string, data []byte, fn func(Req) (Res, error)) (any, error) {
	var req Req
	if err := api.DecodeAdminRequest(op, data, &req); err != nil {
		return nil, badRequest("%v", err)
	}
	return fn(req)
}

func badRequest(format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// commit applies a command, turning failures into operator-facing errors.
func (d *Daemon) commit(c state.Command) (state.Result, error) {
	if why := d.noWritableQuorum(d.now()); why != "" {
		// Nothing proposed: refused now rather than committed whenever there is
		// room again, long after meshctl gave up on it.
		return state.Result{}, errors.Join(errNotDone, &api.Error{Code: api.CodeUnavailable, Message: "nothing can be committed now, and nothing was: " + why +
			"; free space under their data directories, or mend the disk that does not answer (meshctl control status names them), then run the command again"})
	}
	res, err := d.raft.Apply(c, commitTimeout)
	if err != nil {
		if errors.Is(err, replication.ErrNotAppended) {
			// Said so to meshctl (AdminResponse.NotDone), which sends it again
			// to the control node that leads now.
			return res, errors.Join(errNotDone, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
				"control node %s no longer leads (leadership handed over or changed); nothing was committed: send it again", d.cfg.Node)})
		}
		if errors.Is(err, replication.ErrNotLeader) {
			return res, &api.Error{Code: api.CodeUnavailable, Message: "leadership changed during the request; run it again"}
		}
		if errors.Is(err, replication.ErrCommitPending) {
			// Its handler answers, and no longer holds a slot every operator
			// shares: the change may still be carried out, and the next change's
			// judgement waits for it (judgeSigner).
			d.changePending.Store(true)
			return res, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
				"control node %s took the change up but could not commit it (%v): it may still be carried out: look before running it again (meshctl control status shows whether its log can be written)", d.cfg.Node, err)}
		}
		if errors.Is(err, syscall.ENOSPC) {
			// Raft wrote nothing of the entry, and the leader steps down: waiting
			// for the next one does not help while this disk stays full.
			return res, &api.Error{Code: api.CodeDiskFull, Message: fmt.Sprintf(
				"control node %s could not write its Raft log: its disk is full (%v); nothing was committed: free space under %s, then run the command again",
				d.cfg.Node, err, d.opts.Dir)}
		}
		return res, &api.Error{Code: api.CodeUnavailable, Message: err.Error()}
	}
	return res, nil
}

func (d *Daemon) createToken(req api.TokenCreateRequest) (api.TokenCreateResult, error) {
	var out api.TokenCreateResult
	if err := tokenfmt.CheckNodeID(req.Node); err != nil {
		return out, badRequest("%v", err)
	}
	if _, err := tokenfmt.ParseRole(req.Role); err != nil {
		return out, badRequest("%v", err)
	}
	if b, err := hex.DecodeString(req.ID); err != nil || len(b) != 32 || hex.EncodeToString(b) != req.ID {
		// Every reader of the id (an enrolment's proof, token list and cancel)
		// takes it in lowercase: one recorded in another case was pending for
		// good, of no use, and kept every later token for the node out.
		return out, badRequest("token id is not a hash of 64 lowercase hex digits")
	}
	// Enrolling clients prove the secret with this key rather than send it
	// (decision 0018); a token without it would be refused to every current host.
	if b, err := hex.DecodeString(req.ProofKey); err != nil || len(b) != tokenfmt.ProofKeySize {
		return out, badRequest("the token's proof key is missing or not 64 hex digits: this meshctl is older than the control plane; upgrade it and mint again")
	}
	ttl := time.Duration(req.TTL)
	if ttl <= 0 || ttl > tokenfmt.MaxTTL {
		return out, badRequest("ttl %s is outside (0, %s]: a long-lived token is a long-lived root credential", ttl, tokenfmt.MaxTTL)
	}
	if err := validateValuedLabels(req.Labels, "a token gives its node labels with their values (`meshctl label NODE k=` removes one); nothing was minted"); err != nil {
		return out, err
	}
	cmd := &state.CreateTokenCmd{ID: req.ID, ProofKey: strings.ToLower(req.ProofKey), Node: req.Node, Role: req.Role, Labels: req.Labels, TTL: ttl}
	if req.Role == state.RoleControl {
		if req.Control == nil || len(req.Sealed) == 0 {
			return out, badRequest("a control token needs its addresses and a sealed identity: mint it with meshctl token --role control on the machine holding the CA key")
		}
		for _, a := range []string{req.Control.Broker, req.Control.Raft, req.Control.Cluster} {
			if err := tokenfmt.CheckAddress(a); err != nil {
				// meshctl writes them so (bootstrap.CheckAddresses); by hand, one
				// written otherwise passed the check of addresses taken, and a zone
				// reached every later token's broker list, which no token takes.
				return out, badRequest("control %v: mint the control token with meshctl token --role control", err)
			}
		}
		if name := d.operatorNamed(req.Node); name != "" {
			return out, badRequest("%q is the name of operator credentials the mesh records, valid, expired or revoked (meshctl operator list; a revoked record stays until 90 days after its credentials expire): a control node under it would read as that person in the broker's listings and logs; give the control node another id", name)
		}
		if taken := d.controlAddressesTaken(req.Node, req.Control); taken != "" {
			return out, badRequest("the new control node's %s: it would listen where another control node does; give it addresses of its own (--addr, and the two ports after its port)", taken)
		}
		if err := d.checkControlClaim(req); err != nil {
			return out, err
		}
		cmd.Control = &state.ControlAddrs{Broker: req.Control.Broker, Raft: req.Control.Raft, Cluster: req.Control.Cluster,
			Pin: req.Control.Pin, Operator: req.Control.Operator}
		sealedTo, sum, err := d.sealToControlNodes(req.Sealed)
		if err != nil {
			return out, err
		}
		if older := d.ctl.olderRules(d.cfg.Node, d.now(), state.RulesSealedTo); len(older) > 0 {
			// A control node of an older version refuses to record the identity sealed
			// to the control nodes, and then the node the token admits: its state would
			// part from the others' for good, silently.
			return out, &api.Error{Code: api.CodeOlderControlNode, Message: fmt.Sprintf(
				"%s an older meshctl, which would record neither this control token nor the node it admits: upgrade every control node, then mint the control token again",
				controlNodesRun(older))}
		} else {
			cmd.SealedTo, cmd.SealedSum = sealedTo, sum
		}
	} else if req.Control != nil || len(req.Sealed) > 0 {
		return out, badRequest("only control tokens carry addresses and a sealed identity")
	}
	c := state.Command{Op: state.OpCreateToken, CreateToken: cmd, Rules: d.tokenRules()}
	switch {
	case c.Rules == 0 && req.Replace:
		return out, &api.Error{Code: api.CodeOlderControlNode, Message: fmt.Sprintf(
			"%s an older meshctl (by its last heartbeat, or it was never heard from), and an older one does not replace tokens: upgrade every control node, or cancel the pending token (meshctl token cancel %s) and mint again without --replace",
			controlNodesRun(d.notOnRules(state.RulesTokensFollowNodes)), req.Node)}
	case c.Rules == 0 && len(cmd.SealedTo) > 0:
		c.Rules = state.RulesSealedTo
	}
	cmd.Replace = req.Replace
	res, err := d.commit(c)
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, state.ErrBadCommand) {
			// The id of a token minted before, asked for with other terms or after
			// its use: the caller's fault, not the control plane's.
			return out, badRequest("%v: a token id is the hash of a new secret; mint a new token", res.Err)
		}
		return out, refusal(res.Err)
	}
	d.fsm.Read(func(s *state.State) {
		out.SigningKey = s.Keyring.Keys[len(s.Keyring.Keys)-1]
		out.Brokers = s.Brokers()
	})
	if res.Token.SigningKey != "" {
		// The key recorded with the token: what token list judges it by, even if
		// a rotation committed since.
		out.SigningKey = res.Token.SigningKey
	}
	out.Mesh = d.cfg.Mesh
	out.CAPin = d.cfg.CAPin
	out.Expiry = res.Token.Expiry
	for i := range res.Tokens {
		out.Replaced = append(out.Replaced, tokenView(&res.Tokens[i], state.TokenCancelled))
	}
	if res.Repeated {
		d.log.Info("token request repeated; answered with the token minted for it", "node", req.Node, "role", req.Role, "expiry", out.Expiry)
		return out, nil
	}
	for i := range res.Tokens {
		t := &res.Tokens[i]
		d.log.Info("token cancelled: replaced", "node", t.Node, "token", t.ShortID())
	}
	d.log.Info("token minted", "node", req.Node, "role", req.Role, "expiry", out.Expiry)
	return out, nil
}

// controlAddressesTaken names the first of a control token's addresses that a
// member of the control plane (not removed, not the node itself) listens on already
// ("127.0.0.1:7300 is cp-1's broker address"), or that another node's pending control
// token names, or "": a machine joined with it would fail to bind, or, on another
// machine behind the same address, take the member's traffic, and the token would
// stay pending until cancelled. Two tokens minted for the same addresses, the second
// join was admitted, handed the keys, and failed at Raft ("duplicate address") at
// every rerun it was told to make (a docs walkthrough).
func (d *Daemon) controlAddressesTaken(node string, c *api.ControlMember) string {
	// used names the first of c's addresses among another's, which of the new
	// node's it is, and which it is there: the Raft and cluster addresses are
	// derived from --addr unless given, and "18300 is cp-1's broker address" for
	// --addr 127.0.0.1:18299 left the operator to guess (a walkthrough).
	used := func(broker, raft, cluster string) (addr, mine, what string) {
		for _, a := range []struct{ addr, what string }{
			{c.Broker, "broker address (--addr)"},
			{c.Raft, "Raft address (--raft-addr; by default --addr's port + 1)"},
			{c.Cluster, "cluster address (--cluster-addr; by default --addr's port + 2)"},
		} {
			for _, u := range []struct{ what, addr string }{{"broker", broker}, {"Raft", raft}, {"cluster", cluster}} {
				if a.addr == u.addr {
					return a.addr, a.what, u.what
				}
			}
		}
		return "", "", ""
	}
	taken := ""
	now := d.now()
	d.fsm.Read(func(s *state.State) {
		for _, id := range slices.Sorted(maps.Keys(s.ControlNodes)) {
			m := s.ControlNodes[id]
			if m.Removed || id == node {
				continue
			}
			if a, mine, what := used(m.Broker, m.Raft, m.Cluster); a != "" {
				taken = fmt.Sprintf("%s, %s, is %s's %s address", mine, a, id, what)
				return
			}
		}
		var pending []*state.Token
		for _, t := range s.Tokens {
			if t.Role == state.RoleControl && t.Control != nil && t.Node != node && t.StateAt(now) == state.TokenPending && !t.IdentityLost() {
				pending = append(pending, t)
			}
		}
		slices.SortFunc(pending, func(a, b *state.Token) int { return strings.Compare(a.Node, b.Node) })
		for _, t := range pending {
			if a, mine, what := used(t.Control.Broker, t.Control.Raft, t.Control.Cluster); a != "" {
				taken = fmt.Sprintf("%s, %s, is the %s address of %s's pending control token %s (meshctl token cancel %s cancels it)", mine, a, what, t.Node, t.ShortID(), t.Node)
				return
			}
		}
	})
	return taken
}

// rulesFor returns need, a revision of the rules of the log (state.ApplyRules), when
// every other member of Raft is known to apply the log by it or later ones, and 0
// otherwise: a command stamped with it stops a node on older rules (decision 0021),
// so while one may run, during an upgrade, the command is proposed unstamped and
// applies by the rules every node has.
func (d *Daemon) rulesFor(need int) int {
	if len(d.notOnRules(need)) > 0 {
		return 0
	}
	return need
}

// controlNodesRun names the control nodes as the subject of "run": "control node
// cp-2 runs", "control nodes cp-2, cp-3 run".
func controlNodesRun(nodes []string) string {
	if len(nodes) == 1 {
		return "control node " + nodes[0] + " runs"
	}
	return "control nodes " + strings.Join(nodes, ", ") + " run"
}

// tokenRules is the newest revision of the token rules that every control node
// applies: RulesPendingByRecord; RulesTokensFollowNodes while a node of the version
// that brought those runs (an upgrade from it); 0, the earlier rules, while an older
// one may run. A mint or a revocation is stamped with it.
func (d *Daemon) tokenRules() int {
	if r := d.rulesFor(state.RulesPendingByRecord); r != 0 {
		return r
	}
	return d.rulesFor(state.RulesTokensFollowNodes)
}

// notOnRules returns, sorted, the control nodes other than this one that are not
// known to apply the log by rules need or later: those serving that announce older
// rules, and the members of Raft whose last heartbeat did, or that this node never
// heard (a leader that just started, a member admitted since). A member not heard
// lately counts by its last heartbeat: a node stopped for maintenance, killed, or
// cut off comes back on the version it ran, or a newer one. Counting it as older, as
// this did until 2026-12-05, lifted the token and label rules (a second pending
// token, labels on a revoked node, a revocation deleting a replacement's token)
// without a word whenever one control node was down, an ordinary day. A node put
// back to an older version meanwhile stops at the first entry stamped with rules it
// lacks (decision 0021) until the newer meshctl is back.
//
// None is, whatever the heartbeats say, once the state was built by need or later
// (State.Rules): a node on older rules stopped at that entry already, and a joiner's
// rules were checked against the state's as it was admitted (checkJoinerRules).
// Counting a member never heard as older lifted the token rules, request ids and
// the label cap while a control node was joined and not yet serving, or was down
// as the leader started (a review: two pending tokens for one node).
func (d *Daemon) notOnRules(need int) []string {
	var built int
	d.fsm.Read(func(s *state.State) { built = s.Rules })
	if need <= built {
		return nil
	}
	out := d.ctl.olderRules(d.cfg.Node, d.now(), need)
	members, err := d.raft.Members()
	if err != nil {
		return append(out, "(the Raft configuration: "+err.Error()+")")
	}
	for _, m := range members {
		if m.ID == d.cfg.Node || slices.Contains(out, m.ID) {
			continue
		}
		if r, heard := d.ctl.lastRules(m.ID); !heard || r < need {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out
}

// requestCall is how a change was asked for: under which request id
// (api.RequestHeader; none from an older meshctl), and whether it is sent again.
type requestCall struct {
	ID    string
	Again bool
}

// declareCall decodes a declaration's request, its id and whether it is sent
// again, and carries it out; dryRun says it asked for a dry run.
func (d *Daemon) declareCall(m *nats.Msg) (result any, dryRun bool, err error) {
	var req api.DeclareRequest
	again, err := api.DecodeAdminCall(api.OpDeclare, m.Data, &req)
	if err != nil {
		return nil, false, badRequest("%v", err)
	}
	call := requestCall{Again: again}
	if m.Header != nil {
		call.ID = m.Header.Get(api.RequestHeader)
	}
	if call.ID != "" {
		if err := api.CheckRequestID(call.ID); err != nil {
			return nil, req.DryRun, badRequest("header %s: %v", api.RequestHeader, err)
		}
	} else if again {
		return nil, req.DryRun, badRequest("a change sent again needs the request id of its first sending (header %s)", api.RequestHeader)
	}
	result, err = d.declare(req, call)
	return result, req.DryRun, err
}

// envelopeRoom is what a declaration's envelope holds besides its base64 payload
// (its header and signatures), kept free within the hosts' cap.
const envelopeRoom = 4096

func (d *Daemon) declare(req api.DeclareRequest, call requestCall) (api.DeclareResult, error) {
	var out api.DeclareResult
	start := time.Now()
	body, err := declarations.ParseBody(req.Body)
	if err != nil {
		return out, badRequest("the declaration body is invalid: %v", err)
	}
	canonical, err := json.Marshal(body)
	if err != nil {
		return out, err
	}
	// The envelope base64-encodes the payload: keep well inside the host's cap.
	if est := len(canonical)*4/3 + envelopeRoom; est > declarations.MaxEnvelopeSize {
		// Said with what fits: "785063 bytes would exceed the 1048576 byte cap"
		// read as a contradiction (a walkthrough).
		fits := (declarations.MaxEnvelopeSize - envelopeRoom) * 3 / 4
		return out, badRequest("the declaration body is %d bytes; signed, its payload travels in base64 and the envelope would be about %d bytes, over the %d byte cap hosts accept: "+
			"at most %d bytes of body fit (as JSON, content_base64 counted as written), so make it %d bytes smaller, or split it (by label) or ship large files another way",
			len(canonical), est, declarations.MaxEnvelopeSize, fits, len(canonical)-fits)
	}
	sel := state.Selector{Nodes: req.Nodes, Role: req.Role, Labels: req.Labels, All: req.All}
	if sel.Empty() {
		return out, badRequest("say which nodes the declaration is for: --node, --role, --label or --all")
	}
	for _, n := range req.Nodes {
		if err := tokenfmt.CheckNodeID(n); err != nil {
			return out, badRequest("%v", err)
		}
	}
	var (
		unknown, spent []string
		notHosts       *api.Error
		reaches        bool
		done           *state.RequestRecord
		revoked        []string // the nodes named that are revoked, with when
	)
	d.fsm.Read(func(s *state.State) {
		if r, ok := s.Requests[call.ID]; ok && call.ID != "" {
			done = &r
		}
		var forgotten []string
		for _, n := range req.Nodes {
			_, kept := s.Nodes[n]
			_, gone := s.Forgotten[n]
			cn, control := s.ControlNodes[n]
			switch {
			case gone && !kept && !(control && !cn.Removed):
				// Skipped, as a revoked node is, whose record this was: a
				// list an automation declares to each day did not stop
				// reaching its live nodes the day one record was forgotten.
				forgotten = append(forgotten, n)
			case !kept:
				unknown = append(unknown, n)
			case s.Nodes[n].Revoked:
				revoked = append(revoked, n+" (at "+s.Nodes[n].RevokedAt.UTC().Format(time.RFC3339)+")")
			}
		}
		notHosts = notAHost(s, unknown, "declarations")
		reaches = s.Reaches(sel)
		spent = s.OutOfVersions(sel)
		if !reaches && notHosts == nil && len(unknown) == 0 && len(forgotten) > 0 {
			notHosts = notAHost(s, forgotten, "declarations")
		}
	})
	if done != nil && !req.DryRun {
		// Carried out by an earlier sending whose answer was lost: whatever
		// happened since (a target revoked, another declaration) does not undo it.
		return d.declaredAlready(sel, call.ID, done, canonical)
	}
	// After the record of a sending carried out (by a leader of a version that
	// took it): its answer is what was done. Anything else selecting by an
	// empty value is refused before it reaches the log.
	if err := validateValuedLabels(req.Labels, "a declaration selects nodes by a label's value, and an empty one would select every node without the label, replacing their files; nothing was declared"); err != nil {
		return out, err
	}
	if notHosts != nil {
		return out, notHosts
	}
	if len(unknown) > 0 {
		return out, &api.Error{Code: api.CodeNotFound, Message: "no such node: " + strings.Join(unknown, ", ") + " (meshctl nodes lists the enrolled ones); nothing was declared"}
	}
	if len(spent) > 0 {
		// The state machine would wrap the count around; its host would refuse
		// v0 for good while `declare --wait` counted it converged.
		return out, &api.Error{Code: api.CodeOutOfVersions, Message: strings.Join(spent, ", ") + ": " + state.ErrOutOfVersions.Error()}
	}
	if !reaches {
		// Refused here rather than by the state machine: the refusal would otherwise
		// be a Raft entry of its own, written and replicated for nothing. The state
		// machine still refuses it should the last target be revoked meanwhile.
		// Said with where to look: a label no node carries (a newcomer's audit: the
		// guide's own example) said nothing more.
		e := refusal(state.ErrNoTargets)
		// Said with the reason where the selection tells it (a walkthrough: a
		// revoked --node, or --role control, was told about labels).
		var why []string
		if len(revoked) > 0 {
			why = append(why, "revoked: "+strings.Join(revoked, ", ")+"; a revoked node takes no declarations: to manage its machine again, enrol it anew (meshctl token --node ID, then meshhost enrol there)")
		}
		if req.Role == state.RoleControl {
			why = append(why, "--role control: control nodes take no declarations (they sign and serve them); the hosts are --role worker")
		}
		if len(why) > 0 {
			e.Message += ": " + strings.Join(why, "; ") + "; nothing was declared"
			return out, e
		}
		e.Message += ": meshctl nodes lists the nodes with their role and labels; meshctl label NODE k=v gives one a label, meshctl token --label k=v a node to come; nothing was declared"
		return out, e
	}
	if req.DryRun {
		return d.declarePlan(sel, body, canonical)
	}
	cmd := state.Command{Op: state.OpDeclare, Declare: &state.DeclareCmd{Selector: sel, Body: canonical}}
	if call.ID != "" {
		if cmd.Rules = d.rulesFor(state.RulesRequests); cmd.Rules != 0 {
			cmd.Request = call.ID
		} else if call.Again {
			// The first sending was proposed without its id, or to a control
			// plane that keeps none: whether it was carried out cannot be told.
			return out, &api.Error{Code: api.CodeUnavailable, Message: fmt.Sprintf(
				"this declaration was sent as one that may repeat an earlier sending (its answer lost, or the same --request-id given again), and whether that was carried out cannot be told while %s an older meshctl (or was never heard from): nothing was declared now; look (meshctl nodes) before running it again",
				controlNodesRun(d.notOnRules(state.RulesRequests)))}
		}
	}
	res, err := d.commit(cmd)
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		return out, refusal(res.Err)
	}
	if res.Repeated && res.Request != nil {
		// The first sending reached the log too, after this one was checked.
		return d.declaredAlready(sel, call.ID, res.Request, canonical)
	}
	nodes := make([]string, 0, len(res.Assignments))
	for _, a := range res.Assignments {
		out.Assignments = append(out.Assignments, api.Assignment{Node: a.Node, Version: a.Version})
		nodes = append(nodes, a.Node)
	}
	out.Skipped = res.Skipped
	out.Body = state.BodyDigest(canonical)
	d.publishDeclarations(nodes)
	d.sent.note(call.ID, d.now())
	d.metrics.declarations.Add(float64(len(nodes)))
	d.metrics.fanout.Observe(time.Since(start).Seconds())
	// What an audit asks of the log: what was declared, to whom, under which
	// request; the node ids themselves only when few (a fleet's would be a line
	// of 10,000 names).
	d.log.Info("declaration committed and sent", append(declaredAttrs(sel, out.Body, call.ID, res.Assignments), "skipped", len(res.Skipped))...)
	return out, nil
}

// declaredAttrs are a declaration's log attributes: its selector, body, request
// id, the versions it declared, and the nodes when there are at most a few.
func declaredAttrs(sel state.Selector, body, request string, as []state.Assignment) []any {
	attrs := []any{"selector", selectorText(sel), "body", body[:min(12, len(body))], "nodes", len(as)}
	if request != "" {
		attrs = append(attrs, "request_id", request)
	}
	if len(as) > 0 {
		lo, hi := as[0].Version, as[0].Version
		for _, a := range as {
			lo, hi = min(lo, a.Version), max(hi, a.Version)
		}
		attrs = append(attrs, "versions", fmt.Sprintf("v%d..v%d", lo, hi))
	}
	if len(as) <= 5 {
		ids := make([]string, len(as))
		for i, a := range as {
			ids[i] = a.Node
		}
		attrs = append(attrs, "targets", strings.Join(ids, ","))
	}
	return attrs
}

// selectorText is a selector as declare's flags say it: --all, --role R, --label
// k=v, or the nodes named.
func selectorText(sel state.Selector) string {
	var parts []string
	if sel.All {
		parts = append(parts, "--all")
	}
	if sel.Role != "" {
		parts = append(parts, "--role "+sel.Role)
	}
	for _, k := range slices.Sorted(maps.Keys(sel.Labels)) {
		parts = append(parts, "--label "+k+"="+sel.Labels[k])
	}
	if len(sel.Nodes) > 0 {
		parts = append(parts, "--node "+strings.Join(sel.Nodes[:min(5, len(sel.Nodes))], ","))
		if len(sel.Nodes) > 5 {
			parts[len(parts)-1] += fmt.Sprintf(",… (%d in all)", len(sel.Nodes))
		}
	}
	return strings.Join(parts, " ")
}

// declaredAlready answers a declaration an earlier sending of the same request
// carried out (r): the nodes of sel declared with its body now, at the versions they
// hold, and those enrolled before it that no longer are (declared another body, or
// revoked, since): left out without a word, a script's rerun saw fewer nodes than
// its first run declared, and its --wait exited 0 where the first run's said
// "declared another body since" (a review). They are sent their declarations again,
// unless this node sent them (the first answer was slow, not lost): the leader that carried it out may have stopped
// before it sent them, and then once: a request sent again and again is not a
// fleet's declarations signed and sent each time.
//
// A sending whose body or selector is not the one recorded under its id is
// refused: the id names another change (a script that reuses its ids), which
// answered as carried out would be a declaration the operator believes made and
// nobody made.
func (d *Daemon) declaredAlready(sel state.Selector, id string, r *state.RequestRecord, canonical []byte) (api.DeclareResult, error) {
	if r.Op != state.OpDeclare || r.Body != state.BodyDigest(canonical) || r.Selector != "" && r.Selector != sel.Digest() {
		return api.DeclareResult{}, badRequest("request id %s names another change, carried out within the hour (%s): a change sent again is sent unchanged; send a new one under a new id (meshctl makes one for each run without --request-id)", id, r.Op)
	}
	out := api.DeclareResult{Body: r.Body, Repeated: true}
	var nodes []string
	d.fsm.Read(func(s *state.State) {
		for _, node := range s.SelectWithRevoked(sel) {
			n := s.Nodes[node]
			switch {
			case n != nil && n.EnrolledAt.After(r.At) && n.EarlierRevokedAt.After(r.At) && !n.EarlierEnrolledAt.IsZero() && !n.EarlierEnrolledAt.After(r.At):
				// The machine the request reached was revoked since, and another
				// enrolled under the id: as revoked (the first run's wait saw the
				// id declared another body).
				out.NoLonger = append(out.NoLonger, api.TargetProgress{Node: node, State: api.ProgressRevoked, RevokedAt: n.EarlierRevokedAt})
			case n == nil || n.EnrolledAt.After(r.At):
				// Unknown, or enrolled since: not among the request's nodes.
			case n.Revoked && n.RevokedAt.After(r.At):
				out.NoLonger = append(out.NoLonger, api.TargetProgress{Node: node, State: api.ProgressRevoked, RevokedAt: n.RevokedAt})
			case n.Revoked:
			case n.Declared.BodyDigest == r.Body:
				out.Assignments = append(out.Assignments, api.Assignment{Node: node, Version: n.Declared.Version})
				nodes = append(nodes, node)
			case n.Declared.IssuedAt.After(r.At):
				out.NoLonger = append(out.NoLonger, api.TargetProgress{Node: node, State: api.ProgressSuperseded, Version: n.Declared.Version})
			}
		}
	})
	if out.Assignments == nil {
		out.Assignments = []api.Assignment{}
	}
	if !d.sent.has(id) {
		d.publishDeclarations(nodes)
		d.sent.note(id, d.now())
	}
	d.log.Info("declaration sent again by its operator: carried out already", "nodes", len(nodes))
	return out, nil
}

// sentRequests remembers, on the node that carried them out, the requests whose
// declarations it sent: a request sent again only because its answer was slow need
// not have a fleet's declarations sent twice (the hosts would verify each again).
type sentRequests struct {
	mu  sync.Mutex
	ids map[string]time.Time
}

// note records id as sent at now, and forgets what no meshctl sends again.
func (s *sentRequests) note(id string, now time.Time) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	for old, at := range s.ids {
		if now.Sub(at) > api.MaxResend {
			delete(s.ids, old)
		}
	}
	s.ids[id] = now
}

func (s *sentRequests) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

// progress tells `declare --wait` where its targets stand: a few bytes a node,
// where the roster would send each node's whole view.
func (d *Daemon) progress(req api.ProgressRequest) (api.ProgressResult, error) {
	if len(req.Targets) > api.MaxNodesPage {
		return api.ProgressResult{}, badRequest("%d targets in one request; at most %d", len(req.Targets), api.MaxNodesPage)
	}
	now := d.now()
	out := api.ProgressResult{Others: []api.TargetProgress{}}
	var at []int // each of out.Others' index in req.Targets
	d.fsm.Read(func(s *state.State) {
		for i, t := range req.Targets {
			p := api.TargetProgress{Node: t.Node, State: api.ProgressOffline}
			if n, ok := s.Nodes[t.Node]; ok && req.Body != "" && n.Declared.Version > t.Version && n.Declared.BodyDigest != req.Body {
				// Another operator's declaration since: the node is to hold that
				// body, not this one, whatever it applied (a version later than this
				// one was counted converged on it, its body gone).
				p.State, p.Version = api.ProgressSuperseded, n.Declared.Version
			} else if ok {
				a := n.Applied
				p.State = standing(a, t.Version, d.alive(n, now))
				since, shared := d.keyShared(n.PublicKey, now)
				shared = shared && !n.Revoked
				if shared {
					// As status has it: two machines' reports overwrite each
					// other, and neither converges by waiting (sharedkey.go).
					p.State = api.ProgressFailed
				}
				switch {
				case p.State == "":
					out.Converged++
					continue
				case shared:
					p.Error = d.keySharedError(n, since, now)
				case p.State == api.ProgressFailed:
					p.Error = &api.StatusError{Code: a.ErrorCode, Message: a.ErrorMessage, Version: a.ErrorVersion, RetryAt: a.ErrorRetryAt}
				case n.Revoked:
					// Not offline for a while: waiting on it is waiting for nothing.
					p.State, p.RevokedAt = api.ProgressRevoked, n.RevokedAt
				}
			}
			out.Others = append(out.Others, p)
			at = append(at, i)
		}
	})
	fitProgress(&out, at, len(req.Targets), d.answerBudget())
	return out, nil
}

// fitProgress cuts out, the answer for targets targets, to budget bytes of JSON:
// it then answers for the targets before the first of out.Others left out, and
// Left counts the rest, which meshctl asks about again. at holds the index of each
// of out.Others among the targets.
func fitProgress(out *api.ProgressResult, at []int, targets, budget int) {
	head := jsonSize(api.ProgressResult{Converged: targets, Others: []api.TargetProgress{}, Left: targets})
	keep := fitInto(out.Others, budget-head)
	if keep == len(out.Others) {
		return
	}
	// Every target before the cut that is not among the others kept converged.
	cut := at[keep]
	out.Others = out.Others[:keep]
	out.Converged, out.Left = cut-keep, targets-cut
}

// standing is where a node whose last report is a stands against version v of its
// declarations: "" once it converged on it, else api.ProgressFailed,
// ProgressPending or ProgressOffline. A node whose hook failed (hook_failed, its
// files applied) has failed, whatever version the failure was reported for, until
// it reports the hook run again with success; one whose hooks still run is pending.
func standing(a state.Applied, v uint64, alive bool) string {
	hookFailed := a.ErrorCode == api.StatusHookFailed
	switch {
	case convergedOn(a, v):
		return ""
	case hookFailed && !a.HooksRunning && appliedAtLeast(a, v),
		notSaved(a) && appliedAtLeast(a, v),
		!hookFailed && a.ErrorCode != "" && a.ErrorVersion >= v:
		return api.ProgressFailed
	case alive:
		return api.ProgressPending
	}
	return api.ProgressOffline
}

// appliedAtLeast reports whether a node whose last report is a applied version v
// of its declarations or a later one. A node that refused the version it holds as
// replayed holds it with another body than the one declared: the control plane
// signed that version twice (it was restored from a backup older than its last
// declarations), and the count alone would call the node converged on what it
// never applied.
func appliedAtLeast(a state.Applied, v uint64) bool {
	if !a.HaveApplied || a.Version < v {
		return false
	}
	replayed := a.ErrorCode == declarations.Code(declarations.ErrReplayed) && a.ErrorVersion == a.Version
	return a.Version > v || !replayed
}

// convergedOn reports whether a node whose last report is a has converged on
// version v of its declarations: applied it or a later one, and the hooks of what
// it applied ran and none failed. A host whose service restart failed after the
// files were written is failing, not converged: the operator rolling a change out
// must hear of it (`meshhost hooks retry`, a restart of the agent or a declaration
// runs the failed hooks again, and their success clears it).
func convergedOn(a state.Applied, v uint64) bool {
	return appliedAtLeast(a, v) && !a.HooksRunning && a.ErrorCode != api.StatusHookFailed && !putBackFailing(a) && !notSaved(a)
}

// notSaved reports whether the node's agent could not persist the state it applied
// (state_not_saved, tried again at each heartbeat and cleared once a save works).
// The files are in place, but a host whose state directory was removed under its
// agent does not start again, and one whose disk is full applies everything again
// at its next start: counted converged, `status` and `declare --wait` said nothing
// of either (a host-side operations audit). The report's version is the one it
// first failed to save at, not always the one applied, so none is compared.
func notSaved(a state.Applied) bool {
	return a.HaveApplied && a.ErrorCode == api.StatusStateNotSaved
}

// putBackFailing reports whether the node's agent could not put back the files of
// the declaration it applied (a file check found them changed on the host, and
// writing them failed): the host's files are not what was declared, though the
// version was applied. Counted converged, it left `status` and the metrics quiet
// while `nodes` showed apply_failed (a host-side operations audit).
func putBackFailing(a state.Applied) bool {
	return a.HaveApplied && a.ErrorCode == api.StatusApplyFailed && a.ErrorVersion == a.Version
}

func (d *Daemon) nodes(req api.NodesRequest) (api.NodesResult, error) {
	now := d.now()
	limit := req.Limit
	if limit <= 0 || limit > api.MaxNodesPage {
		limit = api.MaxNodesPage
	}
	var want map[string]bool
	if len(req.Nodes) > 0 {
		want = make(map[string]bool, len(req.Nodes))
		for _, id := range req.Nodes {
			want[id] = true
		}
	}
	out := api.NodesResult{Mesh: d.cfg.Mesh, AnsweredBy: d.cfg.Node, At: now.UTC(), SharedKeyGrace: api.Duration(d.opts.SharedKeyGrace)}
	// The bodies of the page's nodes whose verdict the signer does not know yet,
	// judged after the lock is let go: a parse is 32 µs for a 4 KiB body and
	// 1.8 ms for 512 KiB, and Raft's apply waits on the lock.
	var unjudged map[string][]byte
	var judged []int // the page's nodes, by index, whose body the signer must sign again
	d.fsm.Read(func(s *state.State) {
		out.KeyringEpoch = s.Keyring.Epoch
		oldest := s.OldestKeptKeyring()
		out.Control = d.controlViews(s, now)
		ids := make([]string, 0, len(s.Nodes))
		for id := range s.Nodes {
			if id > req.After && (want == nil || want[id]) {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		if len(ids) > limit {
			ids = ids[:limit]
			out.Next = ids[limit-1]
		}
		for _, id := range ids {
			n := s.Nodes[id]
			out.Nodes = append(out.Nodes, d.view(n, now, oldest))
			if digest := n.Declared.BodyDigest; !n.Revoked && s.Bodies[digest] != nil {
				judged = append(judged, len(out.Nodes)-1)
				if _, known := d.signer.verdict(digest); !known {
					if unjudged == nil {
						unjudged = map[string][]byte{}
					}
					unjudged[digest] = s.Bodies[digest]
				}
			}
		}
	})
	d.signer.signable(unjudged)
	for _, i := range judged {
		if refused, _ := d.signer.verdict(out.Nodes[i].DeclaredBody); refused != nil {
			unsignable(&out.Nodes[i], refused)
		}
	}
	fitPage(&out, d.answerBudget())
	return out, nil
}

// fitPage cuts a page of the roster to budget bytes of JSON, and points Next at
// its last node when it did. It runs outside the state's lock: the views are
// copies.
func fitPage(out *api.NodesResult, budget int) {
	nodes := out.Nodes
	out.Nodes = nil
	head := jsonSize(out)
	out.Nodes = nodes
	if keep := fitInto(nodes, budget-head); keep < len(nodes) {
		out.Nodes, out.Next = nodes[:keep], nodes[keep-1].ID
	}
}

// unsignable marks v failing for a declared body this version cannot sign again
// (refused, the signer's verdict): declared by an older meshctl whose rules took
// it, the node's copy is never re-signed and goes stale, and it was shown
// converged. Failing, until declared again.
func unsignable(v *api.NodeView, refused error) {
	v.Converged = false
	v.LastError = &api.StatusError{Code: api.UnsignableBody, Version: v.Declared, Message: api.CleanText(fmt.Sprintf(
		"the control plane cannot sign v%d again, declared by an older meshctl whose rules took its body: %v; declare the node again with a body this meshctl takes", v.Declared, refused), api.MaxStatusMessageLen)}
}

// keyringGone marks v failing for a keyring epoch the chain of keyrings the mesh
// keeps no longer reaches (state.PastKeyringHistory): the node refuses all the mesh
// sends it from now on, and said only "untrusted".
func keyringGone(v *api.NodeView, oldest uint64) {
	v.Converged = false
	v.LastError = &api.StatusError{Code: api.KeyringGone, Version: v.Declared, Message: fmt.Sprintf(
		"the node holds keyring epoch %d, older than the oldest the mesh keeps (epoch %d: the last %d, 32 rotations), and refused the chain it was sent: it cannot follow the signing keys any more and refuses all the mesh sends it; "+
			"enrol it again: meshctl revoke %s, then on the machine stop meshhost, remove its state directory (or move it away) and enrol with a new token (docs/operations.md, Rotating the declaration signing key)",
		v.KeyringEpoch, oldest, state.MaxKeyringHistory, v.ID)}
}

// view is what operators are shown of node n at now; oldest is the state's
// OldestKeptKeyring.
func (d *Daemon) view(n *state.Node, now time.Time, oldest uint64) api.NodeView {
	v := api.NodeView{
		ID:             n.ID,
		Role:           n.Role,
		Labels:         maps.Clone(n.Labels), // encoded after the lock is let go; a label command changes the map in place
		PublicKey:      n.PublicKey,
		EnrolledAt:     n.EnrolledAt,
		Declared:       n.Declared.Version,
		DeclaredExpiry: n.Declared.ExpiresAt,
		DeclaredBody:   n.Declared.BodyDigest,
		DeclaredAt:     n.Declared.IssuedAt,
		KeyringEpoch:   n.Applied.KeyringEpoch,
		Stale:          n.Applied.Stale,
		RevokedAt:      n.RevokedAt,
		Agent:          n.Applied.Agent,
	}
	if n.Applied.HaveApplied {
		ver := n.Applied.Version
		v.Applied = &ver
		v.Converged = ver == n.Declared.Version && convergedOn(n.Applied, ver)
		v.HooksRunning = n.Applied.HooksRunning
	}
	if n.Applied.ErrorCode != "" {
		v.LastError = &api.StatusError{Code: n.Applied.ErrorCode, Message: n.Applied.ErrorMessage, Version: n.Applied.ErrorVersion,
			RetryAt: n.Applied.ErrorRetryAt}
	}
	if pb, ok := d.seen.putBackOf(n.ID); ok {
		v.PutBack, v.LastPutBackAt = pb.count, pb.at
	}
	if !n.Revoked && d.presence != nil {
		if open := d.presence.Open(n.PublicKey); open > 1 {
			v.Connections = open
			since, past := d.keyShared(n.PublicKey, now)
			v.SharedSince = since.UTC()
			if past {
				// Two machines' reports overwrite each other: neither's says the
				// node converged, and the operator must act (sharedkey.go).
				v.Converged = false
				v.LastError = d.keySharedError(n, since, now)
			}
		}
	}
	// The latest of: when this node last heard from it (a node that led before
	// keeps what it heard then, older than what a leader since recorded), when a
	// leader heard from it as it went offline, and its last report that changed
	// something.
	v.LastSeen = n.LastSeen
	if n.Applied.ReportedAt.After(v.LastSeen) {
		v.LastSeen = n.Applied.ReportedAt
	}
	if last, ok := d.seen.get(n.ID); ok && last.After(v.LastSeen) {
		v.LastSeen = last.UTC()
	}
	if !n.Revoked && state.PastKeyringHistory(n.Applied, oldest) {
		keyringGone(&v, oldest)
	}
	switch {
	case n.Revoked:
		v.State = api.StateRevoked
	case d.alive(n, now):
		v.State = api.StateAlive
	default:
		v.State = api.StateOffline
	}
	return v
}

func (d *Daemon) revoke(req api.RevokeRequest) (api.RevokeResult, error) {
	cmd, err := d.proposeRevoke(req)
	if err != nil {
		return api.RevokeResult{Revoked: []api.RevokedNode{}}, err
	}
	return d.commitRevoke(cmd, req.Key)
}

// proposeRevoke checks a revocation against the state and returns the command that
// carries it out: each check that can be made before the commit is made here,
// where its answer can name what the operator sees.
func (d *Daemon) proposeRevoke(req api.RevokeRequest) (state.Command, error) {
	var out state.Command
	nodes := (&state.RevokeCmd{Node: req.Node, Nodes: req.Nodes}).Targets()
	switch {
	case len(nodes) == 0:
		return out, badRequest("name the node to revoke")
	case len(nodes) > api.MaxRevokeNodes:
		return out, badRequest("%d nodes in one request; at most %d", len(nodes), api.MaxRevokeNodes)
	}
	for _, n := range nodes {
		if err := tokenfmt.CheckNodeID(n); err != nil {
			return out, badRequest("%v", err)
		}
	}
	if req.Key != "" {
		if len(nodes) != 1 {
			return out, badRequest("key names the key of one node: name one node with it, not %d", len(nodes))
		}
		if !nkeys.IsValidPublicUserKey(req.Key) {
			return out, badRequest("key %q is not a node's public key (a U... nkey, as meshctl nodes --json shows it as public_key)", req.Key)
		}
	}
	var unknown, minted, control, removed []string
	var mismatch *api.Error
	var forgotten bool
	now := d.now()
	d.fsm.Read(func(s *state.State) {
		for _, n := range nodes {
			if node, ok := s.Nodes[n]; ok && req.Key != "" && node.PublicKey != req.Key {
				mismatch = keyMismatch(s, node, req.Key)
			}
			if _, ok := s.Forgotten[n]; ok {
				if _, ok := s.Nodes[n]; !ok {
					// Revoked already, its record forgotten since: answered as
					// revoked, unless the key named is not its last machine's
					// (as while the record was kept).
					if req.Key != "" && s.ForgottenKey(n) != req.Key {
						mismatch = forgottenKeyMismatch(s, n, req.Key)
					}
					forgotten = true
					continue
				}
			}
			if _, ok := s.Nodes[n]; !ok {
				if cn, ok := s.ControlNodes[n]; ok {
					if cn.Removed {
						removed = append(removed, n)
					} else {
						control = append(control, n)
					}
					continue
				}
				unknown = append(unknown, n)
				if p := s.PendingTokens(n, now); len(p) > 0 {
					minted = append(minted, fmt.Sprintf("%s (%d pending token(s), the newest %s)", n, len(p), p[len(p)-1].ShortID()))
				}
			}
		}
	})
	if len(control) > 0 || len(removed) > 0 {
		// Told as what they are: "no such node" of a control node the operator
		// sees in meshctl nodes reads as a bug; and one removed already is not
		// to be removed again.
		var parts []string
		if len(control) > 0 {
			parts = append(parts, fmt.Sprintf("%s: a control node, not a host: `meshctl control remove NODE` takes a control node out of the mesh for good", strings.Join(control, ", ")))
		}
		if len(removed) > 0 {
			parts = append(parts, fmt.Sprintf("%s: a control node removed from the mesh already, and no host is enrolled under its id: nothing to revoke", strings.Join(removed, ", ")))
		}
		if len(unknown) > 0 {
			parts = append(parts, "no such node: "+strings.Join(unknown, ", "))
		}
		return out, &api.Error{Code: api.CodeNotFound, Message: strings.Join(parts, "; ") + nothingRevoked(len(nodes))}
	}
	if len(unknown) > 0 {
		msg := "no such node: " + strings.Join(unknown, ", ")
		if len(minted) > 0 {
			// Nothing to revoke, but a token would still enrol the id: that is
			// what an operator revoking it wants stopped.
			msg += fmt.Sprintf("; not enrolled, but a token would enrol: %s; cancel with meshctl token cancel NODE", strings.Join(minted, ", "))
		}
		return out, &api.Error{Code: api.CodeNotFound, Message: msg + nothingRevoked(len(nodes))}
	}
	if mismatch != nil {
		return out, mismatch
	}
	// The command's time is the revocation time of the nodes it revokes; a node
	// revoked earlier keeps its own, which tells the two apart.
	at := now.UTC()
	// When this leader last heard from each node goes with the revocation: the
	// liveness is forgotten once it commits (enforceRevocations), and the close of
	// the connection it causes is not recorded for a revoked node (wentOffline),
	// so LAST SEEN of a node revoked while connected showed its last report that
	// changed something, days before perhaps.
	var seen []state.SeenReport
	for _, n := range nodes {
		if last, ok := d.seen.get(n); ok {
			last = last.UTC()
			if last.After(at) { // heard between the clock's reading and now
				last = at
			}
			seen = append(seen, state.SeenReport{Node: n, At: last})
		}
	}
	out = state.Command{Op: state.OpRevoke, At: at, Revoke: &state.RevokeCmd{Nodes: nodes, Seen: seen}, Rules: d.tokenRules()}
	if forgotten {
		// It names a forgotten id, which every control node on the rules that
		// forget answers as revoked; one put back to an older meshctl since, which
		// ignored the forgotten records of the snapshot it started from, would
		// refuse the whole revocation: it stops at the entry instead.
		out.Rules = state.RulesForgetRevoked
	}
	if req.Key != "" {
		// Checked above as the state stood; checked again as the command applies
		// where every member applies the rule: a new machine enrolled under the
		// revoked id in between is not revoked in the key's place.
		if rules := d.rulesFor(state.RulesRevokeByKey); rules != 0 {
			out.Rules = max(out.Rules, rules)
			out.Revoke.Keys = map[string]string{nodes[0]: req.Key}
		}
	}
	return out, nil
}

// commitRevoke commits a revocation proposeRevoke made, naming key if the
// revocation named one, and tells what it revoked.
func (d *Daemon) commitRevoke(cmd state.Command, key string) (api.RevokeResult, error) {
	out := api.RevokeResult{Revoked: []api.RevokedNode{}}
	at := cmd.At
	res, err := d.commit(cmd)
	if err != nil {
		return out, err
	}
	if res.Err != nil {
		if errors.Is(res.Err, state.ErrKeyMismatch) {
			// The same answer as the check before the commit gives.
			var mismatch *api.Error
			d.fsm.Read(func(s *state.State) {
				id := cmd.Revoke.Targets()[0]
				if n, ok := s.Nodes[id]; ok {
					mismatch = keyMismatch(s, n, key)
				} else if _, ok := s.Forgotten[id]; ok {
					mismatch = forgottenKeyMismatch(s, id, key)
				}
			})
			if mismatch != nil {
				return out, mismatch
			}
		}
		return out, refusal(res.Err)
	}
	for i := range res.Tokens {
		t := &res.Tokens[i]
		out.CancelledTokens = append(out.CancelledTokens, tokenView(t, state.TokenCancelled))
		d.log.Info("token cancelled: its node was revoked", "node", t.Node, "token", t.ShortID())
	}
	revoked := make([]revokedNode, 0, len(res.Revoked))
	fresh := 0
	for _, n := range res.Revoked {
		// Connections of an earlier revocation's key are closed again too: none
		// should be left, and closing one that is costs nothing. A forgotten
		// node's key is "" only in a damaged state (state.ForgottenKey).
		if n.PublicKey != "" {
			revoked = append(revoked, revokedNode{node: n.ID, key: n.PublicKey})
		}
		r := api.RevokedNode{Node: n.ID, Connections: d.presence.Open(n.PublicKey), PublicKey: n.PublicKey, EnrolledAt: n.EnrolledAt.UTC(),
			EarlierRevokedAt: n.EarlierRevokedAt.UTC()}
		for _, k := range d.fsm.Revocations(n.ID) {
			if k.Key != n.PublicKey {
				r.EarlierRevocations++
			}
		}
		if !n.RevokedAt.Equal(at) {
			r.AlreadyRevokedAt = n.RevokedAt
		} else {
			fresh++
			d.log.Warn("node revoked", "node", r.Node, "connections", r.Connections)
		}
		out.Revoked = append(out.Revoked, r)
	}
	d.enforceRevocations(revoked)
	d.metrics.revocations.Add(float64(fresh))
	return out, nil
}

// forgottenKeyMismatch refuses a revocation of a forgotten node that names another
// key than its last machine's, as keyMismatch does while the record is kept.
func forgottenKeyMismatch(s *state.State, node, key string) *api.Error {
	last := s.ForgottenKey(node)
	if last == "" {
		last = "a key the state cannot tell"
	}
	msg := fmt.Sprintf("%s was revoked at %s under %s, and the record forgotten since (%s); nothing was revoked", node, s.Forgotten[node].RevokedAt.UTC().Format(time.RFC3339), last, forgottenText())
	switch was, ok := s.RevokedKeys[key]; {
	case ok && was == node:
		msg += fmt.Sprintf(": %s was %s's key before, and is revoked already", key, node)
	case ok:
		msg += fmt.Sprintf(": %s was %s's key, revoked already", key, was)
	default:
		msg += fmt.Sprintf(": %s never held %s", node, key)
	}
	return &api.Error{Code: api.CodeKeyMismatch, Message: msg}
}

// forgottenText says when records are forgotten: "30 days after" is not always so
// (after an upgrade, a record revoked a year before is forgotten at once).
func forgottenText() string {
	return fmt.Sprintf("records are forgotten %d days or more after their revocation", int(state.RevokedRetention/(24*time.Hour)))
}

// nothingRevoked ends a refused revocation's message of n nodes: one naming only
// the unknown ones left the operator wondering about the others (a walkthrough).
func nothingRevoked(n int) string {
	if n > 1 {
		return fmt.Sprintf("; nothing was revoked, of the %d nodes named (a revocation is all or none)", n)
	}
	return "; nothing was revoked"
}

// keyMismatch refuses a revocation of n that names key, another key than n's: most
// likely a revocation run again after another machine enrolled under the id, which
// revoking would take out.
func keyMismatch(s *state.State, n *state.Node, key string) *api.Error {
	now := "enrolled " + n.EnrolledAt.UTC().Format(time.RFC3339)
	if n.Revoked {
		now += ", revoked " + n.RevokedAt.UTC().Format(time.RFC3339)
	}
	msg := fmt.Sprintf("%s holds key %s (%s), not %s: another machine than the one the key names is under the id now, and nothing was revoked", n.ID, n.PublicKey, now, key)
	switch was, ok := s.RevokedKeys[key]; {
	case ok && was == n.ID:
		msg += fmt.Sprintf("; %s was %s's key before, and is revoked already", key, n.ID)
		if !n.EarlierRevokedAt.IsZero() {
			msg += fmt.Sprintf(" (the machine before this one was revoked at %s)", n.EarlierRevokedAt.UTC().Format(time.RFC3339))
		}
	case ok:
		msg += fmt.Sprintf("; %s was %s's key, revoked already", key, was)
	default:
		msg += fmt.Sprintf("; %s never held %s", n.ID, key)
	}
	if !n.Revoked {
		msg += fmt.Sprintf(". To revoke the machine under %s now: meshctl revoke --key %s %s", n.ID, n.PublicKey, n.ID)
	}
	return &api.Error{Code: api.CodeKeyMismatch, Message: msg}
}

func (d *Daemon) label(req api.LabelRequest) (api.NodeView, error) {
	if err := validateLabels(req.Labels); err != nil {
		return api.NodeView{}, err
	}
	var notHost, tooMany *api.Error
	d.fsm.Read(func(s *state.State) {
		n, ok := s.Nodes[req.Node]
		if !ok {
			notHost = notAHost(s, []string{req.Node}, "labels")
			return
		}
		// The node's labels after the change, not the request's alone: each request
		// of a few was merged in, and a label stamped at every deploy grew a node's
		// record, every snapshot and every backup for good (a review: 2,000
		// accepted).
		// The state machine checks it again as the change applies (RulesLabelCap):
		// a change committed since this look would slip past it otherwise.
		after := state.LabelsAfter(n.Labels, req.Labels)
		if after > api.MaxLabels && after > len(n.Labels) {
			tooMany = badRequest("%s would carry %d labels, more than %d: remove some (meshctl label %s k=) before adding others; nothing was changed", req.Node, after, api.MaxLabels, req.Node)
		}
	})
	if notHost != nil {
		return api.NodeView{}, notHost
	}
	if tooMany != nil {
		return api.NodeView{}, tooMany
	}
	cmd := state.Command{Op: state.OpLabel, Label: &state.LabelCmd{Node: req.Node, Labels: req.Labels},
		Rules: d.rulesFor(state.RulesTokensFollowNodes)}
	if r := d.rulesFor(state.RulesLabelCap); r != 0 {
		cmd.Rules, cmd.Label.Max = r, api.MaxLabels
	}
	res, err := d.commit(cmd)
	if err != nil {
		return api.NodeView{}, err
	}
	if res.Err != nil {
		return api.NodeView{}, refusal(res.Err)
	}
	var oldest uint64
	d.fsm.Read(func(s *state.State) { oldest = s.OldestKeptKeyring() })
	return d.view(res.Node, d.now(), oldest), nil
}

// notAHost refuses, not_found, the ids among unknown (no host of s) that are
// control nodes' ids, saying so: "no such node" of a control node the operator sees
// in meshctl nodes reads as a bug (as revoke says, decision 0029's audit). what is
// what the request gave them ("labels", "declarations"). The other unknown ids are
// named after them. So are ids of revoked nodes whose record the state forgot
// (state.Forgotten): "no such node" of a host revoked last month hides why. nil when
// none is a control node's or forgotten.
func notAHost(s *state.State, unknown []string, what string) *api.Error {
	var control, removed, forgotten, others []string
	for _, id := range unknown {
		_, gone := s.Forgotten[id]
		switch cn, ok := s.ControlNodes[id]; {
		case ok && !cn.Removed:
			control = append(control, id)
		case gone:
			forgotten = append(forgotten, id)
		case ok:
			removed = append(removed, id)
		default:
			others = append(others, id)
		}
	}
	var parts []string
	if len(forgotten) > 0 {
		parts = append(parts, fmt.Sprintf("%s: revoked, and the record forgotten since (%s; the keys stay refused): nothing takes %s under the id until a machine enrols under it again (meshctl token --node ID)", strings.Join(forgotten, ", "), forgottenText(), what))
	}
	if len(control) > 0 {
		parts = append(parts, fmt.Sprintf("%s: a control node, not a host: control nodes take no labels or declarations (they select and serve the hosts that do; meshctl nodes lists the hosts)", strings.Join(control, ", ")))
	}
	if len(removed) > 0 {
		parts = append(parts, fmt.Sprintf("%s: a control node removed from the mesh, and no host is enrolled under its id: nothing takes %s under it", strings.Join(removed, ", "), what))
	}
	if len(parts) == 0 {
		return nil
	}
	if len(others) > 0 {
		parts = append(parts, "no such node: "+strings.Join(others, ", "))
	}
	return &api.Error{Code: api.CodeNotFound, Message: strings.Join(parts, "; ")}
}

// validateLabels keeps label keys and values short and plain (api.CheckLabel): a
// label request's, where k= removes k.
func validateLabels(l map[string]string) error {
	if len(l) > api.MaxLabels {
		return badRequest("at most %d labels", api.MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if err := api.CheckLabel(k, l[k]); err != nil {
			return badRequest("%v", err)
		}
	}
	return nil
}

// validateValuedLabels is validateLabels for labels given with their values: a
// token's, which its node takes, and a declaration's selector (api.CheckValuedLabel).
// what is what they are for, said in the refusal. Refused here, before anything is
// proposed, an empty value never reaches the log, where the state machine matches
// it as it always did (state.matches): an older meshctl, or a request made by
// hand, is refused as meshctl refuses it.
func validateValuedLabels(l map[string]string, what string) error {
	if err := validateLabels(l); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(l)) {
		if err := api.CheckValuedLabel(k, l[k]); err != nil {
			return badRequest("label %s has an empty value (%s=): %s: give its value (a shell variable left unset or empty gives %s=)", k, k, what, k)
		}
	}
	return nil
}

// checkControlClaim refuses a control token the mesh CA did not vouch for. Operator
// credentials reach this API from any control node, and a control token hands its
// holder the signing key: only the CA key, kept on one machine, may mint one.
func (d *Daemon) checkControlClaim(req api.TokenCreateRequest) error {
	c := req.Control
	if _, err := hex.DecodeString(c.Pin); err != nil || len(c.Pin) != 64 {
		return &api.Error{Code: api.CodeNotCAHolder, Message: "the control token names no TLS key pin: " + pki.ErrBadControlProof.Error()}
	}
	if !nkeys.IsValidPublicUserKey(c.Operator) {
		return &api.Error{Code: api.CodeNotCAHolder, Message: "the control token names no operator key: " + pki.ErrBadControlProof.Error()}
	}
	ca, err := pki.ParseCertificatePEM(d.caPEM)
	if err != nil {
		return &api.Error{Code: api.CodeInternal, Message: "the mesh CA certificate of this node does not parse: " + err.Error()}
	}
	if c.ClaimExpiry.IsZero() {
		return badRequest("this control token was minted by a meshctl older than the control plane, whose CA claim does not cover the token's proof key: nothing was minted; mint it again with this version's meshctl on the CA holder")
	}
	if err := pki.VerifyControlClaim(ca, req.ControlClaim(d.cfg.Mesh), c.Proof); err != nil {
		return &api.Error{Code: api.CodeNotCAHolder, Message: err.Error()}
	}
	// The claim's expiry is the CA holder's clock plus the token's ttl; it is judged
	// by this node's, within the tolerance every stamp of another machine gets.
	// After it, a claim could register the id of a token purged since; one further
	// ahead than the ttl would outlive the token's record, purged a day after the
	// record's expiry, and so register that id again once it is purged.
	// Only whole seconds are signed (pki.ControlClaim): what a relay could add
	// below one is not judged.
	expiry := c.ClaimExpiry.Truncate(time.Second)
	now, ttl, tol := d.now(), time.Duration(req.TTL), state.StampAheadTolerance
	if t, ok := d.fsm.TokenByID(req.ID); ok && !t.Used && !t.Cancelled && now.Before(t.Expiry) {
		// Pending: the same request sent again, its answer lost, is answered with
		// the token the state holds (Repeated), claim expired or not; other terms
		// under its id are refused. A record no longer pending is judged as a new
		// request: the commit's purge may drop it first, and the claim would then
		// register its id again.
		return nil
	}
	if now.After(expiry.Add(tol)) {
		return badRequest("the CA's claim for this control token expired at %s, and this control node's clock reads %s: nothing was minted; mint it again, and if the CA holder's clock is behind this node's (by %s or more), set it right first (NTP; meshctl control status shows the control nodes' clocks)",
			expiry.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), now.Sub(expiry.Add(-ttl)).Round(time.Second))
	}
	if ahead := expiry.Sub(now.Add(ttl)); ahead > tol {
		return badRequest("the CA holder's clock is %s ahead of this control node's (the claim expires at %s, the ttl is %s and this clock reads %s): nothing was minted; set the CA holder's clock right (NTP; meshctl control status shows the control nodes' clocks) and mint again: a certificate it issues now is not valid yet on machines whose clock is right",
			ahead.Round(time.Second), expiry.UTC().Format(time.RFC3339), ttl, now.UTC().Format(time.RFC3339))
	}
	return nil
}
