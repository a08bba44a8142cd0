package operator

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"

	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/host/jsonkeys"
	"mesh/host/readfile"
	"mesh/host/statedir"
)

// Endpoint is everything an operator needs to call the mesh: where its brokers are,
// the operator credentials (a standard NATS .creds file) and the pin of the mesh CA
// every broker must prove it belongs to. A control node's data directory holds all
// three; an operator's own machine needs only these, given as files.
type Endpoint struct {
	// Servers are broker addresses, host:port, tried in order.
	Servers []string
	// Creds is the path of the operator's .creds file.
	Creds string
	// Pin is the SHA-256 of the mesh CA's SubjectPublicKeyInfo.
	Pin [32]byte
	// Hint ends the message given when no broker answers: what to check.
	Hint string
}

// ErrEndpoint means the addresses, credentials or CA given to reach the mesh cannot
// be used; the message says which and why (its own words blame none of them: a
// mistyped broker address read as the credentials' fault).
var ErrEndpoint = errors.New("cannot use what was given to reach the control plane")

// ErrCredsExposed refuses an operator's credentials file that group or others may
// read: it logs in as an operator of the whole mesh (as ssh refuses a private key
// others may read, and serve its own admin.creds).
var ErrCredsExposed = errors.New("the operator credentials file is readable by other users")

// DirEndpoint is the endpoint a control node's data directory describes: the brokers
// and the pin of its mesh.json, and its admin.creds. joining admits the unfinished
// configuration of a join in progress.
func DirEndpoint(dir datadir.Dir, joining bool) (Endpoint, error) {
	// Its mesh.json names the brokers and the CA pin trusted: not from a
	// directory another user could have filled.
	if err := dir.CheckPlaceToRead(); err != nil {
		return Endpoint{}, err
	}
	cfg, err := dir.LoadConfig()
	if joining && errors.Is(err, datadir.ErrJoinIncomplete) {
		cfg, err = dir.ReadConfigRaw()
	}
	if err != nil {
		return Endpoint{}, err
	}
	pin, err := cfg.Pin()
	if err != nil {
		return Endpoint{}, err
	}
	// Checked here so that a file missing, cut short or not a file at all is a
	// damaged data directory (naming the file), not a control plane out of reach.
	if _, err := dir.LoadOperatorKey(); err != nil {
		return Endpoint{}, err
	}
	// This node's own broker first, then the others: the list of brokers names it
	// too, and an error listing the addresses tried would name it twice.
	servers := []string{cfg.Listen}
	for _, b := range cfg.Brokers {
		if !slices.Contains(servers, b) {
			servers = append(servers, b)
		}
	}
	hint := fmt.Sprintf("is `meshctl serve --data %s` running? A control node that is starting opens its broker "+
		"once it follows a leader: its log says what it waits for", dir)
	if cfg.Joining {
		// The node is still joining: its own serve is not running yet, and the
		// brokers are the other control nodes'.
		hint = fmt.Sprintf("the other control nodes' brokers did not answer: check that they run (meshctl control status on one of them); the join in %s resumes when run again", dir)
	} else if _, removed, _ := dir.Removed(); removed {
		// It will never serve again: its own broker is not what to look at.
		hint = fmt.Sprintf("%s is the data directory of a control node removed from the mesh, which will not serve again: "+
			"give an active control node's data directory, or --servers with the brokers of the control nodes that run", dir)
	}
	return Endpoint{
		Servers: servers,
		Creds:   dir.Path(datadir.AdminCredsFile),
		Pin:     pin,
		Hint:    hint,
	}, nil
}

