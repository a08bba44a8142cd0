package daemon

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// nothingReaches fails the test for each message reaching sub until it has been
// quiet for 300 ms: what a request with a foreign reply subject must not make the
// control plane send.
func nothingReaches(t *testing.T, sub *nats.Subscription, what string) {
	t.Helper()
	for {
		m, err := sub.NextMsg(300 * time.Millisecond)
		if err != nil {
			return
		}
		t.Errorf("%s: an answer of %d bytes reached %s", what, len(m.Data), m.Subject)
	}
}

// TestAnEnrolmentAnswersOnlyItsKeysInbox (a security audit): the requester chooses
// its reply subject freely, and only the integration matrix noticed when the
// control plane answered outside the requesting key's enrolment inbox. A request
// replying elsewhere (another client's inbox, a node's) is dropped as
// foreign_reply, and nothing is sent anywhere; the same request replying on its
// own inbox is answered.
func TestAnEnrolmentAnswersOnlyItsKeysInbox(t *testing.T) {
	d := fleet(t, 0)
	e, other := newEnrolling(t, d, "web-1"), newEnrolling(t, d, "web-1")
	_, nc := counter(t, d)
	inboxes, err := nc.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	e.enrol(t)
	if _, err := inboxes.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the answer on the key's own inbox was not seen: %v", err)
	}
	data, _ := json.Marshal(e.request())
	for _, reply := range []string{api.EnrolInbox("web-1", other.pub) + ".1", api.NodeInbox("web-1") + ".1", "_INBOX.x"} {
		before := dropped(d, "enrol", ReasonForeignReply)
		d.handleEnrol(&nats.Msg{Subject: api.EnrolKeySubject("web-1", e.pub), Reply: reply, Data: data})
		if got := dropped(d, "enrol", ReasonForeignReply); got != before+1 {
			t.Errorf("reply %s: %d dropped as foreign_reply, want 1", reply, got-before)
		}
		nothingReaches(t, inboxes, "an enrolment replying on "+reply)
	}
}

// TestASyncAnswersOnlyTheNodesInbox (a security audit): a sync whose reply is not
// under the node's own inbox, another node's (web-10's, whose inbox begins with
// web-1's) or any other, is dropped as foreign_reply: no answer, and none of the
// envelopes a sync publishes. The same request on the node's inbox is answered.
func TestASyncAnswersOnlyTheNodesInbox(t *testing.T) {
	d := fleet(t, 0)
	enrolledKey(t, d, "web-1")
	decls, nc := counter(t, d)
	inboxes, err := nc.SubscribeSync("_INBOX.>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	req, _ := json.Marshal(api.SyncRequest{V: api.ProtocolVersion})
	d.handleSync(&nats.Msg{Subject: api.SyncSubject("web-1"), Reply: api.NodeInbox("web-1") + ".1", Data: req})
	ack, err := inboxes.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("the answer on the node's own inbox was not seen: %v", err)
	}
	var resp api.SyncResponse
	if json.Unmarshal(ack.Data, &resp); resp.Sent == 0 {
		t.Fatalf("the sync on the node's own inbox published no envelope (%s): the test shows nothing", ack.Data)
	}
	for deadline := time.Now().Add(5 * time.Second); decls.Load() < int64(resp.Sent); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d envelopes of the sync on the node's own inbox seen", decls.Load(), resp.Sent)
		}
	}
	for _, reply := range []string{api.NodeInbox("web-10") + ".1", api.NodeInbox("web-2") + ".1", "_INBOX.x"} {
		before, sent := dropped(d, "sync", ReasonForeignReply), decls.Load()
		d.handleSync(&nats.Msg{Subject: api.SyncSubject("web-1"), Reply: reply, Data: req})
		if got := dropped(d, "sync", ReasonForeignReply); got != before+1 {
			t.Errorf("reply %s: %d dropped as foreign_reply, want 1", reply, got-before)
		}
		nothingReaches(t, inboxes, "a sync replying on "+reply)
		if n := decls.Load() - sent; n != 0 {
			t.Errorf("a sync replying on %s published %d envelopes", reply, n)
		}
	}
}

// TestARevokedSyncAnswersOnlyTheNodesInbox (a security audit): a revoked key's
// sync replying elsewhere than its node's inbox, here on that of web-10, revoked
// too and listening as the broker lets a revoked key, is dropped as foreign_reply
// and web-10 hears nothing; web-10's own sync is answered there.
func TestARevokedSyncAnswersOnlyTheNodesInbox(t *testing.T) {
	d := fleet(t, 0)
	enrolledKey(t, d, "web-1")
	kp := enrolledKey(t, d, "web-10")
	for _, node := range []string{"web-1", "web-10"} {
		if res, err := d.raft.Apply(state.Command{Op: state.OpRevoke, Revoke: &state.RevokeCmd{Node: node}}, time.Minute); err != nil || res.Err != nil {
			t.Fatalf("revoke %s: %v %v", node, err, res.Err)
		}
	}
	nc := dialAs(t, d, "web-10", kp)
	inbox, err := nc.SubscribeSync(api.NodeInbox("web-10") + ".>")
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	req := []byte(`{"v":2}`)
	d.handleRevokedSync(&nats.Msg{Subject: api.SyncSubject("web-10"), Reply: api.NodeInbox("web-10") + ".1", Data: req})
	if _, err := inbox.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("web-10's own sync was not answered: %v", err)
	}
	before := dropped(d, "revoked_sync", ReasonForeignReply)
	d.handleRevokedSync(&nats.Msg{Subject: api.SyncSubject("web-1"), Reply: api.NodeInbox("web-10") + ".1", Data: req})
	if got := dropped(d, "revoked_sync", ReasonForeignReply); got != before+1 {
		t.Errorf("%d dropped as foreign_reply, want 1", got-before)
	}
	nothingReaches(t, inbox, "web-1's revoked sync replying on web-10's inbox")
}

// TestAStatusNamingAnotherNodeIsDropped (a security audit): a node's report whose
// body names another node is dropped as other_node, and changes neither node's
// record nor marks either seen; the same report on the named node's subject is
// recorded.
func TestAStatusNamingAnotherNodeIsDropped(t *testing.T) {
	d := fleet(t, 2)
	report := func(subject, code string) {
		data, _ := json.Marshal(api.Status{V: api.ProtocolVersion, Node: "n-1", HaveApplied: true, KeyringEpoch: 1,
			Error: &api.StatusError{Code: code, Message: "failed"}})
		d.handleStatus(&nats.Msg{Subject: api.StatusSubject(subject), Data: data})
		d.status.flush()
	}
	report("n-1", "apply_failed")
	if got := d.fsmNode(t, "n-1").Applied.ErrorCode; got != "apply_failed" {
		t.Fatalf("n-1's own report recorded %q: the test shows nothing", got)
	}
	own, other := d.fsmNode(t, "n-0").Applied, d.fsmNode(t, "n-1").Applied
	before := dropped(d, "status", ReasonOtherNode)
	report("n-0", "hook_failed")
	if got := dropped(d, "status", ReasonOtherNode); got != before+1 {
		t.Errorf("%d dropped as other_node, want 1", got-before)
	}
	if got := d.fsmNode(t, "n-1").Applied; got != other {
		t.Errorf("n-0's report naming n-1 changed n-1's record: %+v, was %+v", got, other)
	}
	if got := d.fsmNode(t, "n-0").Applied; got != own {
		t.Errorf("n-0's report naming n-1 changed n-0's record: %+v, was %+v", got, own)
	}
	if _, seen := d.seen.get("n-0"); seen {
		t.Error("n-0's report naming n-1 marked n-0 seen")
	}
}
