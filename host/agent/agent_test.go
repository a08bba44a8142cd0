package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/declarations"
	"mesh/host/apply"
	"mesh/host/identity"
	"mesh/host/state"
	"mesh/host/wire"
)

var t0 = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

type fixture struct {
	a       *Agent
	key     ed25519.PrivateKey
	root    string
	dir     string
	nodeKey string // the public key this node enrolled with
	// The mesh CA the identity pins, for a test broker to present.
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// newFixture enrols nothing over a network: it writes the identity an enrolment
// would have written, with the mesh's signing key known to the test.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureIn(t, t.TempDir())
}

// newFixtureIn is newFixture with the state directory and managed root under dir.
func newFixtureIn(t testing.TB, dir string) *fixture {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(time.Hour * 24 * 365), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pin := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	id := identity.Identity{
		Format: identity.FormatVersion, Mesh: "m", Node: "n-1", Role: "worker", Seed: identity.Secret(seed), PublicKey: pub,
		CAPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), CAPin: hex.EncodeToString(pin[:]),
		Brokers: []string{"127.0.0.1:1"},
		Subjects: identity.Subjects{Declarations: "mesh.node.n-1.decl", Status: "mesh.node.n-1.status",
			Sync: "mesh.node.n-1.sync", InboxPrefix: "_INBOX.node.n-1"},
		SigningKeys: []string{hex.EncodeToString(key.Public().(ed25519.PublicKey))},
		EnrolledAt:  t0,
	}
	if err := identity.Save(dir, id); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "managed")
	a, err := New(Options{StateDir: dir, Root: root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{a: a, key: key, root: root, dir: dir, nodeKey: pub, ca: cert, caKey: caKey}
}

func (f *fixture) decl(t *testing.T, version uint64, content string, keys ...ed25519.PrivateKey) []byte {
	t.Helper()
	if len(keys) == 0 {
		keys = []ed25519.PrivateKey{f.key}
	}
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: version, KeyringEpoch: 0, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, keys...)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// declFor signs a declaration for this node id under another node key, as the mesh
// did for an earlier enrolment of the same id.
func (f *fixture) declFor(t *testing.T, nodeKey string, version uint64, content string) []byte {
	t.Helper()
	env, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "m", Node: "n-1", NodeKey: nodeKey, Version: version, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
		Body: declarations.Body{Files: []declarations.File{{Path: "etc/app.conf", Content: &content}}},
	}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (f *fixture) file(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, "etc", "app.conf"))
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHandleVerifiesBeforeApplying: only a verified, newer declaration reaches the
// disk; every refusal is recorded with its code and leaves the applied state alone.
func TestHandleVerifiesBeforeApplying(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); !got.HaveApplied || got.Version != 2 || f.file(t) != "two" {
		t.Fatalf("v2 not applied: %+v, file %q", got, f.file(t))
	}
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	cases := []struct {
		name, code string
		env        []byte
	}{
		{"another key", "untrusted", f.decl(t, 3, "forged", other)},
		{"older", "rolled_back", f.decl(t, 1, "old")},
		{"same version, other body", "replayed", f.decl(t, 2, "changed")},
		{"garbage", "malformed", []byte("not an envelope")},
		{"an earlier enrolment's", "wrong_enrolment", f.declFor(t, "U"+strings.Repeat("B", 55), 9, "replayed from before")},
	}
	for _, c := range cases {
		if err := f.a.handle(ctx, c.env); err != nil {
			t.Fatalf("%s: the agent stopped: %v", c.name, err)
		}
		got := f.a.Applied()
		if got.LastErrorCode != c.code || got.Version != 2 || f.file(t) != "two" {
			t.Fatalf("%s: error %q, version %d, file %q", c.name, got.LastErrorCode, got.Version, f.file(t))
		}
		// The version refused is reported: a replayed one is the version the
		// control plane counts as applied, and it must learn that it is not.
		if want := map[string]uint64{"rolled_back": 1, "replayed": 2}[c.code]; got.LastErrorVersion != want {
			t.Fatalf("%s: error version %d, want %d", c.name, got.LastErrorVersion, want)
		}
	}
	// A copy of the declaration applied clears no refusal but one for its validity
	// window: what reached the node stays the news (docs/protocol.md, "Status"),
	// and something on the path could otherwise replace it with a quiet copy.
	if err := f.a.handle(ctx, f.decl(t, 2, "two")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.LastErrorCode != "wrong_enrolment" || got.Version != 2 {
		t.Fatalf("after a copy of v2: error %q, version %d; want wrong_enrolment kept", got.LastErrorCode, got.Version)
	}
	// A refusal is reported, not written to disk: anyone who can put bytes on the
	// node's subject could otherwise make it write for each (a restart syncs, and
	// whatever is refused again is reported again).
	persisted, err := state.Load(f.dir)
	if err != nil || persisted.Version != 2 || persisted.LastErrorCode != "" {
		t.Fatalf("persisted %+v, %v", persisted, err)
	}
	// A good declaration clears the error.
	if err := f.a.handle(ctx, f.decl(t, 3, "three")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.LastErrorCode != "" || got.Version != 3 || f.file(t) != "three" {
		t.Fatalf("after v3: %+v, file %q", got, f.file(t))
	}
	// Once the keys rotated, a declaration signed before (delivered again) is
	// refused, and the version it names is reported: its signature verified. It
	// was reported as v0, a version never declared.
	kr, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: 1, Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.a.handle(ctx, kr); err != nil || f.a.keyring.Epoch != 1 {
		t.Fatalf("keyring: %v", err)
	}
	if err := f.a.handle(ctx, f.decl(t, 4, "from before the rotation")); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.LastErrorCode != "old_keyring" || got.LastErrorVersion != 4 || got.Version != 3 || f.file(t) != "three" {
		t.Fatalf("a declaration from before the rotation: error %q v%d, applied v%d, file %q", got.LastErrorCode, got.LastErrorVersion, got.Version, f.file(t))
	}
}

// TestRevocationNotice: only a notice signed by the mesh stops the agent.
func TestRevocationNotice(t *testing.T) {
	f := newFixture(t)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	forged, _ := declarations.SignRevocation(declarations.Revocation{Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, RevokedAt: t0}, other)
	if err := f.a.handle(context.Background(), forged); err != nil {
		t.Fatalf("a forged revocation stopped the agent: %v", err)
	}
	if f.a.Applied().LastErrorCode != "untrusted" {
		t.Fatalf("forged revocation recorded as %q", f.a.Applied().LastErrorCode)
	}
	other2, _ := declarations.SignRevocation(declarations.Revocation{Mesh: "m", Node: "n-2", NodeKey: f.nodeKey, RevokedAt: t0}, f.key)
	if err := f.a.handle(context.Background(), other2); err != nil {
		t.Fatalf("another node's revocation stopped this agent: %v", err)
	}
	// A notice that revoked an earlier enrolment of this node id does not stop it.
	kp, _ := nkeys.CreateUser()
	earlierKey, _ := kp.PublicKey()
	earlier, _ := declarations.SignRevocation(declarations.Revocation{Mesh: "m", Node: "n-1", NodeKey: earlierKey, RevokedAt: t0}, f.key)
	if err := f.a.handle(context.Background(), earlier); err != nil {
		t.Fatalf("the revocation of an earlier enrolment stopped this agent: %v", err)
	}
	if f.a.Applied().LastErrorCode != "wrong_enrolment" {
		t.Fatalf("an earlier enrolment's revocation recorded as %q", f.a.Applied().LastErrorCode)
	}
	genuine, _ := declarations.SignRevocation(declarations.Revocation{Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, RevokedAt: t0}, f.key)
	err := f.a.handle(context.Background(), genuine)
	var re *RevokedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRevoked) || !re.At.Equal(t0) {
		t.Fatalf("the mesh's revocation: %v", err)
	}
}

