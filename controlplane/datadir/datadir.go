// Package datadir is the layout of a control node's data directory: which file holds
// what, with which mode, and how each is read back. Secrets (the CA key, TLS keys, the
// signing key, operator credentials) are written 0600 and atomically.
package datadir

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/pki"
	"mesh/host/atomicfile"
	"mesh/host/jsonkeys"
	"mesh/host/readfile"
)

// File names inside a data directory.
const (
	ConfigFile     = "mesh.json"
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem" // only on the machine that ran bootstrap
	TLSCertFile    = "tls.pem"
	TLSKeyFile     = "tls-key.pem"
	SigningKeyFile = "signing-key.pem"  // one PEM block per key of the keyring, newest last
	CurveKeyFile   = "control-curve.nk" // this control node's curve key: new signing keys are sealed to it
	AdminCredsFile = "admin.creds"
	AccountKeyFile = "admin-account.nk" // only on the machine that ran bootstrap
	RaftDir        = "raft"
	// JoinPendingFile holds the keys of a `meshctl join` until it completes.
	JoinPendingFile = "join-pending.json"
)

// ConfigFormat is the version of mesh.json this program writes.
const ConfigFormat = 1

// Config is mesh.json: the non-secret facts about this control node and its mesh.
type Config struct {
	Format int    `json:"format"`
	Mesh   string `json:"mesh"`
	// Node is this control node's id.
	Node string `json:"node"`
	// Listen is the broker's client address; RaftListen and ClusterListen are the
	// addresses control nodes reach each other on.
	Listen        string `json:"listen"`
	RaftListen    string `json:"raft_listen"`
	ClusterListen string `json:"cluster_listen"`
	// Advertise, when set, is the broker address hosts dial, apart from Listen: a
	// node that joined with --listen (behind NAT). Bootstrap's node keeps its own
	// in Brokers.
	Advertise string `json:"advertise,omitempty"`
	// Brokers are the client addresses of the mesh's brokers, the ones tokens carry.
	Brokers []string `json:"brokers"`
	// CAPin is the hex SHA-256 of the CA's SubjectPublicKeyInfo.
	CAPin string `json:"ca_pin"`
	// AdminAccount is the public nkey that issues operator credentials.
	AdminAccount string `json:"admin_account"`
	// CAHolder is the control node holding the CA key: only it mints control tokens.
	CAHolder string `json:"ca_holder,omitempty"`
	// Joining is set while `meshctl join` has not completed: the node is not a
	// member yet and serve refuses to start.
	Joining bool `json:"joining,omitempty"`
	// Joined is set by `meshctl join`: this control node joined a mesh that was
	// bootstrapped elsewhere, and bootstrap has nothing to do here.
	Joined bool `json:"joined,omitempty"`
	// Served is set by `meshctl serve` once it is first ready: from then on the
	// Raft store holds the mesh's state, and should it be lost, bootstrap refuses
	// to make a new, empty Raft cluster here. A node that served only under a
	// version from before the field lacks it until it serves again.
	Served bool `json:"served,omitempty"`
}

// JoinedNode reports whether the directory is that of a control node made by
// `meshctl join` (completed or not) rather than by bootstrap. Directories joined
// before Joined was recorded are known by their CA holder being another node.
func (c Config) JoinedNode() bool {
	return c.Joined || c.Joining || c.CAHolder != "" && c.CAHolder != c.Node
}

// Dir is a data directory.
type Dir string

// Path returns the path of name inside the directory.
func (d Dir) Path(name string) string { return filepath.Join(string(d), name) }

// ErrNoConfig means the directory holds no mesh.json: it was never bootstrapped or
// joined.
var ErrNoConfig = errors.New("no mesh configuration")

// ErrJoinIncomplete means mesh.json belongs to a join that has not completed.
var ErrJoinIncomplete = errors.New("join incomplete")

// MaxFileSize bounds every file of a data directory this package reads: the largest,
// a certificate or the signing keys, is a few KiB. A larger file is refused after
// reading one byte more than this, never read whole.
const MaxFileSize = 1 << 20

