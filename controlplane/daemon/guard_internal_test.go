package daemon

import "testing"

// TestReplyUnder: the control plane answers a request only on a reply subject under
// the requester's own inbox; the requester chooses its reply freely, and nats-server
// checks it against no permission. A reply with a wildcard under that prefix
// (`_INBOX.node.web-1.>`) is a pattern, not one inbox of the requester's; no reply,
// the prefix alone, the inbox of another node whose id begins like this one's, and
// white space (what follows would be read as more of the protocol line) are not the
// requester's inbox either. Each is refused, before the handler reads anything.
// replyUnder, which every handler's check is, had no test of its own. A reply with
// an empty token is no subject at all: the request was carried out and its answer
// refused by the broker.
func TestReplyUnder(t *testing.T) {
	const prefix = "_INBOX.node.web-1."
	for _, c := range []struct {
		reply string
		ok    bool
	}{
		{"_INBOX.node.web-1.abc", true},
		{"_INBOX.node.web-1.abc.1", true},
		{"_INBOX.node.web-1.a-b_c.123456", true},
		{"", false},                        // no reply
		{"_INBOX.node.web-1.", false},      // the prefix alone
		{"_INBOX.node.web-1", false},       // not even the prefix
		{"_INBOX.node.web-1.>", false},     // every inbox of the node's
		{"_INBOX.node.web-1.*", false},     // any one
		{"_INBOX.node.web-1.abc.>", false}, // a wildcard further down
		{"_INBOX.node.web-1.*.x", false},   // a wildcard inside
		{"_INBOX.node.web-1.a>b", false},   // a wildcard character in a token
		{"_INBOX.node.web-1.a b", false},   // a space
		{"_INBOX.node.web-1.a\tb", false},  // a tab
		{"_INBOX.node.web-1.a\r\nPUB x 0", false},
		{"_INBOX.node.web-10.abc", false}, // another node, whose id begins alike
		{"_INBOX.node.web-2.abc", false},  // another node
		{"_INBOX.node.>", false},          // every node's
		{"_INBOX.node.*.abc", false},
		{"mesh.admin.signing-key.rotate", false},
		{"mesh.node.web-1.decl", false}, // the node's own declaration subject
		{"x_INBOX.node.web-1.abc", false},
		{"_INBOX.node.web-1..x", false}, // an empty token: no subject (a walkthrough)
		{"_INBOX.node.web-1.a..b", false},
		{"_INBOX.node.web-1.abc.", false},
	} {
		if got := replyUnder(c.reply, prefix); got != c.ok {
			t.Errorf("replyUnder(%q, %q) = %t, want %t", c.reply, prefix, got, c.ok)
		}
	}
}
