// Package identity keeps the host agent's identity file: the node's nkey seed
// and what it learnt when it enrolled.
//
// The file is <state>/identity.json, mode 0600, written once and never
// replaced. Loading it tells apart four states, because each calls for a
// different action: absent (an ordinary machine that has not enrolled),
// unreadable, truncated and corrupt. The last three must never be treated as
// the first: the mesh still believes the identity in the file, and enrolling
// again over it would strand the node.
//
// The seed is the only secret here. It is written to the file and nowhere
// else: String and GoString (and so %v, %+v, %#v, %s and %q), slog and
// json.Marshal all leave it out, and under any other verb (%d, %x) the seed's
// own type, Secret, prints "<redacted>".
package identity

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/host/atomicfile"
	"mesh/host/statedir"
	"mesh/host/token"
)

const (
	// FileName is the identity file's name inside the state directory.
	FileName = "identity.json"
	// PendingFileName is the unfinished enrolment's file name inside the state
	// directory.
	PendingFileName = "enrol-pending.json"
	// FormatVersion is the version of both files' layout this agent writes and
	// reads. Any other version is refused as corrupt, never guessed at.
	FormatVersion = 1
	// MaxFileSize caps what Load reads: an identity is a few kilobytes, and a
	// file far larger is not one.
	MaxFileSize = 256 << 10
)

// Subjects are the NATS subjects the mesh assigned to this node at enrolment.
type Subjects struct {
	Declarations string `json:"declarations"`
	Status       string `json:"status"`
	Sync         string `json:"sync"`
	InboxPrefix  string `json:"inbox_prefix"`
}

// Identity is what a node keeps from its enrolment. Its JSON form is the
// identity file's layout; json.Marshal of an Identity leaves out the seed, so
// only Save writes it.
type Identity struct {
	Format      int       `json:"format"` // FormatVersion
	Mesh        string    `json:"mesh"`
	Node        string    `json:"node"`
	Role        string    `json:"role"`
	Seed        Secret    `json:"nkey_seed"`    // nkeys user seed ("SU..."); the private half never leaves this file
	PublicKey   string    `json:"public_key"`   // nkeys user public key ("U..."), must match Seed
	CAPEM       string    `json:"ca_pem"`       // the mesh CA certificate
	CAPin       string    `json:"ca_pin"`       // 64 hex, SHA-256 of the CA's SubjectPublicKeyInfo; must match CAPEM
	Brokers     []string  `json:"brokers"`      // ip:port, tried in order
	Subjects    Subjects  `json:"subjects"`     // assigned by the mesh
	SigningKeys []string  `json:"signing_keys"` // hex Ed25519 keys from the token: the trust anchor for the first keyring
	EnrolledAt  time.Time `json:"enrolled_at"`
}

// fileIdentity has Identity's fields and tags but none of its methods, so
// encoding it writes the seed. Only Save and Load use it.
type fileIdentity Identity

// Path returns the identity file's path in stateDir.
func Path(stateDir string) string { return filepath.Join(stateDir, FileName) }

// ExposedError says that the identity file was readable by group or others (a copy
// restored with loose modes, a chmod by hand): its key may have been read.
type ExposedError struct {
	Path string
	Mode fs.FileMode // its permissions as they were
	// Err is why it could not be made private; nil when it was.
	Err error
}

func (e *ExposedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("identity: %s (mode %v) is readable by other users and could not be made private: %v", e.Path, e.Mode, e.Err)
	}
	return fmt.Sprintf("identity: %s was readable by other users (mode %v); only its owner may read it now", e.Path, e.Mode)
}

func (e *ExposedError) Unwrap() error { return e.Err }

// MakePrivate takes group and others' permissions off the identity file in
// stateDir, and says so with *ExposedError if there were any. The state directory
// is the agent's own, and no one else may write it (statedir.Check): the file
// cannot be swapped between the look and the change.
func MakePrivate(stateDir string) error {
	path := Path(stateDir)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	e := &ExposedError{Path: path, Mode: fi.Mode().Perm()}
	e.Err = os.Chmod(path, fi.Mode().Perm()&^0o077)
	return e
}