// CAEndpoint is the endpoint of an operator's machine: broker addresses, a .creds
// file and the mesh CA's certificate, whose pin it computes. The brokers are then
// checked against that pin inside the TLS handshake, exactly as on a control node.
// A --creds or --ca file that cannot be used is an *InputFileError.
func CAEndpoint(servers []string, creds, caFile string) (Endpoint, error) {
	if len(servers) == 0 {
		return Endpoint{}, fmt.Errorf("%w: no broker address", ErrEndpoint)
	}
	if err := checkCreds(creds); err != nil {
		return Endpoint{}, err
	}
	data, err := readTrusted(caFile, "the CA file", "CA certificate")
	if errors.Is(err, statedir.ErrUnsafePath) {
		return Endpoint{}, fmt.Errorf("%w: CA file: %w", ErrEndpoint, err)
	}
	if err != nil {
		return Endpoint{}, unreadable(flagCA, caFile, err)
	}
	ca, err := pki.ParseCertificatePEM(data)
	switch {
	case err != nil && len(bytes.TrimSpace(data)) == 0:
		return Endpoint{}, &InputFileError{Flag: flagCA, Path: caFile, Kind: datadir.ErrTruncated, Reason: "is empty: give the mesh CA certificate (ca.pem of a control node's data directory)"}
	case err != nil && bytes.Contains(data, []byte("NATS USER JWT")):
		// The flags swapped: said so, rather than "no PEM certificate".
		return Endpoint{}, &InputFileError{Flag: flagCA, Path: caFile, Kind: datadir.ErrCorrupt,
			Reason: "holds no PEM certificate: it is an operator's .creds file, which --creds takes; --ca takes the mesh CA certificate (ca.pem of a control node's data directory)"}
	case err != nil:
		return Endpoint{}, &InputFileError{Flag: flagCA, Path: caFile, Kind: datadir.ErrCorrupt, Reason: "cannot be used: " + err.Error(), Err: err}
	case !ca.IsCA:
		return Endpoint{}, &InputFileError{Flag: flagCA, Path: caFile, Kind: datadir.ErrCorrupt, Reason: "is not a CA certificate: give the mesh CA (ca.pem of a control node's data directory)"}
	}
	return Endpoint{
		Servers: servers,
		Creds:   creds,
		Pin:     pki.PinOf(ca),
		Hint:    "are the broker addresses right, and is `meshctl serve` running there?",
	}, nil
}

// The flags an operator's machine names its files with, in messages.
const (
	flagCreds   = "--creds"
	flagCA      = "--ca"
	flagContext = "--context"
)

// ErrUnusableFile means the operator credentials (--creds), the mesh CA (--ca) or
// the NATS context (--context) given to reach the control plane cannot be used as
// they are. See *InputFileError.
var ErrUnusableFile = errors.New("an operator's credentials, CA or NATS context file cannot be used")

// InputFileError is a --creds, --ca or --context file (or one a NATS context
// names) that cannot be used: Flag names which, Reason says what is wrong and what to give instead. Kind
// is what datadir calls the same fault in a data directory (datadir.ErrMissing,
// ErrTruncated, ErrCorrupt, ErrNotAFile, ErrTooLarge), so that an operator's file
// and a control node's admin.creds are refused alike (meshctl exits 7 for both; a
// missing or empty --creds exited 1, and the same fault inside --data 7). Err is
// the file system's or the parser's error, when there is one. It matches
// ErrEndpoint, ErrUnusableFile, Kind and Err. Its text never quotes the file.
type InputFileError struct {
	Flag, Path string
	Kind       error
	Reason     string
	Err        error
}

func (e *InputFileError) Error() string {
	name := "CA"
	switch {
	case e.Flag == flagCreds || e.Flag == "MESH_CREDS":
		name = "creds"
	case strings.Contains(strings.ToLower(e.Flag), "context"): // --context, or MESH_CONTEXT
		name = "NATS context"
	}
	return fmt.Sprintf("%v: the %s file %s (%s) %s", ErrEndpoint, name, e.Path, e.Flag, e.Reason)
}

