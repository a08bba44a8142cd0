package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"hash/crc32"
	"math/big"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/host/agent"
	"mesh/host/dirlock"
	"mesh/host/identity"
	"mesh/host/state"
)

// enrolled writes a valid identity into a fresh state directory, as enrolment
// leaves it, and returns both.
func enrolled(t testing.TB) (string, identity.Identity) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pin := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	upub, _ := kp.PublicKey()
	signing, _, _ := ed25519.GenerateKey(rand.Reader)
	id := identity.Identity{
		Format: identity.FormatVersion, Mesh: "demo", Node: "web-1", Role: "worker",
		Seed: identity.Secret(seed), PublicKey: upub,
		CAPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), CAPin: hex.EncodeToString(pin[:]),
		Brokers: []string{"127.0.0.1:1"},
		Subjects: identity.Subjects{Declarations: "mesh.node.web-1.decl", Status: "mesh.node.web-1.status",
			Sync: "mesh.node.web-1.sync", InboxPrefix: "_INBOX.node.web-1"},
		SigningKeys: []string{hex.EncodeToString(signing)},
		EnrolledAt:  time.Now().UTC().Truncate(time.Second),
	}
	dir := t.TempDir()
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	return dir, id
}

// TestStatusOfARevokedNode: once `meshhost run` recorded the mesh's revocation,
// status says so and exits 6, in text and in JSON; a record about an identity
// enrolled before this one does not count.
func TestStatusOfARevokedNode(t *testing.T) {
	dir, id := enrolled(t)
	if code, out, stderr := runCLI("", nil, "status", "--state", dir); code != exitOK || strings.Contains(out, "REVOKED") {
		t.Fatalf("before any revocation: exit %d\n%s%s", code, out, stderr)
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if err := recordRevocation(dir, id, &agent.RevokedError{At: at}, time.Now()); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI("", nil, "status", "--state", dir)
	if code != exitRevoked || !strings.Contains(out, "REVOKED by the mesh at 2026-12-01T10:00:00Z") || !strings.Contains(stderr, "enrol with a new token") {
		t.Fatalf("revoked: exit %d\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI("", nil, "status", "--state", dir, "--json")
	var st struct {
		Node    string      `json:"node"`
		Revoked *revocation `json:"revoked"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != exitRevoked || err != nil || st.Revoked == nil || !st.Revoked.Signed || !st.Revoked.At.Equal(at) {
		t.Fatalf("revoked, --json: exit %d, %v\n%s", code, err, out)
	}
	// run refuses at once: the mesh does not take a revocation back.
	code, _, stderr = runCLI("", nil, "run", "--state", dir, "--root", filepath.Join(dir, "managed"))
	if code != exitRevoked || !strings.Contains(stderr, "will not connect again") {
		t.Fatalf("run of a revoked node: exit %d: %s", code, stderr)
	}
	// A signed revocation is never cleared by a later connection.
	if err := clearRefusal(dir, id); err != nil || !fileExists(revokedPath(dir)) {
		t.Fatalf("a signed revocation was cleared: %v", err)
	}
	// Another identity in the same directory (enrolled again) is not revoked.
	other, _ := enrolled(t)
	data, _ := os.ReadFile(revokedPath(dir))
	if err := os.WriteFile(revokedPath(other), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI("", nil, "status", "--state", other); code != exitOK {
		t.Fatalf("a record about another key: exit %d: %s", code, stderr)
	}
}

// TestRefusalRecord: a key the mesh kept refusing is recorded as such (exit 6), and
// the record goes once the mesh accepts the key again.
func TestRefusalRecord(t *testing.T) {
	dir, id := enrolled(t)
	if err := recordRevocation(dir, id, agent.ErrIdentityRefused, time.Now()); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runCLI("", nil, "status", "--state", dir)
	if code != exitRevoked || !strings.Contains(out, "REFUSED by the mesh") {
		t.Fatalf("refused: exit %d\n%s", code, out)
	}
	if err := clearRefusal(dir, id); err != nil || fileExists(revokedPath(dir)) {
		t.Fatalf("the refusal record stayed: %v", err)
	}
	// Other ends of the agent leave no record.
	if err := recordRevocation(dir, id, os.ErrPermission, time.Now()); err != nil || fileExists(revokedPath(dir)) {
		t.Fatalf("an unrelated error was recorded: %v", err)
	}
	// A corrupt record (a power loss on a bad disk) says what to do rather than
	// guessing, with the exit of a state file in the way, which the unit does not
	// restart: it was 1, restarted up to the start limit on the same file.
	if err := os.WriteFile(revokedPath(dir), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI("", nil, "status", "--state", dir); code != exitIdentity || !strings.Contains(stderr, "remove it") {
		t.Fatalf("corrupt record: exit %d, want %d: %s", code, exitIdentity, stderr)
	}
}

// TestTokenFromSystemdCredential: with LoadCredential=mesh-token:FILE, systemd sets
// $CREDENTIALS_DIRECTORY and enrol reads the token there. (A garbage token proves it
// was read: empty stdin would say no token was given.)
func TestTokenFromSystemdCredential(t *testing.T) {
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, credentialName), []byte("hello world\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("", map[string]string{"CREDENTIALS_DIRECTORY": creds}, "enrol", "--state", t.TempDir())
	if code != exitToken || strings.Contains(stderr, "no token given") || !strings.Contains(stderr, "not") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Without the credential file, stdin is read as before.
	code, _, stderr = runCLI("", map[string]string{"CREDENTIALS_DIRECTORY": t.TempDir()}, "enrol", "--state", t.TempDir())
	if code != exitToken || !strings.Contains(stderr, "no token given") {
		t.Fatalf("no credential: exit %d: %s", code, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, line, _ := runCLI("", nil, "version")
	if code != exitOK || !strings.HasPrefix(line, "meshhost "+release+" (") || strings.Count(line, "\n") != 1 {
		t.Fatalf("version: exit %d, %q", code, line)
	}
	if code, flagLine, _ := runCLI("", nil, "--version"); code != exitOK || flagLine != line {
		t.Fatalf("--version: exit %d, %q, want %q", code, flagLine, line)
	}
	code, out, _ := runCLI("", nil, "version", "--json")
	var v buildVersion
	if err := json.Unmarshal([]byte(out), &v); code != exitOK || err != nil || v.Program != "meshhost" || v.Version != release {
		t.Fatalf("version --json: exit %d, %v, %s", code, err, out)
	}
	// README offers --version with --json too: it was refused, exit 2, and the
	// refusal's hint (meshhost --version --help) was refused the same way.
	if code, flagOut, _ := runCLI("", nil, "--version", "--json"); code != exitOK || flagOut != out {
		t.Fatalf("--version --json: exit %d, %q; want %q", code, flagOut, out)
	}
	if code, _, stderr := runCLI("", nil, "--version", "--help"); code != exitUsage || !strings.Contains(stderr, "meshhost version --help") {
		t.Fatalf("--version --help: exit %d, %s; want usage pointing at meshhost version --help", code, stderr)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "fedcba9876543210fedcba9876543210fedcba98"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "amd64"}}}
	if got, want := versionFrom("0.1.0", info, true).String(), "meshhost 0.1.0+git20261201100000.fedcba987654 (revision fedcba987654 of 2026-12-01T10:00:00Z, go1.26.8 linux/amd64)"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLogFormat(t *testing.T) {
	for _, c := range []struct {
		format       string
		logJSON, set bool
		want         string
		bad          bool
	}{
		{"text", false, false, "text", false},
		{"json", false, true, "json", false},
		{"text", true, false, "json", false},
		{"text", true, true, "", true},
		{"yaml", false, true, "", true},
	} {
		got, err := chooseLogFormat(c.format, c.logJSON, c.set)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%+v: %q %v", c, got, err)
		}
	}
	var buf bytes.Buffer
	log, err := newLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("connected", "broker", "127.0.0.1:7300")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil || line["msg"] != "connected" {
		t.Fatalf("%q: %v", buf.String(), err)
	}
}

// TestStatusShowsTheBrokersTheAgentDials: once the agent accepted a signed list of
// the mesh's brokers, status shows that list, not the one the token gave at
// enrolment (a host on cp-2 said brokers=[cp-1] after cp-1 was removed).
func TestStatusShowsTheBrokersTheAgentDials(t *testing.T) {
	dir, _ := enrolled(t)
	applied, err := state.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	applied.Brokers, applied.MembershipVersion = []string{"127.0.0.1:17330", "127.0.0.1:17340"}, 4
	if err := state.Save(dir, applied); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI("", nil, "status", "--state", dir, "--json")
	var st struct {
		Brokers []string `json:"brokers"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || strings.Join(st.Brokers, ",") != "127.0.0.1:17330,127.0.0.1:17340" {
		t.Fatalf("status --json: exit %d, %v, brokers %v\n%s%s", code, err, st.Brokers, out, stderr)
	}
}

// TestEnrolOnTheDirectoryOfARunningAgent: enrol on an enrolled state directory whose
// agent runs says the machine is enrolled (exit 5), naming the agent, not that the
// directory is in use (exit 8, "stop that process, then run this again", which led
// to "already enrolled").
func TestEnrolOnTheDirectoryOfARunningAgent(t *testing.T) {
	dir, id := enrolled(t)
	lock, err := dirlock.Acquire("state directory", dir, "meshhost run")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	signed := fmt.Sprintf("mesh1_demo_127.0.0.1:1_%s_%s_web-9_worker_%d_%s", strings.Repeat("ab", 32), strings.Repeat("cd", 32),
		time.Now().Add(30*time.Minute).Unix(), strings.Repeat("ef", 32))
	tok := fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
	code, _, stderr := runCLI("", map[string]string{"MESH_TOKEN": tok}, "enrol", "--state", dir)
	if code != exitIdentity || !strings.Contains(stderr, "already enrolled") || !strings.Contains(stderr, id.Node) ||
		!strings.Contains(stderr, fmt.Sprintf("meshhost run, pid %d, is working on it now", os.Getpid())) || strings.Contains(stderr, "stop that process") {
		t.Fatalf("exit %d, want %d saying it is enrolled and its agent runs: %s", code, exitIdentity, stderr)
	}
}

// TestEnrolAgainOnTheTokensNodeWhileItsAgentRuns: the same enrolment run again (a
// provisioning script) on the machine it enrolled, whose agent runs: the identity is
// said to be that of the node the token names, run by its agent (exit 5, as any
// identity in the way), and meshhost status is where to look. It was told to have
// the node revoked first.
func TestEnrolAgainOnTheTokensNodeWhileItsAgentRuns(t *testing.T) {
	dir, id := enrolled(t)
	lock, err := dirlock.Acquire("state directory", dir, "meshhost run")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	signed := fmt.Sprintf("mesh1_%s_127.0.0.1:1_%s_%s_%s_worker_%d_%s", id.Mesh, id.CAPin, strings.Repeat("cd", 32), id.Node,
		time.Now().Add(30*time.Minute).Unix(), strings.Repeat("ef", 32))
	tok := fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli)))
	code, _, stderr := runCLI("", map[string]string{"MESH_TOKEN": tok}, "enrol", "--state", dir)
	if code != exitIdentity || !strings.Contains(stderr, fmt.Sprintf("already enrolled as node %q of mesh %q, the node this token names", id.Node, id.Mesh)) ||
		!strings.Contains(stderr, fmt.Sprintf("its agent (meshhost run, pid %d) runs it", os.Getpid())) || !strings.Contains(stderr, "meshhost status") {
		t.Fatalf("exit %d, want %d saying it is enrolled as the token's node, run by its agent: %s", code, exitIdentity, stderr)
	}
}

// TestStatusWarnsOfAnIdentityOthersMayRead: status says so, changes nothing, and
// still exits as it would; the agent is what makes the file private.
func TestStatusWarnsOfAnIdentityOthersMayRead(t *testing.T) {
	dir, _ := enrolled(t)
	if code, _, stderr := runCLI("", nil, "status", "--state", dir); code != exitOK || strings.Contains(stderr, "warning") {
		t.Fatalf("a private identity: exit %d: %s", code, stderr)
	}
	if err := os.Chmod(identity.Path(dir), 0o640); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI("", nil, "status", "--state", dir)
	if code != exitOK || !strings.Contains(stderr, "readable by other users") || !strings.Contains(stderr, "chmod 600") {
		t.Fatalf("an identity others may read: exit %d: %s", code, stderr)
	}
	if fi, _ := os.Stat(identity.Path(dir)); fi.Mode().Perm() != 0o640 {
		t.Fatalf("status changed the file's mode to %v", fi.Mode().Perm())
	}
}

// TestRunWarnsOfARootInsideTheState: a managed root inside the state directory is
// allowed, and said to be out of every other user's reach (the directory is 0700);
// one beside it is not warned of.
func TestRunWarnsOfARootInsideTheState(t *testing.T) {
	parent := t.TempDir()
	state := filepath.Join(parent, "h1")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	const warning = "--root is inside --state, which only the agent's user may enter (mode 0700)"
	for root, want := range map[string]bool{filepath.Join(state, "managed"): true, filepath.Join(parent, "managed"): false} {
		_, _, stderr := runCLI("", nil, "run", "--state", state, "--root", root)
		if strings.Contains(stderr, warning) != want {
			t.Errorf("--root %s: warned %v, want %v:\n%s", root, !want, want, stderr)
		}
	}
	// A state directory others may enter (made 0755 by hand) keeps nobody out:
	// not warned of.
	if err := os.Chmod(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, stderr := runCLI("", nil, "run", "--state", state, "--root", filepath.Join(state, "managed")); strings.Contains(stderr, "--root is inside --state") {
		t.Errorf("warned of a root inside a state directory others may enter:\n%s", stderr)
	}
}
