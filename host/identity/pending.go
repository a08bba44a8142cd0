package identity

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"mesh/host/atomicfile"
	"mesh/host/statedir"
)

// Pending is the key generated for an enrolment not yet finished, saved (0600)
// before the secret is presented so that a re-run with the same token presents
// the same key: the mesh treats the same token with the same key as the same
// enrolment, and the same token with another key as a reused token.
type Pending struct {
	Format    int       `json:"format"` // FormatVersion
	Mesh      string    `json:"mesh"`
	Node      string    `json:"node"`
	TokenHash string    `json:"token_hash"` // hex SHA-256 id of the token (never the secret itself)
	Seed      Secret    `json:"nkey_seed"`  // nkeys user seed
	CreatedAt time.Time `json:"created_at"`
}

// filePending has Pending's fields and tags but none of its methods, so
// encoding it writes the seed.
type filePending Pending

// PendingPath returns the pending-enrolment file's path in stateDir.
func PendingPath(stateDir string) string { return filepath.Join(stateDir, PendingFileName) }

// Validate reports the first field that is missing or malformed. Its errors are
// *InvalidError and never contain the seed.
func (p Pending) Validate() error {
	if p.Format != FormatVersion {
		return invalid("format", "is %d; this agent reads version %d", p.Format, FormatVersion)
	}
	if err := checkID("mesh", p.Mesh); err != nil {
		return err
	}
	if err := checkID("node", p.Node); err != nil {
		return err
	}
	if b, err := hex.DecodeString(p.TokenHash); err != nil || len(b) != 32 {
		return invalid("token_hash", "is not 64 hex digits (a SHA-256)")
	}
	if err := checkUserSeed(string(p.Seed)); err != nil {
		return err
	}
	if p.CreatedAt.IsZero() {
		return invalid("created_at", "is missing")
	}
	return nil
}

// KeyPair returns the pending key pair. The caller should Wipe it when done.
func (p Pending) KeyPair() (*KeyPair, error) { return userKeyPair(string(p.Seed)) }

// String describes the pending enrolment without its seed.
func (p Pending) String() string {
	return fmt.Sprintf("Pending{Format:%d Mesh:%q Node:%q TokenHash:%q Seed:<redacted> CreatedAt:%s}",
		p.Format, p.Mesh, p.Node, p.TokenHash, p.CreatedAt.Format(time.RFC3339))
}

// GoString is String: %#v must not print the seed either.
func (p Pending) GoString() string { return "identity." + p.String() }

// LogValue keeps the seed out of slog.
func (p Pending) LogValue() slog.Value { return slog.StringValue(p.String()) }

// MarshalJSON encodes the pending enrolment without its seed.
func (p Pending) MarshalJSON() ([]byte, error) {
	p.Seed = ""
	return json.Marshal(struct {
		filePending
		Seed string `json:"nkey_seed,omitempty"`
	}{filePending: filePending(p)})
}

// SavePending writes p into stateDir (created 0700 if missing, refused if unsafe:
// see statedir.Prepare) with
// atomicfile.WriteFile, mode 0600, replacing any earlier pending file. A zero
// Format is taken as FormatVersion; a Pending that fails Validate is refused.
func SavePending(stateDir string, p Pending) error {
	if p.Format == 0 {
		p.Format = FormatVersion
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("identity: refusing to save an invalid pending enrolment: %w", err)
	}
	data, err := json.MarshalIndent(filePending(p), "", "  ")
	if err != nil {
		return fmt.Errorf("identity: encoding: %w", err)
	}
	data = append(data, '\n')
	if err := statedir.Prepare(stateDir); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	path := PendingPath(stateDir)
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("identity: cannot save %s because the disk is full; free some space and run the enrolment again: %w", path, err)
		}
		return fmt.Errorf("identity: cannot save %s: %w", path, err)
	}
	return nil
}

// LoadPending reads the pending enrolment in stateDir. Absent gives an error
// matching ErrNoPending; unreadable, truncated and corrupt files give the same
// error types as Load, with advice fit for a pending file.
func LoadPending(stateDir string) (Pending, error) {
	return loadPending(PendingPath(stateDir), readRegular)
}

func loadPending(path string, read readFunc) (Pending, error) {
	var f filePending
	if err := decodeFile(path, read, MaxFileSize, FormatVersion, true, &f, &f.Format); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Pending{}, fmt.Errorf("%w (there is no %s)", ErrNoPending, path)
		}
		return Pending{}, err
	}
	p := Pending(f)
	if err := p.Validate(); err != nil {
		return Pending{}, &CorruptError{Path: path, Reason: invalidReason(err), pending: true}
	}
	return p, nil
}

// RemovePending removes the pending-enrolment file; that there is none is fine.
func RemovePending(stateDir string) error {
	if err := os.Remove(PendingPath(stateDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("identity: removing the finished enrolment's pending file: %w", err)
	}
	return nil
}

// RemoveFinishedPending removes the pending-enrolment file when it is the draft of
// id, the enrolment it finished: the same mesh, node and key. Enrolment removes it
// as its last step, but a run stopped right after it saved the identity, or a
// removal that failed, left it, holding the node's private key a second time, and
// the run again that would remove it is never made when the machine is enrolled
// (the packaged enrolment unit is skipped once the identity exists). A pending file
// of another key (an unfinished enrolment with another token) is left alone. It
// reports whether it removed one.
func RemoveFinishedPending(stateDir string, id Identity) (bool, error) {
	p, err := LoadPending(stateDir)
	if err != nil {
		return false, nil // none, or one that is not ours to judge
	}
	if p.Mesh != id.Mesh || p.Node != id.Node {
		return false, nil
	}
	kp, err := p.KeyPair()
	if err != nil {
		return false, nil
	}
	pub, err := kp.PublicKey()
	kp.Wipe()
	if err != nil || pub != id.PublicKey {
		return false, nil
	}
	if err := RemovePending(stateDir); err != nil {
		return false, err
	}
	return true, nil
}
