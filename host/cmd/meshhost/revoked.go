package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mesh/host/agent"
	"mesh/host/atomicfile"
	"mesh/host/identity"
	"mesh/host/internal/jsonfile"
	"mesh/host/jsonkeys"
	"mesh/host/token"
)

// revokedFile is where `meshhost run` records, in the state directory, that the mesh
// revoked this node or kept refusing its key, so that `meshhost status` (and the
// next `meshhost run`) know without asking the mesh.
const revokedFile = "revoked.json"

// revocation is the record of revokedFile. It names the identity it is about: an
// identity enrolled afresh in the same directory is not revoked.
type revocation struct {
	Node      string `json:"node"`
	PublicKey string `json:"public_key"`
	// Signed is true for a revocation notice the mesh signed; false when the mesh
	// refused the key time after time (most likely revoked, but no notice arrived).
	Signed bool      `json:"signed"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

func revokedPath(stateDir string) string { return filepath.Join(stateDir, revokedFile) }

// recordRevocation writes what the agent's end (err) says about the node, if it was
// a revocation or a refused identity; other errors leave no record.
func recordRevocation(stateDir string, id identity.Identity, err error, now time.Time) error {
	r := revocation{Node: id.Node, PublicKey: id.PublicKey, At: now.UTC(), Reason: err.Error()}
	var re *agent.RevokedError
	switch {
	case errors.As(err, &re):
		r.Signed, r.At = true, re.At.UTC()
	case errors.Is(err, agent.ErrRevoked):
		r.Signed = true
	case errors.Is(err, agent.ErrIdentityRefused):
	default:
		return nil
	}
	data, merr := json.MarshalIndent(r, "", "  ")
	if merr != nil {
		return merr
	}
	return atomicfile.WriteFile(revokedPath(stateDir), append(data, '\n'), 0o600)
}

// errRecordUnusable is loadRevocation's refusal of a revocation record it cannot read
// (too large, cut short, not a record): the file is left as it is, for a person to
// look at and remove.
var errRecordUnusable = errors.New("unusable revocation record")

// maxRevokedFile bounds what is read of revokedFile: a record is a few hundred bytes.
const maxRevokedFile = 64 << 10

// loadRevocation reads the record about id, if there is one. A record about another
// identity (the machine was enrolled again since) is no record. It is read as every
// file of the state directory is: a regular file of this user's, never through a
// link.
func loadRevocation(stateDir string, id identity.Identity) (revocation, bool, error) {
	data, err := jsonfile.ReadRegular(revokedPath(stateDir), maxRevokedFile)
	if errors.Is(err, fs.ErrNotExist) {
		return revocation{}, false, nil
	}
	if errors.Is(err, jsonfile.ErrTooBig) {
		return revocation{}, false, fmt.Errorf("%w: %s is larger than %d bytes, far more than a record: remove it; `meshhost run` records a revocation again if there is one", errRecordUnusable, revokedPath(stateDir), maxRevokedFile)
	}
	if err != nil {
		return revocation{}, false, err
	}
	var r revocation
	err = json.Unmarshal(data, &r)
	if err == nil {
		// Two members of one name (the last would win) or a name in another
		// case: not a record this agent wrote.
		err = jsonkeys.Check(data, &r)
	}
	if err != nil {
		return revocation{}, false, fmt.Errorf("%w: %s is corrupt (%v): remove it; `meshhost run` records a revocation again if there is one", errRecordUnusable, revokedPath(stateDir), err)
	}
	if r.PublicKey != id.PublicKey {
		return revocation{}, false, nil
	}
	return r, true, nil
}

// clearRefusal removes a record of refusals once the mesh accepted the node's key
// again. A signed revocation is never cleared: the mesh does not take one back.
func clearRefusal(stateDir string, id identity.Identity) error {
	r, ok, err := loadRevocation(stateDir, id)
	if err != nil || !ok || r.Signed {
		return err
	}
	return os.Remove(revokedPath(stateDir))
}

// err is the record as the error status and run end with: it wraps
// agent.ErrRevoked (signed) or agent.ErrIdentityRefused, exit code 6 either way.
func (r revocation) err(stateDir string) error {
	if r.Signed {
		return fmt.Errorf("%w: %s was revoked at %s; the agent will not connect again. %s",
			agent.ErrRevoked, r.Node, r.At.Format(time.RFC3339), adoptAgain(stateDir))
	}
	return fmt.Errorf("%w: the mesh refused %s's key time after time (last at %s): it was revoked without the notice reaching it, the control plane lost it, "+
		"or no control node had room for another host (their logs say so; then wait, or raise their open-file limit). `meshhost run` tries again; "+
		"if `meshctl nodes` does not list the node, %s",
		agent.ErrIdentityRefused, r.Node, r.At.Format(time.RFC3339), identity.StartOver(stateDir))
}

// adoptAgain says how to adopt a revoked machine again: the whole state directory
// goes, not its identity alone (a walkthrough: the advice was to remove
// identity.json, and the revoked node's applied declaration, its secrets included,
// stayed beside the next node's identity until that node's first declaration).
func adoptAgain(stateDir string) string {
	return "To adopt this machine again, " + identity.StartOver(stateDir)
}

// revokedInTheWay is enrol's refusal of a state directory whose identity the mesh
// revoked (a signed notice the agent recorded): whatever the token, no enrolment
// finishes over it, and the mesh, asked again with the revoked key, only refuses
// the login. It matches identity.ErrAlreadyEnrolled (exit 5). Nil when the
// directory holds no identity, or one not revoked, or one this very token's earlier
// run saved (its pending key, of this token, still there): enrol finishes that run,
// and status then says the node is revoked. A token expired by now's reading (one
// of the revoked node's own gets past the expiry check, so that the identity is
// the news) is not worth keeping: the refusal asks for a new one.
func revokedInTheWay(stateDir string, tok token.Token, now time.Time) error {
	tokenHash := tok.SecretHash()
	id, err := identity.Load(stateDir)
	if err != nil {
		return nil // no identity (or a damaged one): enrol says so itself
	}
	if p, err := identity.LoadPending(stateDir); err == nil && p.TokenHash == hex.EncodeToString(tokenHash[:]) {
		return nil
	}
	rec, ok, err := loadRevocation(stateDir, id)
	if err != nil || !ok || !rec.Signed {
		return nil
	}
	next := "Keep the token; " + strings.Replace(identity.StartOver(stateDir), "enrol with a new token", "run enrol again with the token (one minted after the revocation)", 1)
	if !now.Before(tok.Expiry) {
		next = fmt.Sprintf("The token has expired too (at %s, by this machine's clock): ask the operator for a new one (meshctl token), then %s",
			tok.Expiry.UTC().Format(time.RFC3339), identity.StartOver(stateDir))
	}
	return revokedInTheWayError(fmt.Sprintf("this machine is already enrolled: %s holds node %s of mesh %s, which the mesh revoked at %s (%s): its key is refused for good, so no token enrols over it. %s",
		identity.Path(stateDir), id.Node, id.Mesh, rec.At.Format(time.RFC3339), revokedPath(stateDir), next))
}

// revokedInTheWayError is revokedInTheWay's refusal, said as the other "already
// enrolled" refusals are (identity.ErrAlreadyEnrolled's own text begins
// "identity: ", which no other refusal shows). It matches ErrAlreadyEnrolled.
type revokedInTheWayError string

func (e revokedInTheWayError) Error() string { return string(e) }

// Is reports whether target is identity.ErrAlreadyEnrolled.
func (e revokedInTheWayError) Is(target error) bool { return target == identity.ErrAlreadyEnrolled }