// ErrTooLarge means a file of the data directory is over MaxFileSize: not one this
// program wrote.
var ErrTooLarge = errors.New("larger than any file of a data directory")

// ErrTruncated means a file of the data directory is empty or ends before its
// content does: a write cut short (a full disk, a crash) or a copy that stopped.
var ErrTruncated = errors.New("empty or cut short")

// ErrCorrupt means a file of the data directory is whole but not what it should be:
// not JSON, not PEM, a key of another kind, fields missing or of another type.
var ErrCorrupt = errors.New("corrupt")

// ErrFormat means mesh.json has another format version than this program reads:
// most likely written by another version of meshctl.
var ErrFormat = errors.New("another format version")

// ErrNotAFile means something other than a regular file (a directory, a FIFO, a
// device) is where a file of the data directory belongs; nothing was read from it.
// Such an error also matches readfile.ErrNotRegular. A *NotADirectoryError, the
// same mistake made of the data directory itself, matches it too.
var ErrNotAFile = errors.New("not a regular file")

// notAFile is a readfile.NotRegularError that matches ErrNotAFile too, with its
// text alone.
type notAFile struct{ err error }

func (e notAFile) Error() string   { return e.err.Error() }
func (e notAFile) Unwrap() []error { return []error{ErrNotAFile, e.err} }

// CheckRegular returns nil when path is absent or a regular file (followed if a
// link), and an error matching ErrNotAFile, naming what is there, when it is a
// directory, a FIFO or a device: for files opened by libraries that would fail on
// one with a bare "is a directory".
func CheckRegular(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	return notAFile{&readfile.NotRegularError{Path: path, Mode: fi.Mode()}}
}

// readCapped reads the file at path, of at most MaxFileSize bytes. Its errors wrap
// the file system's (fs.ErrNotExist for an absent file), ErrTooLarge, or
// ErrNotAFile for a directory, a FIFO or a device where a file belongs: refused
// without waiting for a FIFO's writer or reading a device to the cap.
func readCapped(path string) ([]byte, error) {
	data, err := readfile.Regular(path, MaxFileSize)
	switch {
	case errors.Is(err, readfile.ErrTooLarge):
		return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, MaxFileSize)
	case errors.Is(err, readfile.ErrNotRegular):
		return nil, notAFile{err}
	}
	return data, err
}

// ReadConfigRaw reads mesh.json without judging it: for bootstrap and join, which
// resume what an earlier run left.
func (d Dir) ReadConfigRaw() (Config, error) {
	data, err := readCapped(d.Path(ConfigFile))
	if err != nil {
		err = d.inNotADirectory(err)
		if errors.Is(err, ErrTooLarge) {
			return Config{}, fmt.Errorf("%s: %w", d.Path(ConfigFile), err)
		}
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", d.Path(ConfigFile), err)
	}
	return c, nil
}

// ParseConfig decodes the content of mesh.json: exactly one JSON object. Empty or
// cut-short content is ErrTruncated; anything else it cannot decode is ErrCorrupt.
// It does not judge the fields (LoadConfig does).
func ParseConfig(data []byte) (Config, error) {
	var c Config
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return Config{}, fmt.Errorf("%w: it is empty", ErrTruncated)
	}
	if bytes.HasPrefix(trimmed, []byte("\xef\xbb\xbf")) {
		// Refused, not skipped: every JSON file the mesh reads is read one way
		// (decision 0024), and none of its readers skips one; but said as what it
		// is, where it was "not a JSON object".
		return Config{}, fmt.Errorf("%w: it starts with a UTF-8 byte order mark (an editor added it when the file was saved): remove it (save it as UTF-8 without a BOM); meshctl writes mesh.json without one", ErrCorrupt)
	}
	if trimmed[0] != '{' {
		return Config{}, fmt.Errorf("%w: it is not a JSON object", ErrCorrupt)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&c)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			return Config{}, fmt.Errorf("%w: data after its JSON object", ErrCorrupt)
		}
		// encoding/json keeps the last of two members of one name and takes
		// "Listen" for "listen": neither comes from SaveConfig, and another
		// reader of the file would not read it the same way.
		if kerr := jsonkeys.Check(data, &c); kerr != nil {
			return Config{}, fmt.Errorf("%w: %v", ErrCorrupt, kerr)
		}
		return c, nil
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return Config{}, fmt.Errorf("%w: it ends within its JSON object", ErrTruncated)
	}
	return Config{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
}