type failingApplier struct{}

func (failingApplier) Apply(context.Context, []apply.File, []string) (apply.Result, error) {
	return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: errors.New("disk on fire"), RolledBack: true}
}

// TestApplyFailureIsReported: an applier error leaves the version where it was and is
// reported with the path and the version it concerns.
func TestApplyFailureIsReported(t *testing.T) {
	f := newFixture(t)
	f.a.applier = failingApplier{}
	if err := f.a.handle(context.Background(), f.decl(t, 1, "x")); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if got.HaveApplied || got.LastErrorCode != "apply_failed" || got.LastErrorVersion != 1 || !strings.Contains(got.LastError, "etc/app.conf") {
		t.Fatalf("%+v", got)
	}
}

// TestStale: an applied declaration past its expiry makes the agent stale, never
// removes its files.
func TestStale(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "kept")); err != nil {
		t.Fatal(err)
	}
	if f.a.Stale() {
		t.Fatal("stale at once")
	}
	f.a.o.Now = func() time.Time { return t0.Add(25 * time.Hour) }
	if !f.a.Stale() || f.file(t) != "kept" {
		t.Fatalf("stale %v, file %q", f.a.Stale(), f.file(t))
	}
}

// flakyApplier fails while blocked is true, then applies into a FileApplier.
type flakyApplier struct {
	blocked bool
	inner   apply.Applier
}

func (f *flakyApplier) Apply(ctx context.Context, files []apply.File, managed []string) (apply.Result, error) {
	if f.blocked {
		return apply.Result{}, &apply.ApplyError{Path: "etc/app.conf", Err: errors.New("a file stands where a directory must go"), RolledBack: true}
	}
	return f.inner.Apply(ctx, files, managed)
}