// Unwrap returns ErrEndpoint, ErrUnusableFile, the kind of fault and its cause.
func (e *InputFileError) Unwrap() []error {
	errs := []error{ErrEndpoint, ErrUnusableFile, e.Kind}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// unreadable is the *InputFileError of a --creds or --ca file that could not be read
// as one: absent, not a regular file, over 1 MiB, or refused by the file system.
func unreadable(flag, path string, err error) error {
	e := &InputFileError{Flag: flag, Path: path, Err: err, Kind: datadir.ErrCorrupt, Reason: "cannot be read: " + err.Error()}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.Kind, e.Reason = datadir.ErrMissing, "does not exist"
		if flag == flagCreds {
			e.Reason += ": give the operator's .creds file (NAME.creds that meshctl operator add wrote)"
		} else {
			e.Reason += ": give the mesh CA certificate (ca.pem of a control node's data directory)"
		}
	case errors.Is(err, readfile.ErrNotRegular):
		e.Kind = datadir.ErrNotAFile
	case errors.Is(err, ErrFileTooLarge):
		e.Kind = datadir.ErrTooLarge
	case errors.Is(err, fs.ErrPermission):
		e.Kind = datadir.ErrUnreadable
	}
	return e
}

// checkCreds judges an operator's .creds file before any connection uses it: what
// it holds first, then its mode. A CA certificate given as --creds (the flags
// swapped) was told it was "an operator's login to the whole mesh" and to be made
// private, which mended nothing; an empty or missing one exited 1 from the
// connection. Its errors are *InputFileError, or ErrCredsExposed for a file group or
// others may read. Nothing of the file is quoted.
func checkCreds(creds string) error {
	var mode fs.FileMode
	data, err := readSmallChecked(creds, func(fi fs.FileInfo) error { mode = fi.Mode(); return nil })
	if err != nil {
		return unreadable(flagCreds, creds, err)
	}
	defer clear(data)
	if reason, kind := credsProblem(data); kind != nil {
		return &InputFileError{Flag: flagCreds, Path: creds, Kind: kind, Reason: reason}
	}
	if perm := mode.Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %w: %s (mode %v) is an operator's login to the whole mesh; make it private (chmod 600 %s) and run the command again",
			ErrEndpoint, ErrCredsExposed, creds, perm, creds)
	}
	return nil
}

// credsProblem says what keeps data from being a .creds file (the user JWT and its
// seed, each between its BEGIN and END lines): in words, and the kind of fault as
// datadir names it; a nil kind when it is one.
func credsProblem(data []byte) (reason string, kind error) {
	const what = "a .creds file holds the operator's user JWT and its seed (NAME.creds that meshctl operator add wrote)"
	if len(bytes.TrimSpace(data)) == 0 {
		return "is empty: " + what, datadir.ErrTruncated
	}
	if block, _ := pem.Decode(data); block != nil {
		if block.Type == "CERTIFICATE" {
			return "is a certificate: --ca takes it; --creds takes the operator's .creds file (NAME.creds that meshctl operator add wrote)", datadir.ErrCorrupt
		}
		// Its type is named only when it reads as one (a key's, a certificate's):
		// the BEGIN line is the file's own text, and one that holds a seed or a JWT
		// was quoted (FuzzCredsFile).
		if pemTypeShown(block.Type) {
			return fmt.Sprintf("holds a PEM block of type %q, not operator credentials: %s", block.Type, what), datadir.ErrCorrupt
		}
		return "holds a PEM block of another type, not operator credentials: " + what, datadir.ErrCorrupt
	}
	text, err := jwt.ParseDecoratedJWT(data)
	if err == nil {
		_, err = jwt.DecodeUserClaims(text)
	}
	hasJWT := err == nil
	kp, err := jwt.ParseDecoratedUserNKey(data)
	hasSeed := err == nil
	if hasSeed {
		kp.Wipe()
	}
	switch {
	case hasJWT && hasSeed:
		return "", nil
	case bytes.Count(data, []byte("-----BEGIN ")) > bytes.Count(data, []byte("-----END ")):
		// A block begun and never ended: a copy or a write cut short.
		return "is cut short (a block of it has no END line): " + what, datadir.ErrTruncated
	case hasSeed:
		// Never sent: nats.go would send the seed itself as the JWT (ErrNoUserJWT).
		return "holds no user JWT (an nkey seed file alone is not a .creds file): " + what, datadir.ErrCorrupt
	case hasJWT:
		return "holds no user seed: " + what, datadir.ErrCorrupt
	}
	return "is not operator credentials: " + what, datadir.ErrCorrupt
}