// Exists reports whether name exists in the directory.
func (d Dir) Exists(name string) bool {
	_, err := os.Stat(d.Path(name))
	return err == nil
}

// LoadConfig reads mesh.json.
func (d Dir) LoadConfig() (Config, error) {
	data, err := readCapped(d.Path(ConfigFile))
	if err != nil {
		err = d.inNotADirectory(err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(string(d)); errors.Is(serr, fs.ErrNotExist) {
			// A path mistyped was told to bootstrap there: a second, unrelated
			// mesh (a walkthrough).
			return Config{}, fmt.Errorf("%w: %s does not exist: check the path to the control node's data directory (a new mesh is made with `meshctl bootstrap --data DIR`; a control node joins with `meshctl join`)", ErrNoConfig, d)
		}
		return Config{}, fmt.Errorf("%w in %s: run `meshctl bootstrap --data %s` (or `meshctl join`) first", ErrNoConfig, d, d)
	}
	if errors.Is(err, fs.ErrPermission) {
		// Another user's directory, as every other file of it (exit 7, with whom to
		// run as); it was a bare "permission denied", exit 1.
		return Config{}, &UnreadableError{Path: d.Path(ConfigFile), Err: err}
	}
	if errors.Is(err, ErrNotADirectory) {
		return Config{}, err
	}
	if err != nil {
		return Config{}, fmt.Errorf("read %s: %w", d.Path(ConfigFile), err)
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s is unusable: %w", d.Path(ConfigFile), err)
	}
	if c.Format != ConfigFormat {
		return Config{}, fmt.Errorf("%s has format %d; this program reads format %d: %w", d.Path(ConfigFile), c.Format, ConfigFormat, ErrFormat)
	}
	if c.Joining {
		return Config{}, fmt.Errorf("%w: the join of %s into mesh %s did not complete; run `meshctl join --data %s` again with the same token (if join says the token was used, %s was removed meanwhile: join with a new control token)", ErrJoinIncomplete, c.Node, c.Mesh, d, c.Node)
	}
	if c.Mesh == "" || c.Node == "" || c.Listen == "" || len(c.Brokers) == 0 || c.CAPin == "" {
		return Config{}, fmt.Errorf("%s is incomplete (mesh, node, listen, brokers and ca_pin are required): %w", d.Path(ConfigFile), ErrCorrupt)
	}
	return c, nil
}

// SaveConfig writes mesh.json.
func (d Dir) SaveConfig(c Config) error {
	c.Format = ConfigFormat
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return WriteFile(d.Path(ConfigFile), append(data, '\n'), 0o644)
}

// Pin returns the configured CA pin.
func (c Config) Pin() ([32]byte, error) {
	var pin [32]byte
	b, err := hex.DecodeString(c.CAPin)
	if err != nil || len(b) != 32 {
		return pin, fmt.Errorf("mesh.json: ca_pin is not 64 hex digits")
	}
	copy(pin[:], b)
	return pin, nil
}

// ReadFile reads a file of the directory, saying which one failed and why. A file over
// MaxFileSize is ErrTooLarge, not read whole.
func (d Dir) ReadFile(name string) ([]byte, error) {
	data, err := readCapped(d.Path(name))
	if err != nil {
		if err = d.inNotADirectory(err); errors.Is(err, ErrNotADirectory) {
			return nil, err
		}
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, &UnreadableError{Path: d.Path(name), Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.Path(name), err)
	}
	return data, nil
}

// ErrUnreadable means this user may not read a file of the data directory: the
// command runs as another user than the one the directory belongs to.
var ErrUnreadable = errors.New("a file of the data directory cannot be read by this user")

// UnreadableError is ErrUnreadable with the file, its owner and the reason.
type UnreadableError struct {
	Path string
	Err  error
}

func (e *UnreadableError) Error() string {
	owner := "the user it belongs to"
	if fi, err := os.Stat(e.Path); err == nil {
		if uid, ok := FileOwner(fi); ok {
			owner = userName(uid)
		}
	}
	return fmt.Sprintf("%s cannot be read by this user (%s: %v): run meshctl as %s, which the data directory belongs to (sudo -u, or as root)",
		e.Path, userName(os.Geteuid()), e.Err, owner)
}

// Unwrap returns ErrUnreadable and the file system's error.
func (e *UnreadableError) Unwrap() []error { return []error{ErrUnreadable, e.Err} }

// LoadCA reads the CA certificate and, when present, its key.
func (d Dir) LoadCA() (*pki.CA, error) {
	certPEM, _, err := d.LoadCACert()
	if err != nil {
		return nil, err
	}
	keyPEM, err := d.ReadFile(CAKeyFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s holds no CA key (%s): only the machine that ran bootstrap can mint control tokens and TLS identities", d, CAKeyFile)
		}
		return nil, err
	}
	// Each file named when it cannot be used ("CA key: no PEM private key found"
	// named neither it nor what to do).
	if _, err := pemBlock(keyPEM, "PRIVATE KEY", "private key"); err != nil {
		return nil, &FileError{Path: d.Path(CAKeyFile), Err: err}
	}
	ca, err := pki.LoadCA(certPEM, keyPEM)
	if err != nil {
		return nil, &FileError{Path: d.Path(CAKeyFile), Err: fmt.Errorf("%w: %w", ErrCorrupt, err)}
	}
	return ca, nil
}

