package api

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Operations on operator credentials issued by name (meshctl operator).
const (
	// OpOperatorAdd records credentials `meshctl operator add` issued where the
	// operator account key is; the mesh keeps their name and public key.
	OpOperatorAdd = "operator.add"
	// OpOperatorList lists the recorded credentials.
	OpOperatorList = "operator.list"
	// OpOperatorRevoke revokes the credentials issued under names: refused at
	// login from then on, their open connections closed.
	OpOperatorRevoke = "operator.revoke"
)

// OperatorAddRequest records the operator credentials whose user JWT is JWT (its
// name, user key and expiry; the seed never leaves the machine that issued them).
type OperatorAddRequest struct {
	JWT string `json:"jwt"`
	// IssuedBy is the control node whose operator account key signed them (the
	// record's issued_by; the leader's id when it is no node id).
	IssuedBy string `json:"issued_by,omitempty"`
	// Renew records them beside the valid credentials of their name, which stay
	// valid (meshctl operator add NAME --renew).
	Renew bool `json:"renew,omitempty"`
}

// OperatorListRequest has no arguments.
type OperatorListRequest struct{}

// OperatorRevokeRequest revokes the credentials issued under each of Names; with
// Keys, those of the one name alone (meshctl operator revoke NAME --key KEY).
type OperatorRevokeRequest struct {
	Names []string `json:"names"`
	Keys  []string `json:"keys,omitempty"`
}

// MaxOperatorNames is how many names one revocation names at most.
const MaxOperatorNames = 64

// OperatorView is a recorded operator credential as operators see it.
type OperatorView struct {
	Name      string    `json:"name"`
	Key       string    `json:"key"`
	IssuedAt  time.Time `json:"issued_at"`
	Expires   time.Time `json:"expires"`
	IssuedBy  string    `json:"issued_by,omitempty"`
	RevokedAt time.Time `json:"revoked_at,omitzero"`
	// State is valid, expired or revoked, by the leader's clock.
	State string `json:"state"`
	// AlreadyRevoked, in an OperatorRevokeResult only, says the credentials were
	// revoked before this request: a revocation run again changed nothing.
	AlreadyRevoked bool `json:"already_revoked,omitempty"`
}

// States of operator credentials (OperatorView.State).
const (
	OperatorValid   = "valid"
	OperatorExpired = "expired"
	OperatorRevoked = "revoked"
)

// OperatorAddResult is the record made (Repeated: made by the same request before).
type OperatorAddResult struct {
	Operator OperatorView `json:"operator"`
	Repeated bool         `json:"repeated,omitempty"`
}

// OperatorListResult lists the recorded credentials, by name then issue time.
type OperatorListResult struct {
	Operators []OperatorView `json:"operators"`
}

// OperatorRevokeResult lists the credentials the names held, each revoked now or
// before (its RevokedAt says when).
type OperatorRevokeResult struct {
	Revoked []OperatorView `json:"revoked"`
}

// MaxOperatorNameLen bounds an operator's name.
const MaxOperatorNameLen = 64

// CheckOperatorName accepts a name for operator credentials: 1 to 64 letters,
// digits and . _ @ + -, starting with a letter or digit (a person's login or mail
// address, an automation's name), so that it reads the same in every list, log
// and JWT.
func CheckOperatorName(name string) error {
	if name == "" || len(name) > MaxOperatorNameLen {
		return fmt.Errorf("operator name %q: 1 to %d characters", CleanText(name, MaxOperatorNameLen), MaxOperatorNameLen)
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '@' || c == '+' || c == '-'):
		default:
			return fmt.Errorf("operator name %q: letters, digits and . _ @ + - only, starting with a letter or digit", CleanText(name, MaxOperatorNameLen))
		}
	}
	return nil
}

// OperatorSigHeader carries an operator's signature of a change request, so that the
// control plane can log who asked for it: "v1 KEY UNIX SIG", SIG the raw URL base64
// of the Ed25519 signature by the user key KEY (the one the credentials log in with)
// over OperatorSigned. The broker does not vouch for headers (a client can write
// one nats.go reads before the broker's own); a signature needs the key's seed.
const OperatorSigHeader = "Mesh-Operator-Sig"

// MaxOperatorSigSkew is how far a signed request's time may be from the control
// plane's clock.
const MaxOperatorSigSkew = 5 * time.Minute

// OperatorSigned is what an operator signs for a change request: the operation,
// the time, the request id and the body, exactly as sent.
func OperatorSigned(op string, at int64, requestID string, body []byte) []byte {
	sum := sha256.Sum256(body)
	return []byte(fmt.Sprintf("mesh-operator-request-v1\x00%s\x00%d\x00%s\x00%x", op, at, requestID, sum))
}

// FormatOperatorSig is the header's value.
func FormatOperatorSig(key string, at int64, sig []byte) string {
	return "v1 " + key + " " + strconv.FormatInt(at, 10) + " " + base64.RawURLEncoding.EncodeToString(sig)
}

// ParseOperatorSig reads the header's value; ok is false for anything but its form.
func ParseOperatorSig(v string) (key string, at int64, sig []byte, ok bool) {
	f := strings.Fields(v)
	if len(v) > 512 || len(f) != 4 || f[0] != "v1" {
		return "", 0, nil, false
	}
	at, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return "", 0, nil, false
	}
	if sig, err = base64.RawURLEncoding.DecodeString(f[3]); err != nil {
		return "", 0, nil, false
	}
	return f[1], at, sig, true
}