// TestFailedApplyIsRetried: a declaration that verified but failed to apply is kept
// and tried again with growing waits; once the local fault is gone it applies without
// a new declaration, and the retry is forgotten.
func TestFailedApplyIsRetried(t *testing.T) {
	f := newFixture(t)
	flaky := &flakyApplier{blocked: true, inner: f.a.applier}
	f.a.applier = flaky
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if got.HaveApplied || got.LastErrorCode != "apply_failed" || !got.NextAttempt.Equal(t0.Add(time.Second)) {
		t.Fatalf("after the failure: %+v", got)
	}
	if persisted, _ := state.Load(f.dir); !persisted.NextAttempt.Equal(t0.Add(time.Second)) {
		t.Fatalf("the next attempt is not persisted: %+v", persisted)
	}
	if f.a.retry.due() == nil {
		t.Fatal("no retry scheduled")
	}
	// Still failing: each attempt waits twice as long.
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second} {
		f.a.handle(ctx, f.a.retry.raw)
		if got := f.a.Applied().NextAttempt; !got.Equal(t0.Add(want)) {
			t.Fatalf("attempt %d: next attempt %v, want now+%s", i+2, got, want)
		}
	}
	// The fault is fixed: the retry applies the same declaration.
	flaky.blocked = false
	if err := f.a.handle(ctx, f.a.retry.raw); err != nil {
		t.Fatal(err)
	}
	got = f.a.Applied()
	if !got.HaveApplied || got.Version != 1 || got.LastErrorCode != "" || !got.NextAttempt.IsZero() || f.file(t) != "one" {
		t.Fatalf("after the fix: %+v, file %q", got, f.file(t))
	}
	if f.a.retry.due() != nil {
		t.Fatal("a retry is still scheduled after the apply succeeded")
	}
}

func TestRetryBackoffIsCapped(t *testing.T) {
	var r applyRetry
	var last time.Time
	for range 30 {
		last = r.schedule([]byte("x"), 7, t0, time.Second, time.Minute)
	}
	if !last.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after 30 failures the wait is %s, want the 1m cap", last.Sub(t0))
	}
	if at := r.schedule([]byte("y"), 8, t0, time.Second, time.Minute); !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("a new version starts again at the minimum, got %s", at.Sub(t0))
	}
	r.clear()
	if r.due() != nil {
		t.Fatal("cleared, still due")
	}
}

