package replication

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestPeersFileUnusable: a peers file that is too large, cut short, not a list of
// servers or leaves this node out is ErrPeersFile, before anything of Raft is
// touched, and it stays where it is for the operator to fix.
func TestPeersFileUnusable(t *testing.T) {
	good := `[{"id":"cp-1","address":"10.0.0.1:7301","non_voter":false}]`
	for name, content := range map[string]string{
		"over the cap":        good + string(bytes.Repeat([]byte(" "), maxPeersFile)),
		"cut short":           good[:len(good)/2],
		"empty":               "",
		"not a list":          `{"id":"cp-1"}`,
		"without this node":   `[{"id":"cp-2","address":"10.0.0.2:7301","non_voter":false}]`,
		"a server without id": `[{"address":"10.0.0.2:7301"}]`,
		"this node's broker port as its Raft address": `[{"id":"cp-1","address":"10.0.0.1:7300","non_voter":false}]`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, PeersFile)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Dir: dir, ID: "cp-1", Bind: "10.0.0.1:7301", EmptyFSM: func() raft.FSM { return nil }}
			err := recoverFromPeersFile(cfg, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if !errors.Is(err, ErrPeersFile) {
				t.Fatalf("got %v, want ErrPeersFile", err)
			}
			if after, err := os.ReadFile(path); err != nil || string(after) != content {
				t.Fatalf("the peers file was changed or moved: %v", err)
			}
		})
	}
}

// TestPeersFileWithoutAVoterSaysWhichToMakeOne: a survivor that was a nonvoter,
// written "non_voter": true as it was (the operations guide said so), was refused
// with hashicorp/raft's "need at least one voter in configuration". The refusal
// now says to write the most up-to-date survivor "non_voter": false.
func TestPeersFileWithoutAVoterSaysWhichToMakeOne(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, PeersFile)
	content := `[{"id":"cp-1","address":"10.0.0.1:7301","non_voter":true},{"id":"cp-3","address":"10.0.0.3:7301","non_voter":true}]`
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: dir, ID: "cp-1", EmptyFSM: func() raft.FSM { return nil }}
	err := recoverFromPeersFile(cfg, nil, nil, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if !errors.Is(err, ErrPeersFile) || !strings.Contains(err.Error(), `"non_voter": false`) || !strings.Contains(err.Error(), "most up-to-date survivor") {
		t.Fatalf("got %v, want ErrPeersFile saying to make the most up-to-date survivor a voter", err)
	}
	if after, err := os.ReadFile(path); err != nil || string(after) != content {
		t.Fatalf("the peers file was changed or moved: %v", err)
	}
}
