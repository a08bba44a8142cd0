package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"mesh/host/token"
)

// The golden vectors are shared, byte for byte, with controlplane/api: the control
// plane defines the same messages on its own side, and this agent imports nothing of
// it, so these files are what holds the two definitions together.
const (
	goldenPath   = "testdata/golden.json"
	cpGoldenPath = "../../controlplane/api/testdata/golden.json"
)

var goldenTypes = map[string]func() any{
	"enrol_request":          func() any { return new(EnrolRequest) },
	"enrol_response_ok":      func() any { return new(EnrolResponse) },
	"enrol_response_refused": func() any { return new(EnrolResponse) },
	"sync_request":           func() any { return new(SyncRequest) },
	"sync_response":          func() any { return new(SyncResponse) },
	"sync_response_refused":  func() any { return new(SyncResponse) },
	"status":                 func() any { return new(Status) },
	"status_with_error":      func() any { return new(Status) },
	"status_answer":          func() any { return new(StatusAnswer) },
}

func golden(t testing.TB) map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func compact(t *testing.T, raw []byte) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestGoldenVectorsRoundTrip(t *testing.T) {
	vectors := golden(t)
	var names, want []string
	for name := range vectors {
		names = append(names, name)
	}
	for name := range goldenTypes {
		want = append(want, name)
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("golden vectors %v, want %v", names, want)
	}
	for name, raw := range vectors {
		t.Run(name, func(t *testing.T) {
			v := goldenTypes[name]()
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v); err != nil {
				t.Fatalf("decode: %v", err)
			}
			out, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := string(out), compact(t, raw); got != want {
				t.Fatalf("re-encoding differs from the vector:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func TestGoldenVectorsCoverEveryField(t *testing.T) {
	seen := map[reflect.Type]map[string]bool{}
	mark := func(typ reflect.Type, raw []byte) {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			t.Fatal(err)
		}
		if seen[typ] == nil {
			seen[typ] = map[string]bool{}
		}
		for f := range fields {
			seen[typ][f] = true
		}
	}
	for name, raw := range golden(t) {
		mark(reflect.TypeOf(goldenTypes[name]()).Elem(), raw)
		var fields map[string]json.RawMessage
		json.Unmarshal(raw, &fields)
		if sub, ok := fields["subjects"]; ok {
			mark(reflect.TypeOf(Subjects{}), sub)
		}
		if sub, ok := fields["shared_key"]; ok {
			var holders []json.RawMessage
			json.Unmarshal(sub, &holders)
			for _, h := range holders {
				mark(reflect.TypeOf(KeyHolder{}), h)
			}
		}
	}
	for typ, fields := range seen {
		for i := range typ.NumField() {
			tag := strings.Split(typ.Field(i).Tag.Get("json"), ",")[0]
			if !fields[tag] {
				t.Errorf("%s.%s (%q) appears in no golden vector", typ.Name(), typ.Field(i).Name, tag)
			}
		}
	}
}

func TestGoldenFilesAreIdentical(t *testing.T) {
	ours, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile(cpGoldenPath)
	if err != nil {
		t.Fatalf("the control plane's copy of the golden vectors: %v", err)
	}
	if !bytes.Equal(ours, theirs) {
		t.Fatalf("%s and %s differ: the host and the control plane would not speak the same protocol", goldenPath, cpGoldenPath)
	}
}

func TestGoldenDecodeReply(t *testing.T) {
	v := golden(t)
	ok, err := DecodeReply[EnrolResponse](v["enrol_response_ok"])
	if err != nil {
		t.Fatal(err)
	}
	if !ok.OK || ok.Error != nil || ok.Mesh != "demo" || ok.Node != "web-1" || ok.Role != "worker" ||
		!strings.HasPrefix(ok.CAPEM, "-----BEGIN CERTIFICATE-----") || len(ok.Brokers) != 2 ||
		len(ok.Keyring) == 0 || len(ok.Declaration) == 0 || len(ok.Membership) == 0 {
		t.Fatalf("enrol response = %+v", ok)
	}
	want := Subjects{Declarations: "mesh.node.web-1.decl", Status: "mesh.node.web-1.status", Sync: "mesh.node.web-1.sync", InboxPrefix: "_INBOX.node.web-1"}
	if ok.Subjects == nil || *ok.Subjects != want {
		t.Fatalf("subjects = %+v", ok.Subjects)
	}
	refused, err := DecodeReply[EnrolResponse](v["enrol_response_refused"])
	if err != nil || refused.OK || refused.Error == nil || refused.Error.Code != CodeTokenUsed {
		t.Fatalf("refusal = %+v, %v", refused, err)
	}
	sr, err := DecodeReply[SyncResponse](v["sync_response"])
	if err != nil || sr.Error != nil || sr.Sent != 2 {
		t.Fatalf("sync response = %+v, %v", sr, err)
	}
	srr, err := DecodeReply[SyncResponse](v["sync_response_refused"])
	if err != nil || srr.Error == nil || srr.Error.Code != CodeNotFound || srr.Sent != 0 {
		t.Fatalf("sync refusal = %+v, %v", srr, err)
	}
	sa, err := DecodeReply[StatusAnswer](v["status_answer"])
	if err != nil || len(sa.SharedKey) != 2 || sa.SharedKey[1].CID != 7 || sa.SharedKey[1].Addr != "198.51.100.7" ||
		len(sa.SharedKey[0].Server) != 56 || !sa.SharedKey[0].Since.Before(sa.SharedKey[1].Since) {
		t.Fatalf("status answer = %+v, %v", sa, err)
	}

	// What this agent sends is what the control plane reads: the request vector's
	// key proof verifies under this side's KeyProofMessage.
	var req EnrolRequest
	if err := json.Unmarshal(v["enrol_request"], &req); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.FromPublicKey(req.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	proof, _ := base64.StdEncoding.DecodeString(req.KeyProof)
	if err := kp.Verify(KeyProofMessage(req.Mesh, req.Node, req.PublicKey), proof); err != nil {
		t.Fatal("the golden key proof does not verify: KeyProofMessage changed")
	}
	// The token is named and proved, never sent: the vector's proof is this side's
	// for the secret behind it (the control plane checks it with tokenfmt).
	var tok token.Token
	secret, _ := hex.DecodeString("98548e32186dadbc15aafef5664365295672efd6271546ca35d2411d797d07dd")
	copy(tok.Secret[:], secret)
	if id := tok.SecretHash(); req.TokenID != hex.EncodeToString(id[:]) {
		t.Fatalf("token_id %s is not the golden secret's id", req.TokenID)
	}
	if want := base64.StdEncoding.EncodeToString(tok.Prove(req.Mesh, req.Node, req.PublicKey)); req.TokenProof != want {
		t.Fatalf("token_proof %s; this side proves %s", req.TokenProof, want)
	}
	if bytes.Contains(v["enrol_request"], []byte(hex.EncodeToString(secret))) {
		t.Fatal("the enrolment request carries the secret")
	}
}

func TestSubjects(t *testing.T) {
	for got, want := range map[string]string{
		EnrolKeySubject("web-1", "UKEY"): "mesh.enrol.web-1.UKEY",
		EnrolInbox("web-1", "UKEY"):      "_INBOX.enrol.web-1.UKEY",
		EnrolUser("web-1"):               "enrol:web-1",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := string(KeyProofMessage("demo", "web-1", "UKEY")); got != "mesh-enrol-v1\x00demo\x00web-1\x00UKEY" {
		t.Errorf("KeyProofMessage = %q", got)
	}
}

// TestNodeSubjects holds the host's copy of the control plane's subject scheme to
// literal values, and to the golden enrolment answer both sides decode.
func TestNodeSubjects(t *testing.T) {
	want := Subjects{
		Declarations: "mesh.node.web-1.decl",
		Status:       "mesh.node.web-1.status",
		Sync:         "mesh.node.web-1.sync",
		InboxPrefix:  "_INBOX.node.web-1",
	}
	if got := NodeSubjects("web-1"); got != want {
		t.Fatalf("NodeSubjects(web-1) = %+v, want %+v", got, want)
	}
	resp, err := DecodeReply[EnrolResponse](golden(t)["enrol_response_ok"])
	if err != nil || resp.Subjects == nil {
		t.Fatalf("the golden enrolment answer: %+v, %v", resp, err)
	}
	if got := NodeSubjects(resp.Node); *resp.Subjects != got {
		t.Fatalf("the golden answer gives node %s the subjects %+v; NodeSubjects gives %+v", resp.Node, *resp.Subjects, got)
	}
	if NodeSubjects("web-2") == want {
		t.Fatal("two nodes share their subjects")
	}
}

func TestDecodeReplyErrors(t *testing.T) {
	valid := `{"v":2,"ok":false,"error":{"code":"token_used","message":"x"}}`
	pad := func(n int) []byte {
		return []byte(valid[:len(valid)-1] + strings.Repeat(" ", n-len(valid)) + "}")
	}
	const (
		malformed = iota
		tooLarge
		version
	)
	tests := []struct {
		name string
		data []byte
		kind int
	}{
		{"one byte over the cap", pad(MaxReplySize + 1), tooLarge},
		{"far over the cap", bytes.Repeat([]byte("{"), 2*MaxReplySize), tooLarge},
		{"version 1, the previous protocol", []byte(`{"v":1,"ok":true}`), version},
		{"version 0", []byte(`{"v":0}`), version},
		{"version missing", []byte(`{"ok":true}`), version},
		{"json null", []byte(`null`), version},
		{"empty", nil, malformed},
		{"not json", []byte("<html>"), malformed},
		{"truncated", []byte(valid[:30]), malformed},
		{"array", []byte(`[]`), malformed},
		{"ok as string", []byte(`{"v":2,"ok":"true"}`), malformed},
		{"version as string", []byte(`{"v":"2"}`), malformed},
		{"keyring not json", []byte(`{"v":2,"ok":true,"keyring":nope}`), malformed},
		{"brokers not a list", []byte(`{"v":2,"ok":true,"brokers":"127.0.0.1:1"}`), malformed},
		{"trailing garbage", []byte(valid + "]"), malformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeReply[EnrolResponse](tt.data)
			if !errors.Is(err, ErrMalformedReply) {
				t.Fatalf("err = %v, not ErrMalformedReply", err)
			}
			if got := errors.Is(err, ErrReplyTooLarge); got != (tt.kind == tooLarge) {
				t.Fatalf("err = %v: errors.Is(ErrReplyTooLarge) = %v", err, got)
			}
			if got := errors.Is(err, ErrReplyVersion); got != (tt.kind == version) {
				t.Fatalf("err = %v: errors.Is(ErrReplyVersion) = %v", err, got)
			}
			if tt.kind == version && !strings.Contains(err.Error(), "upgrade meshhost") {
				t.Fatalf("a version mismatch does not say what to do: %v", err)
			}
		})
	}
	if _, err := DecodeReply[EnrolResponse](pad(MaxReplySize)); err != nil {
		t.Fatalf("a reply of exactly the cap: %v", err)
	}
	if r, err := DecodeReply[SyncResponse]([]byte(`{"v":2,"added_later":[1,2]}`)); err != nil || r.V != 2 {
		t.Fatalf("an unknown field within a version: %+v, %v", r, err)
	}
}

// FuzzDecodeReply: whatever the control plane sends, DecodeReply refuses it as
// malformed or accepts a reply of this version within the cap, which encodes
// and decodes again to the same reply.
func FuzzDecodeReply(f *testing.F) {
	for _, raw := range golden(f) {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip[EnrolResponse](t, data)
		fuzzRoundTrip[SyncResponse](t, data)
		fuzzRoundTrip[StatusAnswer](t, data)
	})
}

func fuzzRoundTrip[T Reply](t *testing.T, data []byte) {
	m, err := DecodeReply[T](data)
	if err != nil {
		if !errors.Is(err, ErrMalformedReply) {
			t.Fatalf("refusal of no known kind: %v", err)
		}
		return
	}
	if v := reflect.ValueOf(m).FieldByName("V").Int(); v != ProtocolVersion || len(data) > MaxReplySize {
		t.Fatalf("accepted v=%d, %d bytes", v, len(data))
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	again, err := DecodeReply[T](out)
	if err != nil {
		t.Fatalf("re-encoded %T refused: %v", m, err)
	}
	// Compared as written: what the agent read, written and read again, is what it
	// read (a time with a zero offset comes back in UTC, the same instant).
	if out2, err := json.Marshal(again); err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("round trip changed %s into %s (%v)", out, out2, err)
	}
}

// TestEnrolPassword holds the agent's password to the literal controlplane/api's
// test holds: the control plane reads exactly this.
func TestEnrolPassword(t *testing.T) {
	const want = "proof1.abababababababababababababababababababababababababababababababab.AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ"
	if got := EnrolPassword(strings.Repeat("ab", 32), bytes.Repeat([]byte{1}, 64)); got != want {
		t.Fatalf("EnrolPassword = %s, want %s", got, want)
	}
}