// TestMembership: the agent follows a newer signed list of the mesh's brokers, and
// persists it; an older or forged one changes nothing.
func TestMembership(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sign := func(version uint64, brokers []string, k ed25519.PrivateKey) []byte {
		env, err := declarations.SignMembership(declarations.Membership{Mesh: "m", Version: version, Brokers: brokers, IssuedAt: t0}, k)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	three := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
	if err := f.a.handle(ctx, sign(2, three, f.key)); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.MembershipVersion != 2 || !slices.Equal(got.Brokers, three) {
		t.Fatalf("after membership v2: %+v", got)
	}
	if persisted, _ := state.Load(f.dir); persisted.MembershipVersion != 2 || !slices.Equal(persisted.Brokers, three) {
		t.Fatalf("not persisted: %+v", persisted)
	}
	// The agent dials those, not the identity's, in an order of its own.
	dial := f.a.brokers()
	if !slices.Equal(slices.Sorted(slices.Values(dial)), three) {
		t.Fatalf("dials %v, want the three brokers", dial)
	}
	// Addresses an operator gives (meshhost run --broker) come after them, once.
	f.a.o.ExtraBrokers = []string{"10.9.9.9:7300", three[0]}
	if got := f.a.brokers(); !slices.Equal(got[:3], dial) || !slices.Equal(got[3:], []string{"10.9.9.9:7300"}) {
		t.Fatalf("with --broker: dials %v, want %v then 10.9.9.9:7300", got, dial)
	}
	f.a.o.ExtraBrokers = nil
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	for name, c := range map[string]struct {
		env  []byte
		code string
	}{
		"older":  {sign(1, []string{"127.0.0.1:7009"}, f.key), "rolled_back"},
		"forged": {sign(9, []string{"10.6.6.6:7300"}, other), "untrusted"},
	} {
		if err := f.a.handle(ctx, c.env); err != nil {
			t.Fatal(err)
		}
		if got := f.a.Applied(); got.LastErrorCode != c.code || got.MembershipVersion != 2 || !slices.Equal(got.Brokers, three) {
			t.Fatalf("%s: %+v", name, got)
		}
	}
	// A removal: the newer list drops a broker.
	if err := f.a.handle(ctx, sign(3, three[1:], f.key)); err != nil {
		t.Fatal(err)
	}
	if got := f.a.Applied(); got.MembershipVersion != 3 || !slices.Equal(got.Brokers, three[1:]) {
		t.Fatalf("after the removal: %+v", got)
	}
}

// TestSpreadIsStableAndSpreads: each node rotates the list the same way every time,
// and a fleet's nodes start on every broker.
func TestSpreadIsStableAndSpreads(t *testing.T) {
	list := []string{"a:1", "b:1", "c:1"}
	first := map[string]int{}
	for i := range 300 {
		node := "node-" + strconv.Itoa(i)
		got := spread(list, node)
		if !slices.Equal(got, spread(list, node)) {
			t.Fatal("not stable")
		}
		if !slices.Equal(slices.Sorted(slices.Values(got)), list) {
			t.Fatalf("%v is not a rotation of %v", got, list)
		}
		first[got[0]]++
	}
	for _, b := range list {
		if first[b] < 50 {
			t.Fatalf("first choices %v: the fleet does not spread", first)
		}
	}
}

// A declaration nats.go dropped because the agent's queue was full must lead to a
// sync, which fetches the current declaration; other asynchronous errors go to the
// loop as errors, and a slow consumer on another subscription does not ask for one.
func TestSlowConsumerAsksForASync(t *testing.T) {
	f := newFixture(t)
	next := func() event {
		t.Helper()
		select {
		case ev := <-f.a.events:
			return ev
		default:
			t.Fatal("no event")
			return event{}
		}
	}
	f.a.asyncError(&nats.Subscription{Subject: f.a.id.Subjects.Declarations}, nats.ErrSlowConsumer)
	if ev := next(); !ev.connected || ev.err != nil {
		t.Fatalf("a dropped declaration gave %+v, want a sync", ev)
	}
	f.a.asyncError(&nats.Subscription{Subject: "_INBOX.other"}, nats.ErrSlowConsumer)
	if ev := next(); ev.connected || !errors.Is(ev.err, nats.ErrSlowConsumer) {
		t.Fatalf("a slow consumer elsewhere gave %+v", ev)
	}
	f.a.asyncError(nil, nats.ErrAuthorization)
	if ev := next(); ev.connected || !errors.Is(ev.err, nats.ErrAuthorization) {
		t.Fatalf("an authorization error gave %+v", ev)
	}
}

// Reconnecting backs off exponentially, with jitter, up to a ceiling, whatever the
// count nats.go passes.
func TestReconnectDelay(t *testing.T) {
	for _, c := range []struct {
		attempts int
		lo, hi   time.Duration
	}{
		{1, time.Second, 2 * time.Second},
		{2, 2 * time.Second, 4 * time.Second},
		{3, 4 * time.Second, 8 * time.Second},
		{4, 7500 * time.Millisecond, 15 * time.Second},
		{7, 7500 * time.Millisecond, 15 * time.Second},
		{1 << 40, 7500 * time.Millisecond, 15 * time.Second},
		{0, 7500 * time.Millisecond, 15 * time.Second},
		{-1, 7500 * time.Millisecond, 15 * time.Second},
	} {
		seen := map[time.Duration]bool{}
		for range 200 {
			d := reconnectDelay(c.attempts)
			if d < c.lo || d >= c.hi {
				t.Fatalf("attempt %d waits %v, want [%v, %v)", c.attempts, d, c.lo, c.hi)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: only %d distinct waits in 200: no jitter", c.attempts, len(seen))
		}
	}
}

// A sync acknowledged before its envelopes ends when the last of them has been
// handled, not when the grace for them runs out; one still missing an envelope does
// not end.
func TestSyncEndsWhenItsEnvelopesArrive(t *testing.T) {
	f := newFixture(t)
	synced := 0
	f.a.o.OnSynced = func() { synced++ }
	sy := &syncer{a: f.a, inFlight: true, base: f.a.received}
	sy.finished(t.Context(), syncResult{resp: wire.SyncResponse{V: wire.ProtocolVersion, Sent: 2}})
	if synced != 0 || sy.check == nil {
		t.Fatalf("acknowledged with 2 envelopes to come: synced %d times, grace timer %v", synced, sy.check != nil)
	}
	f.a.received++
	sy.arrived()
	if synced != 0 || sy.check == nil {
		t.Fatalf("1 of 2 envelopes arrived: synced %d times, grace timer %v", synced, sy.check != nil)
	}
	f.a.received++
	sy.arrived()
	if synced != 1 || sy.check != nil {
		t.Fatalf("both envelopes arrived: synced %d times, grace timer still set %v", synced, sy.check != nil)
	}
	// An envelope outside any sync (a push) ends nothing.
	f.a.received++
	sy.arrived()
	if synced != 1 {
		t.Fatalf("a pushed envelope counted as a sync: synced %d times", synced)
	}
}

// TestAPushDuringASyncIsNotOneOfItsEnvelopes: a declaration an operator pushes while
// a sync is on its way arrives untagged; when one of the sync's own envelopes (the
// mesh's new list of brokers, say) is lost, the push must not stand in for it. Before,
// the agent counted every envelope, called itself synced, and did not ask again
// until its next reconnection: it kept an old list of brokers for good.
func TestAPushDuringASyncIsNotOneOfItsEnvelopes(t *testing.T) {
	f := newFixture(t)
	synced := 0
	f.a.o.OnSynced = func() { synced++ }
	sy := &syncer{a: f.a, inFlight: true, tag: "7", base: f.a.received}
	push := &nats.Msg{Data: []byte("pushed")}
	f.a.received++
	sy.note(push)
	sy.finished(t.Context(), syncResult{resp: wire.SyncResponse{V: wire.ProtocolVersion, Sent: 1}, tagged: true})
	if synced != 0 || sy.check == nil {
		t.Fatalf("the sync's one envelope lost, a push arrived: synced %d times, grace timer %v", synced, sy.check != nil)
	}
	sy.checkArrived()
	if synced != 0 || sy.timer == nil {
		t.Fatalf("grace over without the sync's envelope: synced %d times, retry scheduled %v", synced, sy.timer != nil)
	}
	sy.timer.Stop()

	// The sync's own envelope ends it, and one of an earlier sync does not.
	sy = &syncer{a: f.a, inFlight: true, tag: "8", base: f.a.received}
	f.a.received++
	sy.note(&nats.Msg{Header: nats.Header{wire.SyncHeader: []string{"7"}}})
	sy.finished(t.Context(), syncResult{resp: wire.SyncResponse{V: wire.ProtocolVersion, Sent: 1}, tagged: true})
	if synced != 0 {
		t.Fatal("an envelope of an earlier sync counted as one of this sync's")
	}
	f.a.received++
	sy.note(&nats.Msg{Header: nats.Header{wire.SyncHeader: []string{"8"}}})
	sy.arrived()
	if synced != 1 || sy.check != nil {
		t.Fatalf("the sync's envelope arrived: synced %d times, grace timer still set %v", synced, sy.check != nil)
	}

	// A control plane that does not tag (older than the tags) acknowledges untagged:
	// every envelope counts, as before.
	sy = &syncer{a: f.a, inFlight: true, tag: "9", base: f.a.received}
	f.a.received++
	sy.note(push)
	sy.finished(t.Context(), syncResult{resp: wire.SyncResponse{V: wire.ProtocolVersion, Sent: 1}})
	if synced != 2 {
		t.Fatalf("an untagged acknowledgement with its one envelope arrived: synced %d times, want 2", synced)
	}
}

// TestARetriedDeclarationThatExpiresIsNoLongerAnnounced: a declaration that failed
// to apply, retried while the mesh is out of reach (which would otherwise send it
// re-signed), expires: the attempts end, and neither meshhost status nor the report
// announces a next attempt any more. The failure itself stays reported. Before, the
// next attempt stayed on record, in the past, for as long as the mesh was away.
func TestARetriedDeclarationThatExpiresIsNoLongerAnnounced(t *testing.T) {
	f := newFixture(t)
	f.a.applier = &flakyApplier{blocked: true, inner: f.a.applier}
	now := t0
	f.a.o.Now = func() time.Time { return now }
	ctx := context.Background()
	if err := f.a.handle(ctx, f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	if f.a.Applied().NextAttempt.IsZero() {
		t.Fatal("no next attempt after the failure")
	}
	now = t0.Add(25 * time.Hour) // past the declaration's expiry and the skew
	if err := f.a.handle(ctx, f.a.retry.raw); err != nil {
		t.Fatal(err)
	}
	got := f.a.Applied()
	if !got.NextAttempt.IsZero() || f.a.retry.due() != nil {
		t.Fatalf("after the retried declaration expired: next attempt %v, retry pending %v", got.NextAttempt, f.a.retry.due() != nil)
	}
	if persisted, _ := state.Load(f.dir); !persisted.NextAttempt.IsZero() {
		t.Fatalf("the next attempt stays on record: %v", persisted.NextAttempt)
	}
	if st := reported(t, f.a); st.Error == nil || st.Error.Code != wire.StatusApplyFailed || st.Error.Version != 1 || !st.Error.RetryAt.IsZero() {
		t.Fatalf("report after the expiry: %+v", st.Error)
	}
}

// TestARestartForgetsTheNextAttempt: the declaration that failed to apply is not
// kept across a restart, so the next attempt on record is no longer announced
// (meshhost status, the report) while the restarted agent waits for the mesh to send
// it again. Before, a host restarted with the mesh out of reach showed "retry at"
// a time at which nothing was tried.
func TestARestartForgetsTheNextAttempt(t *testing.T) {
	f := newFixture(t)
	f.a.applier = &flakyApplier{blocked: true, inner: f.a.applier}
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	if f.a.Applied().NextAttempt.IsZero() {
		t.Fatal("no next attempt after the failure")
	}
	f.a.kp.Wipe()
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }() // its broker (127.0.0.1:1) refuses
	deadline := time.Now().Add(10 * time.Second)
	for {
		on, err := state.Load(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		if on.NextAttempt.IsZero() {
			if on.LastErrorCode != wire.StatusApplyFailed || on.LastErrorVersion != 1 {
				t.Fatalf("the failure is no longer on record: %q v%d", on.LastErrorCode, on.LastErrorVersion)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted agent still announces an attempt at %v", on.NextAttempt)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStaleIsLogged: the agent's log says once when the applied declaration expires
// without a fresh one (the mesh out of reach), and once when a fresh one came.
// Before, only the metric and meshhost status said so; the journal said nothing.
// TestDebugFollowsEachEnvelope: at --log-level debug an agent logged almost nothing
// more than at info (a review); it says each envelope it receives, a copy of what
// it holds that changes nothing, and a file check that found the files as declared.
// At info none of these is written.
func TestDebugFollowsEachEnvelope(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		f := newFixture(t)
		var logged bytes.Buffer
		f.a.log = slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: level}))
		ctx := context.Background()
		v1 := f.decl(t, 1, "one")
		for range 2 {
			if err := f.a.handle(ctx, v1); err != nil {
				t.Fatal(err)
			}
		}
		f.a.checkFiles(ctx)
		for _, line := range []string{
			"envelope received\" type=application/vnd.mesh.declaration.v2+json",
			"a copy of the applied declaration verified: nothing new to apply\" version=1",
			"file check: the managed files are as declared\" version=1 paths=1",
		} {
			if got := strings.Contains(logged.String(), line); got != (level == slog.LevelDebug) {
				t.Errorf("at %v, %q logged: %v\n%s", level, line, got, logged.String())
			}
		}
	}
}

// TestASyncAnswerCrossedByAPushIsNoRefusal: the mesh reads its state for a sync's
// answer, then pushes what changed next (a rotation's keyring, a declaration),
// which may arrive first; the answer's older envelope was then reported as
// rolled_back or old_keyring, which say that envelopes were replayed or the control
// plane restored from an older copy, on a converged node (a docs walkthrough). An
// envelope of the sync that is what the node held as it asked (the same body) or
// newer is no refusal; one older than that (a restored control plane answering),
// another body under the version it held, or one outside the sync (a replay) is
// reported as before, signed under an older keyring or not (a review). Each case
// goes through the loop's own path for an envelope (onEnvelope), tagged with the
// sync's tag or not.
func TestASyncAnswerCrossedByAPushIsNoRefusal(t *testing.T) {
	ctx := context.Background()
	keyring := func(f *fixture, epoch uint64) []byte {
		env, err := declarations.SignKeyring(declarations.Keyring{Mesh: "m", Epoch: epoch, Keys: f.a.id.SigningKeys, IssuedAt: t0}, f.key)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	membership := func(f *fixture, version uint64) []byte {
		env, err := declarations.SignMembership(declarations.Membership{Mesh: "m", Version: version, Brokers: []string{"127.0.0.1:1"}, IssuedAt: t0}, f.key)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	decl := func(version uint64, content string) func(*fixture) []byte {
		return func(f *fixture) []byte { return f.decl(t, version, content) }
	}
	for _, c := range []struct {
		name string
		// asked is what the node holds as the sync asks, pushed what arrives
		// before the answer's envelope, late.
		asked, pushed []func(*fixture) []byte
		late          func(*fixture) []byte
		// tagged says late carries the sync's tag.
		tagged  bool
		code    string
		version uint64
	}{
		{name: "a declaration the sync brought, after a newer pushed",
			asked: []func(*fixture) []byte{decl(1, "one")}, pushed: []func(*fixture) []byte{decl(3, "three")}, late: decl(2, "two"), tagged: true},
		{name: "the first declaration the sync brought, after a newer pushed",
			pushed: []func(*fixture) []byte{decl(3, "three")}, late: decl(2, "two"), tagged: true},
		{name: "a copy of the declaration held as the sync asked (re-signed), after a newer pushed",
			asked: []func(*fixture) []byte{decl(1, "one")}, pushed: []func(*fixture) []byte{decl(3, "three")}, late: decl(1, "one"), tagged: true},
		{name: "another body under the version held as the sync asked, after a newer pushed",
			asked: []func(*fixture) []byte{decl(1, "one")}, pushed: []func(*fixture) []byte{decl(3, "three")}, late: decl(1, "other"), tagged: true, code: "rolled_back", version: 1},
		{name: "a declaration older than the node held as it asked (a restored control plane)",
			asked: []func(*fixture) []byte{decl(3, "three")}, late: decl(2, "two"), tagged: true, code: "rolled_back", version: 2},
		{name: "an older declaration outside any sync (a replay)",
			asked: []func(*fixture) []byte{decl(1, "one")}, pushed: []func(*fixture) []byte{decl(3, "three")}, late: decl(2, "two"), code: "rolled_back", version: 2},
		{name: "a keyring of the sync's chain, after a newer pushed",
			pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 2) }}, late: func(f *fixture) []byte { return keyring(f, 1) }, tagged: true},
		{name: "the keyring held as the sync asked, after a newer pushed (no sync sends it)",
			asked: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 2) }},
			late: func(f *fixture) []byte { return keyring(f, 1) }, tagged: true, code: "rolled_back"},
		{name: "a declaration the sync signed before a rotation pushed since",
			pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, late: decl(2, "two"), tagged: true},
		{name: "a copy of the declaration held, signed before a rotation pushed since",
			asked: []func(*fixture) []byte{decl(3, "three")}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, late: decl(3, "three"), tagged: true},
		{name: "a declaration older than held, signed under the keyring held as the sync asked (a restored control plane)",
			asked: []func(*fixture) []byte{decl(3, "three")}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, late: decl(2, "two"), tagged: true, code: "old_keyring", version: 2},
		{name: "another body under the version held, signed before a rotation pushed since",
			asked: []func(*fixture) []byte{decl(3, "three")}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, late: decl(3, "other"), tagged: true, code: "old_keyring", version: 3},
		{name: "a declaration signed under a keyring older than the node held as it asked",
			asked: []func(*fixture) []byte{func(f *fixture) []byte { return keyring(f, 1) }}, late: decl(2, "two"), tagged: true, code: "old_keyring", version: 2},
		{name: "a membership of the sync, after a newer pushed",
			asked: []func(*fixture) []byte{func(f *fixture) []byte { return membership(f, 1) }}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return membership(f, 3) }},
			late: func(f *fixture) []byte { return membership(f, 2) }, tagged: true},
		{name: "the membership held as the sync asked, after a newer pushed (no sync sends it)",
			asked: []func(*fixture) []byte{func(f *fixture) []byte { return membership(f, 2) }}, pushed: []func(*fixture) []byte{func(f *fixture) []byte { return membership(f, 3) }},
			late: func(f *fixture) []byte { return membership(f, 2) }, tagged: true, code: "rolled_back"},
	} {
		f := newFixture(t)
		sy := &syncer{a: f.a}
		hold := func(envs []func(*fixture) []byte) {
			for _, env := range envs {
				if err := f.a.onEnvelope(ctx, &nats.Msg{Data: env(f)}, sy); err != nil || f.a.applied.LastErrorCode != "" {
					t.Fatalf("%s: what the node holds: %v %q", c.name, err, f.a.applied.LastError)
				}
			}
		}
		hold(c.asked)
		// The sync asks now, as start does.
		sy.seq++
		sy.tag = strconv.FormatUint(sy.seq, 10)
		sy.asked = f.a.askSync()
		hold(c.pushed)
		before := f.a.applied
		m := &nats.Msg{Data: c.late(f), Header: nats.Header{}}
		if c.tagged {
			m.Header.Set(wire.SyncHeader, sy.tag)
		}
		if err := f.a.onEnvelope(ctx, m, sy); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := f.a.applied
		if got.LastErrorCode != c.code || got.LastErrorVersion != c.version {
			t.Errorf("%s: error %q v%d (%s), want %q v%d", c.name, got.LastErrorCode, got.LastErrorVersion, got.LastError, c.code, c.version)
		}
		if got.Version != before.Version || got.KeyringEpoch != before.KeyringEpoch || got.MembershipVersion != before.MembershipVersion {
			t.Errorf("%s: the node holds v%d keyring %d membership %d now, held v%d keyring %d membership %d", c.name,
				got.Version, got.KeyringEpoch, got.MembershipVersion, before.Version, before.KeyringEpoch, before.MembershipVersion)
		}
		f.a.stats.mu.Lock()
		refused := maps.Clone(f.a.stats.refused)
		f.a.stats.mu.Unlock()
		if c.code == "" && len(refused) != 0 || c.code != "" && refused[c.code] != 1 {
			t.Errorf("%s: refusals counted %v", c.name, refused)
		}
		if f.a.answering != nil {
			t.Errorf("%s: the sync's request is left for the next envelope", c.name)
		}
	}
}

