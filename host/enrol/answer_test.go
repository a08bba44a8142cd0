package enrol

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"mesh/declarations"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/host/wire"
)

// fakeMesh is a broker under a CA of the test's that answers enrolments as the mesh
// does, everything signed with the token's key, after change has altered the answer's
// fields that are not signed.
type fakeMesh struct {
	token string
	// agents are the agents the enrolment requests named, in turn.
	agents chan string
	// broker is its address; leaf its TLS identity, under the CA the token pins.
	broker string
	leaf   tls.Certificate
}

func newFakeMesh(t *testing.T, change func(*wire.EnrolResponse)) *fakeMesh {
	t.Helper()
	return newFakeMeshSigningAt(t, 0, change)
}

// newFakeMeshSigningAt is newFakeMesh whose answers are signed as issued ahead (or,
// negative, behind) of this machine's clock: a mesh whose clock and this one's differ.
func newFakeMeshSigningAt(t *testing.T, ahead time.Duration, change func(*wire.EnrolResponse)) *fakeMesh {
	t.Helper()
	caDER, leaf := meshCertificates(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSHandshakeFirst: true, AlwaysEnableNonce: true,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}, MinVersion: tls.VersionTLS13}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("broker not ready")
	}
	broker := s.Addr().(*net.TCPAddr).String()
	_, signing, _ := ed25519.GenerateKey(rand.Reader)
	ca, _ := x509.ParseCertificate(caDER)
	pin := sha256.Sum256(ca.RawSubjectPublicKeyInfo)

	nc, err := nats.Connect("tls://"+broker, nats.Secure(&tls.Config{InsecureSkipVerify: true}), nats.TLSHandshakeFirst()) //nolint:gosec // the test's own broker
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	agents := make(chan string, 16)
	if _, err := nc.Subscribe("mesh.enrol.web-1.*", func(m *nats.Msg) {
		var req wire.EnrolRequest
		if err := json.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("the fake mesh cannot read the request: %v", err)
			return
		}
		select {
		case agents <- req.Agent:
		default:
		}
		resp := signedAnswer(t, signing, req.PublicKey, caPEM, broker, ahead)
		change(&resp)
		if resp.V == 0 {
			return // a change that cleared the answer stands for one that was lost
		}
		data, _ := json.Marshal(resp)
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var secret [32]byte
	rand.Read(secret[:])
	signed := fmt.Sprintf("mesh1_demo_%s_%x_%x_web-1_worker_%d_%x", broker, pin, signing.Public(), time.Now().Add(30*time.Minute).Unix(), secret)
	return &fakeMesh{token: fmt.Sprintf("%s_%08x", signed, crc32.Checksum([]byte(signed), crc32.MakeTable(crc32.Castagnoli))), agents: agents, broker: broker, leaf: leaf}
}

// signedAnswer is what the mesh answers node web-1 enrolling with nodeKey.
func signedAnswer(t *testing.T, signing ed25519.PrivateKey, nodeKey, caPEM, broker string, ahead time.Duration) wire.EnrolResponse {
	now := time.Now().Add(ahead).UTC().Truncate(time.Second)
	keyring, err := declarations.SignKeyring(declarations.Keyring{Mesh: "demo", Epoch: 1,
		Keys: []string{hex.EncodeToString(signing.Public().(ed25519.PublicKey))}, IssuedAt: now}, signing)
	if err != nil {
		t.Error(err)
	}
	decl, err := declarations.SignDeclaration(declarations.Declaration{Mesh: "demo", Node: "web-1", NodeKey: nodeKey,
		KeyringEpoch: 1, IssuedAt: now, ExpiresAt: now.Add(24 * time.Hour)}, signing)
	if err != nil {
		t.Error(err)
	}
	members, err := declarations.SignMembership(declarations.Membership{Mesh: "demo", Version: 1, Brokers: []string{broker}, IssuedAt: now}, signing)
	if err != nil {
		t.Error(err)
	}
	subjects := wire.NodeSubjects("web-1")
	return wire.EnrolResponse{V: wire.ProtocolVersion, OK: true, Mesh: "demo", Node: "web-1", Role: "worker",
		CAPEM: caPEM, Brokers: []string{broker}, Subjects: &subjects, Keyring: keyring, Declaration: decl, Membership: members}
}

// meshCertificates makes a CA and a leaf for 127.0.0.1 it signed; the leaf's chain
// holds the CA, as the mesh's brokers present it.
func meshCertificates(t *testing.T) (caDER []byte, leaf tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return caDER, tls.Certificate{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}
}

func enrolWith(t *testing.T, m *fakeMesh) (string, Result, error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	res, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second})
	return dir, res, err
}