// pemTypeShown reports whether a PEM block's type may be quoted to say what a
// file is: one of the types keys, requests and other PEM files are written with
// ("RSA PRIVATE KEY", "PUBLIC KEY"). The BEGIN line is the file's own text: a
// hand-made one of a seed's first characters was quoted (a review), then one of
// them split by a space (another); only a known type is. A certificate, the
// one-word type, is said before this is asked.
func pemTypeShown(typ string) bool {
	switch typ {
	case "PRIVATE KEY", "PUBLIC KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "RSA PUBLIC KEY",
		"EC PRIVATE KEY", "EC PARAMETERS", "DSA PRIVATE KEY", "OPENSSH PRIVATE KEY",
		"CERTIFICATE REQUEST", "NEW CERTIFICATE REQUEST", "X509 CRL", "TRUSTED CERTIFICATE",
		"PGP PUBLIC KEY BLOCK", "PGP PRIVATE KEY BLOCK", "PGP MESSAGE", "PGP SIGNATURE":
		return true
	}
	return false
}

// maxSmallFile bounds the CA file, a NATS context file and a credentials file: each
// is a few KiB at most.
const maxSmallFile = 1 << 20

// ErrFileTooLarge means a CA, context or credentials file is over 1 MiB; it was not
// read whole.
var ErrFileTooLarge = errors.New("larger than 1 MiB: not a CA certificate, a NATS context or operator credentials")

// readSmall reads a file of at most maxSmallFile bytes, reading no more than one
// byte past the cap of a larger one. A directory, a FIFO or a device given as the
// file is refused (readfile.ErrNotRegular) without waiting for a FIFO's writer.
func readSmall(path string) ([]byte, error) {
	return readSmallChecked(path, nil)
}

// readTrusted reads a small file the operator's machine takes its trust from (the
// mesh CA, a NATS context naming brokers, credentials and CA): one another user
// could have written is refused (statedir.CheckTrusted), as `meshhost enrol`
// refuses such a token file. The user who ran meshctl through sudo counts as its
// own.
func readTrusted(path, what, holds string) ([]byte, error) {
	invoker := statedir.Invoker(os.Getenv)
	return readSmallChecked(path, func(fi fs.FileInfo) error {
		return statedir.CheckTrusted(&statedir.InputError{What: what, Name: path, Holds: holds, Advice: ", and run the command again"}, fi, invoker)
	})
}

func readSmallChecked(path string, check func(fs.FileInfo) error) ([]byte, error) {
	data, err := readfile.RegularChecked(path, maxSmallFile, check)
	if errors.Is(err, readfile.ErrTooLarge) {
		return nil, fmt.Errorf("%s: %w", path, ErrFileTooLarge)
	}
	return data, err
}