// Validate reports the first field that is missing or inconsistent: the format
// version, the mesh and node ids, the role, the seed against the public key,
// the CA certificate against its pin, the broker addresses, the subjects and
// the signing keys. Its errors are *InvalidError and never contain the seed.
func (id Identity) Validate() error {
	kp, err := id.validate()
	if kp != nil {
		kp.Wipe()
	}
	return err
}

// ValidateWith is Validate for an identity made with kp (enrolment's, before it is
// saved): its seed and public key are compared with kp's instead of deriving the key
// pair from the seed again. Save still derives it.
func (id Identity) ValidateWith(kp *KeyPair) error {
	if err := id.validateHead(); err != nil {
		return err
	}
	switch {
	case kp == nil:
		return errors.New("identity: no key pair to check the identity against")
	case kp.priv == nil:
		return errWiped
	}
	if err := checkUserSeed(string(id.Seed)); err != nil {
		return err
	}
	if !nkeys.IsValidPublicUserKey(id.PublicKey) {
		return invalid("public_key", "is not an nkeys user public key")
	}
	if string(kp.seed) != string(id.Seed) || kp.pub != id.PublicKey {
		return invalid("nkey_seed", "is not the key pair's this identity was made with")
	}
	return id.validateRest()
}

// validateHead checks what Validate checks before the seed.
func (id Identity) validateHead() error {
	if id.Format != FormatVersion {
		return invalid("format", "is %d; this agent reads version %d", id.Format, FormatVersion)
	}
	if err := checkID("mesh", id.Mesh); err != nil {
		return err
	}
	if err := checkID("node", id.Node); err != nil {
		return err
	}
	if id.Role != "control" && id.Role != "worker" {
		return invalid("role", "is %q; it must be \"control\" or \"worker\"", truncate(id.Role, 20))
	}
	return nil
}

// validate is Validate that also returns the key pair it derived to check the seed,
// for a caller that needs it (the caller wipes it), or nil with the first fault.
func (id Identity) validate() (_ *KeyPair, err error) {
	if err := id.validateHead(); err != nil {
		return nil, err
	}
	kp, err := id.KeyPair()
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			kp.Wipe()
		}
	}()
	if err := id.validateRest(); err != nil {
		return nil, err
	}
	return kp, nil
}

// validateRest checks what Validate checks after the seed.
func (id Identity) validateRest() error {
	if err := checkCA(id.CAPEM, id.CAPin); err != nil {
		return err
	}
	if len(id.Brokers) == 0 {
		return invalid("brokers", "is empty; at least one broker address is needed")
	}
	for i, b := range id.Brokers {
		if err := checkBroker(b); err != nil {
			return invalid(fmt.Sprintf("brokers[%d]", i), "%v", err)
		}
	}
	for _, s := range []struct{ field, subject string }{
		{"subjects.declarations", id.Subjects.Declarations},
		{"subjects.status", id.Subjects.Status},
		{"subjects.sync", id.Subjects.Sync},
		{"subjects.inbox_prefix", id.Subjects.InboxPrefix},
	} {
		if err := checkSubject(s.subject); err != nil {
			return invalid(s.field, "%v", err)
		}
	}
	if len(id.SigningKeys) == 0 {
		return invalid("signing_keys", "is empty; at least one declaration signing key is needed")
	}
	seen := make(map[string]bool, len(id.SigningKeys))
	for i, k := range id.SigningKeys {
		b, err := hex.DecodeString(k)
		if err != nil || len(b) != 32 {
			return invalid(fmt.Sprintf("signing_keys[%d]", i), "is not 64 hex digits (an Ed25519 public key)")
		}
		if seen[string(b)] {
			return invalid(fmt.Sprintf("signing_keys[%d]", i), "repeats an earlier key")
		}
		seen[string(b)] = true
	}
	if id.EnrolledAt.IsZero() {
		return invalid("enrolled_at", "is missing")
	}
	return nil
}

// KeyPair returns the node's key pair from the seed, after checking that the
// seed is a user seed and that it matches PublicKey. The caller should Wipe it
// when done.
func (id Identity) KeyPair() (*KeyPair, error) {
	kp, err := userKeyPair(string(id.Seed))
	if err != nil {
		return nil, err
	}
	if !nkeys.IsValidPublicUserKey(id.PublicKey) {
		kp.Wipe()
		return nil, invalid("public_key", "is not an nkeys user public key")
	}
	if kp.pub != id.PublicKey {
		kp.Wipe()
		return nil, invalid("nkey_seed", "does not match public_key %s", id.PublicKey)
	}
	return kp, nil
}