// TestASyncKeepsTheDigestItHeld: what a sync asked keeps the applied body's digest
// as bytes, whatever letter case the state file holds it in (it was compared as
// text, a review), and none before anything was applied.
func TestASyncKeepsTheDigestItHeld(t *testing.T) {
	f := newFixture(t)
	if q := f.a.askSync(); q.held {
		t.Fatalf("nothing applied: %+v, want no digest held", q)
	}
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	want := f.a.askSync()
	f.a.applied.BodyDigest = strings.ToUpper(f.a.applied.BodyDigest)
	if got := f.a.askSync(); !got.held || !want.held || got.bodyDigest != want.bodyDigest || got.req.AppliedVersion != 1 {
		t.Fatalf("asked with the digest in upper case: %+v, want %+v", got, want)
	}
}

// TestASyncsEnvelopesAreToldByItsTag: what judges a crossing is what the sync whose
// tag an envelope carries asked; a push (no tag) or an earlier sync's is not.
func TestASyncsEnvelopesAreToldByItsTag(t *testing.T) {
	sy := &syncer{tag: "7", asked: syncAsked{req: wire.SyncRequest{AppliedVersion: 4}}}
	tagged := func(tag string) *nats.Msg {
		m := &nats.Msg{Header: nats.Header{}}
		if tag != "" {
			m.Header.Set(wire.SyncHeader, tag)
		}
		return m
	}
	if q := sy.answers(tagged("7")); q == nil || q.req.AppliedVersion != 4 {
		t.Fatalf("the current sync's envelope: %+v, want its request", q)
	}
	for _, tag := range []string{"", "6", "8"} {
		if q := sy.answers(tagged(tag)); q != nil {
			t.Fatalf("an envelope tagged %q: %+v, want none", tag, q)
		}
	}
	if q := (&syncer{}).answers(tagged("")); q != nil {
		t.Fatalf("no sync made yet: %+v", q)
	}
}

