package daemon

import (
	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/authn"
)

// The counters below are exported from the daemon's start, at 0 until their first
// event: Prometheus sees no increase() in a series that first appears at 1, and the
// first spent token or unknown key after a restart is what an alert on
// increase(...) > 0 is there for. Each list is every series its counter has, bar
// those whose values the code does not fix (an operator's refusals by code, nats-
// server's client errors in the control plane's own accounts), which appear when
// first counted.

// Subjects of the guard's counts (DropKey.Subject).
const (
	subjectEnrol       = "enrol"
	subjectSync        = "sync"
	subjectStatus      = "status"
	subjectHeartbeat   = "heartbeat"
	subjectRevokedSync = "revoked_sync"
	subjectAdmin       = "admin"
	subjectRetired     = "retired"
	subjectConnect     = "connect"
)

// Why a node's message is dropped by admitNodeMessage and dropReply, whatever the
// subject: TestKnownCountsListEveryCallSite reads these calls as these reasons.
func admitReasons() []Reason { return []Reason{ReasonMalformed, ReasonTooLarge, ReasonRate} }

func replyReasons() []Reason { return []Reason{ReasonNoReply, ReasonForeignReply} }

// knownDrops are the (subject, reason) pairs of mesh_control_messages_dropped_total.
func knownDrops() []DropKey {
	var out []DropKey
	add := func(subject string, reasons ...Reason) {
		for _, r := range reasons {
			out = append(out, DropKey{Subject: subject, Reason: r})
		}
	}
	add(subjectEnrol, ReasonTooLarge, ReasonRate, ReasonMalformed, ReasonBadProof)
	add(subjectEnrol, replyReasons()...)
	add(subjectSync, admitReasons()...)
	add(subjectSync, replyReasons()...)
	add(subjectStatus, admitReasons()...)
	add(subjectStatus, ReasonOtherNode)
	add(subjectHeartbeat, ReasonMalformed, ReasonTooLarge)
	add(subjectRevokedSync, ReasonMalformed, ReasonTooLarge, ReasonRate)
	add(subjectRevokedSync, replyReasons()...)
	add(subjectAdmin, replyReasons()...)
	add(subjectRetired, ReasonMalformed, ReasonRate)
	add(subjectConnect, ReasonConnections)
	return out
}

// enrolRefusals are the codes an enrolment is refused with (docs/protocol.md).
func enrolRefusals() []string {
	return []string{api.CodeTokenUnknown, api.CodeTokenUsed, api.CodeTokenExpired, api.CodeTokenOtherNode, api.CodeTokenWrongRole,
		api.CodeTokenOtherMesh, api.CodeTokenStaleKey, api.CodeTokenCancelled, api.CodeNodeExists, api.CodeKeyRevoked,
		api.CodeKeyInUse, api.CodeBadRequest, api.CodeUnavailable, api.CodeInternal}
}

// knownRefusals are the (subject, reason) pairs of mesh_control_requests_refused_total
// that hosts and enrolling clients meet. An operator's refusals (subject admin) are
// answered to the operator, who reads them there, and appear when first counted.
func knownRefusals() []DropKey {
	// rate: an answer the requester's budget cannot pay for (payAnswer; the revoked
	// key's notices), answered unavailable; a status report's (the connections
	// holding a shared key) is not sent.
	out := []DropKey{{Subject: subjectSync, Reason: ReasonRate}, {Subject: subjectRevokedSync, Reason: ReasonRate},
		{Subject: subjectEnrol, Reason: ReasonRate}, {Subject: subjectStatus, Reason: ReasonRate}}
	for _, code := range enrolRefusals() {
		out = append(out, DropKey{Subject: subjectEnrol, Reason: Reason(code)})
	}
	return out
}

// knownKicks are the reasons of mesh_control_budget_disconnects_total.
func knownKicks() []Reason { return []Reason{ReasonTooLarge, ReasonRate, ReasonConnections} }

// knownBrokerRefusals are the reasons of mesh_broker_connections_refused_total: the
// codes of the Authenticator's refusals and of the broker's own.
func knownBrokerRefusals() []string {
	var out []string
	for _, r := range append(authn.Refusals(), broker.Refusals()...) {
		out = append(out, r.Code)
	}
	// A refusal that gave no code, and an authentication that failed: counted
	// too, and exported at 0 with the others, so that an alert on their first
	// increase sees it (a walkthrough).
	return append(out, broker.CodeRefused, broker.CodeNotRefusal)
}

// Kinds of mesh_control_enrolments_total.
const (
	enrolledHost    = "host"
	enrolledControl = "control"
)

// unboundClients are the clients of mesh_broker_unbound_logins_total.
func unboundClients() []string {
	return []string{authn.UnboundNode, authn.UnboundOperator, authn.UnboundEnrolling}
}

// withZeros returns counts with every key of known added at 0 that it lacks.
func withZeros[K comparable](counts map[K]uint64, known []K) map[K]uint64 {
	out := make(map[K]uint64, len(counts)+len(known))
	for _, k := range known {
		out[k] = 0
	}
	for k, n := range counts {
		out[k] = n
	}
	return out
}