// LoadSigningKey reads the newest declaration signing key.
func (d Dir) LoadSigningKey() (ed25519.PrivateKey, error) {
	keys, err := d.LoadSigningKeys()
	if err != nil {
		return nil, err
	}
	return keys[len(keys)-1], nil
}

// LoadSigningKeys reads every signing key held, oldest first.
func (d Dir) LoadSigningKeys() ([]ed25519.PrivateKey, error) {
	data, err := d.readRequired(SigningKeyFile)
	if err != nil {
		return nil, err
	}
	keys, err := ParseSigningKeys(data)
	if err != nil {
		return nil, &FileError{Path: d.Path(SigningKeyFile), Err: err}
	}
	return keys, nil
}

// SaveSigningKeys replaces the signing keys held (0600, atomically).
func (d Dir) SaveSigningKeys(keys []ed25519.PrivateKey) error {
	data, err := EncodeSigningKeys(keys)
	if err != nil {
		return err
	}
	return WriteFile(d.Path(SigningKeyFile), data, 0o600)
}

// EncodeSigningKeys encodes keys as consecutive PKCS#8 PEM blocks.
func EncodeSigningKeys(keys []ed25519.PrivateKey) ([]byte, error) {
	var out []byte
	for _, k := range keys {
		b, err := EncodeSigningKey(k)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return out, nil
}

// ParseSigningKeys decodes one or more PKCS#8 PEM Ed25519 keys.
func ParseSigningKeys(data []byte) ([]ed25519.PrivateKey, error) {
	var keys []ed25519.PrivateKey
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		k, err := ParseSigningKey(pem.EncodeToMemory(block))
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		if len(bytes.TrimSpace(data)) == 0 {
			return nil, fmt.Errorf("signing key: %w: the file is empty", ErrTruncated)
		}
		if bytes.HasPrefix(bytes.TrimSpace(data), []byte("-----BEGIN")) {
			return nil, fmt.Errorf("signing key: %w: key 1 is not a whole PEM block", ErrTruncated)
		}
		return nil, fmt.Errorf("signing key: %w: no PEM private key found", ErrCorrupt)
	}
	// The newest key is the last: a file cut short within it, or anything after the
	// last whole key, must not leave the older keys to be taken for the keyring.
	if rest = bytes.TrimSpace(rest); len(rest) > 0 {
		if bytes.HasPrefix(rest, []byte("-----BEGIN")) {
			return nil, fmt.Errorf("signing key: %w: key %d is not a whole PEM block", ErrTruncated, len(keys)+1)
		}
		return nil, fmt.Errorf("signing key: %w: data that is not a PEM block after key %d", ErrCorrupt, len(keys))
	}
	return keys, nil
}