func TestStaleIsLogged(t *testing.T) {
	f := newFixture(t)
	var logged bytes.Buffer
	f.a.log = slog.New(slog.NewTextHandler(&logged, nil))
	now := t0
	f.a.o.Now = func() time.Time { return now }
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	f.a.noteStale()
	if strings.Contains(logged.String(), "stale") {
		t.Fatalf("a fresh declaration logged as stale:\n%s", logged.String())
	}
	now = t0.Add(25 * time.Hour)
	f.a.noteStale()
	f.a.noteStale()
	if n := strings.Count(logged.String(), "this node is stale"); n != 1 {
		t.Fatalf("%d lines saying the node is stale, want 1:\n%s", n, logged.String())
	}
	f.a.applied.ExpiresAt = now.Add(24 * time.Hour) // a refresh
	f.a.noteStale()
	if n := strings.Count(logged.String(), "fresh again"); n != 1 {
		t.Fatalf("%d lines saying the declaration is fresh again, want 1:\n%s", n, logged.String())
	}
}

// TestIdentityOthersMayReadIsMadePrivate: an identity file restored with loose modes
// (0644) held the node's key for every local user to read, and the agent only said
// so. It is made private as the agent starts, and the warning says what else to do.
func TestIdentityOthersMayReadIsMadePrivate(t *testing.T) {
	f := newFixture(t)
	path := identity.Path(f.dir)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	if _, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(&logged, nil))}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the identity file after the agent started: %v %v, want 0600", fi.Mode().Perm(), err)
	}
	if !strings.Contains(logged.String(), "is private now") || !strings.Contains(logged.String(), "mode=-rw-r--r--") || !strings.Contains(logged.String(), "meshctl revoke") {
		t.Fatalf("the warning does not say what was done and what to do:\n%s", logged.String())
	}
	// Private already: nothing said.
	logged.Reset()
	if _, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(&logged, nil))}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logged.String(), "identity file") {
		t.Fatalf("a private identity file warned of:\n%s", logged.String())
	}
}

