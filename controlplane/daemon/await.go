package daemon

import "time"

// awaitReplicationFor bounds how long a follower's broker holds a login it does not
// know yet: a follower learns of a commit with the leader's next append, within
// two commit intervals (50 ms each by default), and applies it at once. Ten
// intervals leave room for a busy machine; a key or token the mesh never issued is
// refused after this wait, which holds the login's goroutine and nothing else.
const awaitReplicationFor = 500 * time.Millisecond

// awaitReplication is authn.Config.AwaitReplication: on a follower it looks again
// after each change of the state, for at most awaitReplicationFor, until found says
// yes. The leader has applied every enrolment and token it answered for before
// answering, so it does not wait.
func (d *Daemon) awaitReplication(found func() bool) {
	if d.raft.IsLeader() {
		return
	}
	wait := time.NewTimer(awaitReplicationFor)
	defer wait.Stop()
	for {
		next := d.fsm.Next()
		if found() {
			return
		}
		select {
		case <-next:
		case <-wait.C:
			return
		}
	}
}