// TestAnswerForAnotherNodeOrRole: the enrolment answer's subjects and role are not
// signed. An answer that gives this node another node's subjects, or another role than
// the token's, is refused as an answer for another enrolment, and nothing is saved:
// the node never listens or reports on subjects that are not its own.
func TestAnswerForAnotherNodeOrRole(t *testing.T) {
	t.Run("the mesh's own answer", func(t *testing.T) {
		dir, res, err := enrolWith(t, newFakeMesh(t, func(*wire.EnrolResponse) {}))
		if err != nil {
			t.Fatalf("the fake mesh's unaltered answer is refused: %v", err)
		}
		if res.Identity.Subjects != identity.Subjects(wire.NodeSubjects("web-1")) || res.Identity.Role != "worker" {
			t.Fatalf("enrolled with %+v", res.Identity)
		}
		if _, err := identity.Load(dir); err != nil {
			t.Fatalf("no identity saved: %v", err)
		}
	})
	other := wire.NodeSubjects("web-2")
	for name, c := range map[string]struct {
		change func(*wire.EnrolResponse)
		field  string
	}{
		"another node's subjects":            {func(r *wire.EnrolResponse) { r.Subjects = &other }, "subjects"},
		"another node's status subject":      {func(r *wire.EnrolResponse) { r.Subjects.Status = other.Status }, "subjects"},
		"another node's inbox":               {func(r *wire.EnrolResponse) { r.Subjects.InboxPrefix = other.InboxPrefix }, "subjects"},
		"the declarations subject elsewhere": {func(r *wire.EnrolResponse) { r.Subjects.Declarations = "mesh.node.web-1.decl.copy" }, "subjects"},
		"the control role":                   {func(r *wire.EnrolResponse) { r.Role = "control" }, "role"},
		"no role":                            {func(r *wire.EnrolResponse) { r.Role = "" }, "role"},
		"another node":                       {func(r *wire.EnrolResponse) { r.Node = "web-2" }, "mesh and node"},
	} {
		t.Run(name, func(t *testing.T) {
			dir, _, err := enrolWith(t, newFakeMesh(t, c.change))
			var oe *OtherAnswerError
			if !errors.As(err, &oe) || !errors.Is(err, ErrOtherAnswer) || !errors.Is(err, ErrBadAnswer) || oe.Field != c.field {
				t.Fatalf("got %v, want an *OtherAnswerError about its %s", err, c.field)
			}
			for _, unrelated := range []error{ErrRefused, ErrUnreachable, ErrNoAnswer, ErrToken, ErrSave, ErrSubstituted} {
				if errors.Is(err, unrelated) {
					t.Fatalf("%v also matches %v", err, unrelated)
				}
			}
			if !strings.Contains(err.Error(), "nothing was saved") {
				t.Fatalf("the refusal does not say nothing was saved: %v", err)
			}
			if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
				t.Fatalf("after the refusal the identity is %v, want none", err)
			}
			if _, err := os.Stat(state.Path(dir)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after the refusal an applied state was saved: %v", err)
			}
		})
	}
}

// TestAnswerWithoutDeclaration: the control plane leaves the node's declaration out
// of an answer it would make too large (a repeat after a large declaration was
// issued). The signed declaration is the host's proof that the mesh recorded its
// key, so nothing is saved, and the error says what to do, apart from a malformed
// declaration.
func TestAnswerWithoutDeclaration(t *testing.T) {
	dir, _, err := enrolWith(t, newFakeMesh(t, func(r *wire.EnrolResponse) { r.Declaration = nil }))
	if !errors.Is(err, ErrNoFirstDeclaration) || !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("got %v, want ErrNoFirstDeclaration (and ErrBadAnswer)", err)
	}
	if errors.Is(err, ErrOtherAnswer) || !strings.Contains(err.Error(), "revoke web-1") {
		t.Fatalf("the refusal does not say what to do: %v", err)
	}
	if _, err := identity.Load(dir); !errors.Is(err, identity.ErrNotEnrolled) {
		t.Fatalf("after the refusal the identity is %v, want none", err)
	}
	// A declaration that is there but malformed stays the other refusal.
	_, _, err = enrolWith(t, newFakeMesh(t, func(r *wire.EnrolResponse) { r.Declaration = []byte(`{"x":1}`) }))
	if errors.Is(err, ErrNoFirstDeclaration) || !errors.Is(err, ErrBadAnswer) {
		t.Fatalf("a malformed declaration: %v", err)
	}
}

// TestEnrolmentNamesTheAgentsBuild: the enrolment request names the agent as the
// caller said (meshhost names its build, Agent(version)); without one it names
// none, where agents before named "meshhost/0.1.0" whatever their build.
func TestEnrolmentNamesTheAgentsBuild(t *testing.T) {
	m := newFakeMesh(t, func(*wire.EnrolResponse) {})
	build := Agent("0.1.0+git20261203145709.7132ef2931ef")
	if build != "meshhost/0.1.0+git20261203145709.7132ef2931ef" {
		t.Fatalf("Agent names the build %q", build)
	}
	dir := filepath.Join(t.TempDir(), "state")
	if _, err := Enrol(context.Background(), Options{StateDir: dir, Token: m.token, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, Agent: build}); err != nil {
		t.Fatal(err)
	}
	if got := <-m.agents; got != build {
		t.Errorf("the request names the agent %q, want %q", got, build)
	}
	other := newFakeMesh(t, func(*wire.EnrolResponse) {})
	if _, _, err := enrolWith(t, other); err != nil {
		t.Fatal(err)
	}
	if got := <-other.agents; got != "" {
		t.Errorf("an enrolment given no agent names %q", got)
	}
}