// TestTheFinishedEnrolmentsDraftKeyIsRemoved: an enrolment stopped right after it
// saved the identity (or whose removal of its draft failed) left enrol-pending.json,
// the node's private key a second time, and nothing removed it: the run again that
// would is never made on an enrolled machine. The agent removes it when it starts,
// and says so; a draft of another key (an unfinished enrolment with another token) is
// left where it is.
func TestTheFinishedEnrolmentsDraftKeyIsRemoved(t *testing.T) {
	f := newFixture(t)
	start := func() string {
		t.Helper()
		var logged bytes.Buffer
		if _, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.NewTextHandler(&logged, nil))}); err != nil {
			t.Fatal(err)
		}
		return logged.String()
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	if err := identity.SavePending(f.dir, identity.Pending{Format: 1, Mesh: "m", Node: "n-1", TokenHash: strings.Repeat("ab", 32), Seed: identity.Secret(otherSeed), CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	start()
	if _, err := identity.LoadPending(f.dir); err != nil {
		t.Fatalf("the draft of another key was removed: %v", err)
	}
	if err := identity.SavePending(f.dir, identity.Pending{Format: 1, Mesh: "m", Node: "n-1", TokenHash: strings.Repeat("ab", 32), Seed: f.a.id.Seed, CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if logged := start(); !strings.Contains(logged, "removed the draft key of the finished enrolment") {
		t.Errorf("the removal is not said:\n%s", logged)
	}
	if _, err := identity.LoadPending(f.dir); !errors.Is(err, identity.ErrNoPending) {
		t.Fatalf("the finished enrolment's draft key is still there: %v", err)
	}
}

// TestAnAgentStartingMarksTheLegacyStateFile (a review of the durability fixes): an
// agent killed between saving applied.state and turning applied.json into the
// marker left the pre-upgrade state in applied.json for good, which an older
// meshhost put back on the machine would read. The next agent's start marks it.
func TestAnAgentStartingMarksTheLegacyStateFile(t *testing.T) {
	f := newFixture(t)
	if err := f.a.handle(context.Background(), f.decl(t, 1, "one")); err != nil {
		t.Fatal(err)
	}
	f.a.kp.Wipe()
	stale := []byte(`{"format": 1, "version": 0}` + "\n")
	if err := os.WriteFile(state.LegacyPath(f.dir), stale, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{StateDir: f.dir, Root: f.root, Now: func() time.Time { return t0 }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	a.kp.Wipe()
	got, err := os.ReadFile(state.LegacyPath(f.dir))
	if err != nil || bytes.Equal(got, stale) || !bytes.Contains(got, []byte(`"`+state.FileName+`"`)) {
		t.Fatalf("applied.json after the start: %q, %v; want the marker naming %s", got, err, state.FileName)
	}
}

// TestOwnersNotSetAreSaid (a walkthrough): an agent that is not root applies a
// declaration's files without their owner and group, as documented, and said so
// nowhere. It says so once an apply, at info; as root, or with no owner declared,
// nothing.
func TestOwnersNotSetAreSaid(t *testing.T) {
	for _, c := range []struct {
		chown, owned bool
		says         bool
	}{{false, true, true}, {true, true, false}, {false, false, false}} {
		f := newFixture(t)
		fa, ok := f.a.applier.(apply.FileApplier)
		if !ok {
			t.Fatalf("the fixture's applier is a %T", f.a.applier)
		}
		fa.Chown = c.chown
		f.a.applier = fa
		var log bytes.Buffer
		f.a.log = slog.New(slog.NewTextHandler(&log, nil))
		content := "x"
		file := declarations.File{Path: "etc/app.conf", Content: &content}
		if c.owned {
			file.Owner, file.Group = "0", "0"
		}
		env, err := declarations.SignDeclaration(declarations.Declaration{
			Mesh: "m", Node: "n-1", NodeKey: f.nodeKey, Version: 1, IssuedAt: t0, ExpiresAt: t0.Add(24 * time.Hour),
			Body: declarations.Body{Files: []declarations.File{file}},
		}, f.key)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.a.handle(context.Background(), env); err != nil {
			t.Fatal(err)
		}
		said := strings.Count(log.String(), "owner and group declared were not set")
		if said != map[bool]int{true: 1, false: 0}[c.says] || c.says && !strings.Contains(log.String(), "first=etc/app.conf") {
			t.Errorf("chown %t, owner declared %t: said %d times:\n%s", c.chown, c.owned, said, log.String())
		}
	}
}