// String describes the identity without its seed.
func (id Identity) String() string {
	return fmt.Sprintf("Identity{Format:%d Mesh:%q Node:%q Role:%q Seed:<redacted> PublicKey:%q CAPin:%q Brokers:%q Subjects:%+v SigningKeys:%q EnrolledAt:%s}",
		id.Format, id.Mesh, id.Node, id.Role, id.PublicKey, id.CAPin, id.Brokers, id.Subjects, id.SigningKeys, id.EnrolledAt.Format(time.RFC3339))
}

// GoString is String, so that %#v does not print the seed either. With String
// it covers %v, %+v, %s and %q. (Identity cannot implement fmt.Formatter: its
// Format field takes the method's name. Under the other verbs fmt prints the
// fields, and the seed's type, Secret, prints "<redacted>".)
func (id Identity) GoString() string { return "identity." + id.String() }

// LogValue keeps the seed out of slog, whose JSON handler would otherwise
// encode the struct itself.
func (id Identity) LogValue() slog.Value { return slog.StringValue(id.String()) }

// MarshalJSON encodes the identity without its seed, for status output and
// logs. The identity file is written by Save, which includes it.
func (id Identity) MarshalJSON() ([]byte, error) {
	id.Seed = ""
	return json.Marshal(struct {
		fileIdentity
		Seed string `json:"nkey_seed,omitempty"`
	}{fileIdentity: fileIdentity(id)})
}

// Load reads the identity in stateDir. Its errors tell apart:
//   - absent: *NotEnrolledError (ErrNotEnrolled), the ordinary state of a machine
//     that has not enrolled, whose text names the enrolment to run (and, when the
//     state directory itself is missing, NoDir, how to put back one moved away);
//   - unreadable: *UnreadableError (ErrUnreadable), wrapping the OS error;
//   - truncated: *TruncatedError (ErrTruncated), empty or cut short;
//   - corrupt: *CorruptError (ErrCorrupt), readable but not a valid identity.
//
// The messages of the last three tell the person not to enrol again over the
// file, and what to do instead.
func Load(stateDir string) (Identity, error) {
	return load(Path(stateDir), readRegular)
}

// LoadKeyPair is Load that also returns the node's key pair (see Identity.KeyPair),
// which the caller should Wipe when done. Load derives the key from the seed to check
// it against the public key; this hands that key on instead of having a starting
// agent derive it a second time.
func LoadKeyPair(stateDir string) (Identity, *KeyPair, error) {
	return loadKeyPair(Path(stateDir), readRegular)
}

func load(path string, read readFunc) (Identity, error) {
	id, kp, err := loadKeyPair(path, read)
	if err != nil {
		return Identity{}, err
	}
	kp.Wipe()
	return id, nil
}

func loadKeyPair(path string, read readFunc) (Identity, *KeyPair, error) {
	var f fileIdentity
	if err := decodeFile(path, read, MaxFileSize, FormatVersion, false, &f, &f.Format); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			_, perr := os.Lstat(PendingPath(filepath.Dir(path)))
			_, derr := os.Lstat(filepath.Dir(path))
			return Identity{}, nil, &NotEnrolledError{Path: path, Pending: perr == nil, NoDir: errors.Is(derr, fs.ErrNotExist)}
		}
		return Identity{}, nil, err
	}
	id := Identity(f)
	kp, err := id.validate()
	if err != nil {
		return Identity{}, nil, &CorruptError{Path: path, Reason: invalidReason(err)}
	}
	return id, kp, nil
}