// ParseServers reads broker addresses: comma-separated lists of host:port, each
// optionally written as a NATS URL (tls://host:port or nats://host:port). Whatever
// the scheme, the connection is TLS from its first byte.
func ParseServers(lists ...string) ([]string, error) {
	var out []string
	for _, list := range lists {
		if strings.Contains(list, "@") {
			// A NATS URL's user and password, or token: the mesh never logs an
			// operator in with them (operators present a .creds file), and the
			// refusal, printed and perhaps logged, repeats no part of the list, where
			// a password may hold a comma or an '@' of its own.
			return nil, fmt.Errorf("%w: a broker address holds credentials before an '@' (a user, a password or a token), which the mesh does not use: give host:port, and the operator credentials with --creds", ErrEndpoint)
		}
		for _, s := range strings.Split(list, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if scheme, rest, ok := strings.Cut(s, "://"); ok {
				if scheme != "tls" && scheme != "nats" {
					return nil, fmt.Errorf("%w: broker %q: use host:port or tls://host:port", ErrEndpoint, s)
				}
				s = rest
			}
			host, port, err := net.SplitHostPort(s)
			if err != nil || host == "" || port == "" {
				return nil, fmt.Errorf("%w: broker %q is not host:port", ErrEndpoint, s)
			}
			if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || port[0] == '0' {
				return nil, fmt.Errorf("%w: broker %q: the port is not a number from 1 to 65535", ErrEndpoint, s)
			}
			if strings.ContainsFunc(host, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '/' || r == '@' || r >= 0x80 }) {
				return nil, fmt.Errorf("%w: broker %q: the host is not an address or a name", ErrEndpoint, s)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

// Context is the part of a NATS CLI context (the JSON files the nats CLI keeps in
// ~/.config/nats/context/) that reaches a mesh: its servers, operator credentials
// and CA.
type Context struct {
	// Path is the file it was read from.
	Path  string `json:"-"`
	URL   string `json:"url"`
	Creds string `json:"creds"`
	CA    string `json:"ca"`
}

// ContextPath is where the nats CLI keeps the context called name:
// $XDG_CONFIG_HOME/nats/context/NAME.json, by default under ~/.config. A name that
// is a path (it holds a slash or ends in .json) is taken as it is.
func ContextPath(name string, getenv func(string) string) (string, error) {
	if strings.ContainsRune(name, '/') || strings.HasSuffix(name, ".json") {
		return name, nil
	}
	base := getenv("XDG_CONFIG_HOME")
	if base == "" {
		home := getenv("HOME")
		if home == "" {
			return "", fmt.Errorf("%w: context %q: neither XDG_CONFIG_HOME nor HOME is set; give the context file's path", ErrEndpoint, name)
		}
		base = filepath.Join(home, ".config")
	}
	return filepath.Join(base, "nats", "context", name+".json"), nil
}

// LoadContext reads the NATS CLI context called name (or at that path). Paths in
// it may start with ~/, as the nats CLI allows.
func LoadContext(name string, getenv func(string) string) (Context, error) {
	path, err := ContextPath(name, getenv)
	if err != nil {
		return Context{}, err
	}
	// Its faults are an *InputFileError, as those of the files it names, and
	// exit 7 alike: a context missing or damaged exited 1 (a docs walkthrough).
	data, err := readTrusted(path, "the NATS context", "brokers, credentials and CA")
	var unsafe *statedir.InputError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Context{}, &InputFileError{Flag: flagContext, Path: path, Kind: datadir.ErrMissing, Err: err,
			Reason: fmt.Sprintf("does not exist (no NATS context %q): create it with `nats context add` or write the file with url, creds and ca", name)}
	case errors.As(err, &unsafe):
		return Context{}, fmt.Errorf("%w: %w", ErrEndpoint, err) // others may write it: said as such
	case err != nil:
		return Context{}, unreadable(flagContext, path, err)
	}
	var c Context
	if err := json.Unmarshal(data, &c); err != nil {
		return Context{}, &InputFileError{Flag: flagContext, Path: path, Kind: datadir.ErrCorrupt, Err: err, Reason: "is not valid JSON: " + err.Error()}
	}
	// A member twice (two urls) was read as its last, silently, as every JSON file
	// the mesh reads refuses (decision 0024). A member in another case than the
	// nats CLI writes it is the nats CLI's to accept, and is accepted here too.
	if err := jsonkeys.Check(data, &c); errors.Is(err, jsonkeys.ErrDuplicate) {
		return Context{}, &InputFileError{Flag: flagContext, Path: path, Kind: datadir.ErrCorrupt, Err: err, Reason: err.Error() + ": keep one"}
	}
	c.Path = path
	c.Creds = ExpandHome(c.Creds, getenv)
	c.CA = ExpandHome(c.CA, getenv)
	return c, nil
}

// ExpandHome is p with a leading ~/ made $HOME's, as a shell would: in a NATS
// context, and in MESH_CREDS and MESH_CA (which an Environment= line or a .env file
// leaves as written).
func ExpandHome(p string, getenv func(string) string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home := getenv("HOME"); home != "" {
			return filepath.Join(home, rest)
		}
	}
	return p
}