// LoadCurveKey reads this control node's curve key.
func (d Dir) LoadCurveKey() (nkeys.KeyPair, error) {
	seed, err := d.readRequired(CurveKeyFile)
	if err != nil {
		return nil, err
	}
	seed = bytes.TrimSpace(seed)
	if len(seed) == 0 {
		return nil, &FileError{Path: d.Path(CurveKeyFile), Err: fmt.Errorf("%w: the file is empty", ErrTruncated)}
	}
	kp, err := nkeys.FromCurveSeed(seed)
	if err != nil {
		return nil, &FileError{Path: d.Path(CurveKeyFile), Err: fmt.Errorf("%w: not a curve key seed (%w)", ErrCorrupt, err)}
	}
	return kp, nil
}

// CredsUserKey returns the public key of the user a NATS .creds file authenticates
// as: what the mesh records of a control node's operator credentials.
func CredsUserKey(creds []byte) (string, error) {
	kp, err := jwt.ParseDecoratedNKey(creds)
	if err != nil {
		return "", fmt.Errorf("operator credentials: %w: %w", ErrCorrupt, err)
	}
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("operator credentials: %w: the key is not a user key", ErrCorrupt)
	}
	return pub, nil
}

// LoadOperatorKey returns the public key of this node's operator credentials
// (AdminCredsFile).
func (d Dir) LoadOperatorKey() (string, error) {
	creds, err := d.readRequired(AdminCredsFile)
	if err != nil {
		return "", err
	}
	if len(bytes.TrimSpace(creds)) == 0 {
		return "", &FileError{Path: d.Path(AdminCredsFile), Err: fmt.Errorf("%w: the file is empty", ErrTruncated)}
	}
	key, err := CredsUserKey(creds)
	if err != nil {
		return "", &FileError{Path: d.Path(AdminCredsFile), Err: err}
	}
	// The seed alone does not log in: the user JWT must be there too.
	if tok, err := jwt.ParseDecoratedJWT(creds); err != nil {
		return "", &FileError{Path: d.Path(AdminCredsFile), Err: fmt.Errorf("%w: %w", ErrCorrupt, err)}
	} else if _, err := jwt.DecodeUserClaims(tok); err != nil {
		return "", &FileError{Path: d.Path(AdminCredsFile), Err: fmt.Errorf("%w: it holds no user JWT (%w)", ErrCorrupt, err)}
	}
	return key, nil
}

// SaveCurveKey writes this control node's curve key (0600).
func (d Dir) SaveCurveKey(kp nkeys.KeyPair) error {
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	return WriteFile(d.Path(CurveKeyFile), seed, 0o600)
}

// EncodeSigningKey encodes an Ed25519 private key as PKCS#8 PEM.
func EncodeSigningKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseSigningKey decodes a PKCS#8 PEM Ed25519 private key.
func ParseSigningKey(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key: %w: no PEM private key found", ErrCorrupt)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w: %v", ErrCorrupt, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key: %w: not an Ed25519 key", ErrCorrupt)
	}
	return key, nil
}

// WriteFile writes data atomically and durably (temp file, fsync, rename, fsync of the
// directory), creating the directory (0700) if needed, flushed into its parent.
func WriteFile(path string, data []byte, perm fs.FileMode) error {
	if err := atomicfile.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, perm)
}