// Save writes the identity into stateDir, creating the directory (0700) if it
// is missing, with atomicfile.CreateExclusive and mode 0600. A state directory
// another user owns, or group or others may write, is refused (statedir.ErrUnsafe). A zero Format is
// taken as FormatVersion. It refuses an identity that fails Validate, and it
// never replaces an existing file: if one is there, it returns *EnrolledError
// (ErrAlreadyEnrolled). A full disk gives an error matching syscall.ENOSPC.
func Save(stateDir string, id Identity) error {
	if id.Format == 0 {
		id.Format = FormatVersion
	}
	if err := id.Validate(); err != nil {
		return fmt.Errorf("identity: refusing to save an invalid identity: %w", err)
	}
	data, err := json.MarshalIndent(fileIdentity(id), "", "  ")
	if err != nil {
		return fmt.Errorf("identity: encoding: %w", err)
	}
	data = append(data, '\n')
	if len(data) > MaxFileSize {
		return fmt.Errorf("identity: refusing to save an identity of %d bytes, more than the %d Load accepts", len(data), MaxFileSize)
	}
	if err := statedir.Prepare(stateDir); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	path := Path(stateDir)
	err = atomicfile.CreateExclusive(path, data, 0o600)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrExist):
		e := &EnrolledError{Path: path}
		if old, lerr := Load(stateDir); lerr == nil {
			e.Mesh, e.Node = old.Mesh, old.Node
		}
		return e
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("identity: cannot save %s because the disk is full; free some space and run the enrolment again "+
			"(the same token works until it expires): %w", path, err)
	default:
		return fmt.Errorf("identity: cannot save %s: %w", path, err)
	}
}

// CheckAbsent is the enrolment precondition: nil only when no identity file
// exists. A valid identity gives *EnrolledError (ErrAlreadyEnrolled); an
// unreadable, truncated or corrupt one gives Load's error for it.
func CheckAbsent(stateDir string) error {
	id, err := Load(stateDir)
	if err == nil {
		return &EnrolledError{Path: Path(stateDir), Mesh: id.Mesh, Node: id.Node}
	}
	if errors.Is(err, ErrNotEnrolled) {
		return nil
	}
	return err
}

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// checkID enforces the protocol's identifier rule: 1 to 63 of a-z, 0-9 and -,
// starting and ending with a letter or digit, so ids are safe in subjects,
// tokens and file names.
func checkID(field, s string) error {
	if s == "" {
		return invalid(field, "is missing")
	}
	if len(s) > 63 {
		return invalid(field, "is %d characters long; at most 63 are allowed", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return invalid(field, "is %q; ids are lower-case letters, digits and inner hyphens", truncate(s, 63))
		}
	}
	return nil
}

// checkCA parses the CA certificate and checks that the pin is the SHA-256 of
// its SubjectPublicKeyInfo. Exactly one certificate is expected.
func checkCA(caPEM, pin string) error {
	if caPEM == "" {
		return invalid("ca_pem", "is missing")
	}
	block, rest := pem.Decode([]byte(caPEM))
	if block == nil {
		return invalid("ca_pem", "holds no PEM block")
	}
	if block.Type != "CERTIFICATE" {
		return invalid("ca_pem", "holds a PEM block of type %q, not a CERTIFICATE", truncate(block.Type, 40))
	}
	if strings.TrimSpace(string(rest)) != "" {
		return invalid("ca_pem", "holds more than one certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return invalid("ca_pem", "is not a valid certificate: %v", err)
	}
	want, err := hex.DecodeString(pin)
	if err != nil || len(want) != sha256.Size {
		return invalid("ca_pin", "is not 64 hex digits")
	}
	got := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	if string(got[:]) != string(want) {
		return invalid("ca_pin", "does not match the certificate in ca_pem (whose pin is %x)", got)
	}
	return nil
}

// checkBroker accepts what a token accepts as a broker address (token.ParseBroker):
// a broker is reached before any name can be resolved, and an address a token
// refuses (a zone, 0.0.0.0, port 0) is one the agent would fail to dial for as long
// as it ran.
func checkBroker(b string) error {
	if _, err := token.ParseBroker(b); err != nil {
		return fmt.Errorf("is %q: %v", truncate(b, 80), err)
	}
	return nil
}

// checkSubject accepts a literal NATS subject: dot-separated non-empty tokens,
// no wildcards, no white space or control characters.
func checkSubject(s string) error {
	if s == "" {
		return errors.New("is missing")
	}
	if len(s) > 255 {
		return fmt.Errorf("is %d bytes long; at most 255 are allowed", len(s))
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" {
			return fmt.Errorf("is %q, which has an empty token", s)
		}
		for _, r := range tok {
			if r <= ' ' || r == 0x7f || r == '*' || r == '>' {
				return fmt.Errorf("is %q; a subject here must be literal, without wildcards or spaces", s)
			}
		}
	}
	return nil
}
