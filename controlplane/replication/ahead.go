package replication

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/hashicorp/raft"
)

// A restarted member restores its newest snapshot, and hashicorp/raft applies the
// entries logged after it only once a leader says how far they committed (the
// commit index is not kept on disk). A control node that checks its Raft peers
// against the control nodes its state lists (PeerAllowed) would, until then, refuse
// the members admitted in those entries, and a cluster restarted at once could find
// no quorum that accepts itself. Two ways out, used together (docs/decisions/0015):
//
//   - LogAhead: at start, the member is shown what its own log holds beyond the
//     snapshot, committed or not, the way Raft itself takes the newest configuration
//     from its log;
//   - AskMembers: a member may ask a peer it accepts which peers that one accepts,
//     over the Raft port, when its own log does not know of a member (it was down
//     when that one joined).

// LogTail is what a member's stores hold beyond its state machine at start: the
// command entries logged after the newest snapshot, read lazily from the log, and
// a way to restore that snapshot into a new state machine (of Config.EmptyFSM's
// kind) to apply them to.
type LogTail struct {
	// Entries yields the command entries after the snapshot, in log order, each
	// read from the log when reached; the sequence may be ranged over again.
	Entries iter.Seq[*raft.Log]
	// Restore returns a new state machine holding the snapshot (empty if there is
	// none).
	Restore func() (raft.FSM, error)
}

// logTail reads the tail of a member's stores before Raft starts on them.
func logTail(cfg Config, store raft.LogStore, snaps raft.SnapshotStore) (LogTail, error) {
	metas, err := snaps.List()
	if err != nil {
		return LogTail{}, fmt.Errorf("list raft snapshots: %w", err)
	}
	var after uint64
	var snapID string
	if len(metas) > 0 {
		after, snapID = metas[0].Index, metas[0].ID
	}
	last, err := store.LastIndex()
	if err != nil {
		return LogTail{}, fmt.Errorf("read the raft log: %w", err)
	}
	first, err := store.FirstIndex()
	if err != nil {
		return LogTail{}, fmt.Errorf("read the raft log: %w", err)
	}
	from := max(after+1, first)
	entries := func(yield func(*raft.Log) bool) {
		for i := from; i <= last && i > 0; i++ {
			var l raft.Log
			if err := store.GetLog(i, &l); err != nil {
				return // a gap: nothing after it is this member's to rely on
			}
			if l.Type == raft.LogCommand && !yield(&l) {
				return
			}
		}
	}
	restore := func() (raft.FSM, error) {
		if cfg.EmptyFSM == nil {
			return nil, errors.New("no empty state machine to restore the snapshot into")
		}
		fsm := cfg.EmptyFSM()
		if snapID == "" {
			return fsm, nil
		}
		_, rc, err := snaps.Open(snapID)
		if err != nil {
			return nil, fmt.Errorf("open raft snapshot %s: %w", snapID, err)
		}
		if err := fsm.Restore(rc); err != nil {
			return nil, fmt.Errorf("restore raft snapshot %s: %w", snapID, err)
		}
		return fsm, nil
	}
	return LogTail{Entries: entries, Restore: restore}, nil
}

// membersQuery is the first byte of a members question on the Raft port. Raft's own
// RPCs begin with their type, 0 to 4 in hashicorp/raft; a peer that predates the
// question answers it as an unknown RPC, by closing the connection.
const membersQuery byte = 0xF1

// maxMembersAnswer bounds the answer to a members question.
const maxMembersAnswer = 64 << 10

// ErrNoMembersAnswer means a peer accepted the connection but gave no answer to a
// members question: it runs a version without the question, or has no answer.
var ErrNoMembersAnswer = errors.New("the peer did not answer which control nodes it accepts")

// AskMembers asks the member at addr (its Raft address) for its Config.Members
// answer. The peer must be one PeerAllowed allows here, and it answers only a peer
// it allows itself: an answer comes from a member this node already trusts.
func (n *Node) AskMembers(addr string, timeout time.Duration) ([]byte, error) {
	return n.stream.askMembers(addr, timeout)
}

func (s *tlsStream) askMembers(addr string, timeout time.Duration) ([]byte, error) {
	c, err := s.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{membersQuery}); err != nil {
		return nil, fmt.Errorf("ask %s which control nodes it accepts: %w", addr, err)
	}
	data, err := io.ReadAll(io.LimitReader(c, maxMembersAnswer+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("ask %s which control nodes it accepts: %w", addr, err)
	case len(data) > maxMembersAnswer:
		return nil, fmt.Errorf("ask %s which control nodes it accepts: the answer is over %d bytes", addr, maxMembersAnswer)
	case len(data) == 0:
		return nil, fmt.Errorf("%s: %w", addr, ErrNoMembersAnswer)
	}
	return data, nil
}
