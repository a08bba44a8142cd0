package api

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"mesh/tokenfmt"
)

// The golden vectors are shared, byte for byte, with host/wire: the host defines the
// same messages on its own side, and both sides must read and write these exactly.
const (
	goldenPath     = "testdata/golden.json"
	hostGoldenPath = "../../host/wire/testdata/golden.json"
)

// goldenTypes maps each vector to the control plane's type for it.
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

func golden(t *testing.T) map[string]json.RawMessage {
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
	var names []string
	for name := range vectors {
		names = append(names, name)
	}
	slices.Sort(names)
	var want []string
	for name := range goldenTypes {
		want = append(want, name)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("golden vectors %v, want %v", names, want)
	}
	for name, raw := range vectors {
		t.Run(name, func(t *testing.T) {
			v := goldenTypes[name]()
			// Strict decoding: a field the vector has and the type lacks (renamed,
			// removed) fails here; one the type has and the vector lacks fails below.
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

// Every field of every type appears in at least one vector, so a field added on one
// side only cannot hide behind omitempty.
// controlTypes maps the control-plane-only vectors (testdata/control.json): the
// admission of a control node, which only meshctl join and the control plane speak.
var controlTypes = map[string]func() any{
	"control_enrol_request":  func() any { return new(EnrolRequest) },
	"control_enrol_response": func() any { return new(EnrolResponse) },
	// What agents older than decision 0018 send: the secret itself. Still read.
	"enrol_request_with_secret": func() any { return new(EnrolRequest) },
}

func controlVectors(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	data, err := os.ReadFile("testdata/control.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestControlVectorsRoundTrip(t *testing.T) {
	for name, raw := range controlVectors(t) {
		mk, ok := controlTypes[name]
		if !ok {
			t.Fatalf("unknown control vector %s", name)
		}
		v := mk()
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, _ := json.Marshal(v)
		if got, want := string(out), compact(t, raw); got != want {
			t.Fatalf("%s: re-encoding differs:\n got %s\nwant %s", name, got, want)
		}
	}
}

func TestGoldenVectorsCoverEveryField(t *testing.T) {
	vectors := golden(t)
	types := map[string]func() any{}
	maps.Copy(types, goldenTypes)
	for name, raw := range controlVectors(t) {
		vectors[name] = raw
		types[name] = controlTypes[name]
	}
	seen := map[reflect.Type]map[string]bool{}
	for name, raw := range vectors {
		typ := reflect.TypeOf(types[name]()).Elem()
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
		if sub, ok := fields["control"]; ok {
			var c map[string]json.RawMessage
			json.Unmarshal(sub, &c)
			for _, st := range []reflect.Type{reflect.TypeOf(ControlAdmission{})} {
				if seen[st] == nil {
					seen[st] = map[string]bool{}
				}
				for f := range c {
					seen[st][f] = true
				}
			}
		}
		if sub, ok := fields["shared_key"]; ok {
			var holders []map[string]json.RawMessage
			json.Unmarshal(sub, &holders)
			st := reflect.TypeOf(KeyHolder{})
			if seen[st] == nil {
				seen[st] = map[string]bool{}
			}
			for _, h := range holders {
				for f := range h {
					seen[st][f] = true
				}
			}
		}
		if sub, ok := fields["subjects"]; ok {
			var s map[string]any
			json.Unmarshal(sub, &s)
			st := reflect.TypeOf(Subjects{})
			if seen[st] == nil {
				seen[st] = map[string]bool{}
			}
			for f := range s {
				seen[st][f] = true
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
	theirs, err := os.ReadFile(hostGoldenPath)
	if err != nil {
		t.Fatalf("the host's copy of the golden vectors: %v", err)
	}
	if !bytes.Equal(ours, theirs) {
		t.Fatalf("%s and %s differ: the control plane and the host would not speak the same protocol", goldenPath, hostGoldenPath)
	}
}

// goldenSecret is the token secret behind the golden enrolment requests (the older
// one sends it; the current one proves it).
const goldenSecret = "98548e32186dadbc15aafef5664365295672efd6271546ca35d2411d797d07dd"

func TestGoldenDecode(t *testing.T) {
	v := golden(t)
	req, err := Decode[EnrolRequest](v["enrol_request"])
	if err != nil {
		t.Fatal(err)
	}
	if req.V != 2 || req.Mesh != "demo" || req.Node != "web-1" || req.Role != "worker" || req.Secret != "" || len(req.TokenID) != 64 || req.Agent != "meshhost/0.1.0" {
		t.Fatalf("enrol request = %+v", req)
	}
	// The key proof in the vector verifies under this side's KeyProofMessage.
	kp, err := nkeys.FromPublicKey(req.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := base64.StdEncoding.DecodeString(req.KeyProof)
	if err != nil {
		t.Fatal(err)
	}
	if err := kp.Verify(KeyProofMessage(req.Mesh, req.Node, req.PublicKey), proof); err != nil {
		t.Fatal("the golden key proof does not verify: KeyProofMessage changed")
	}
	// The token the agent names and proves is the one the vectors' secret minted
	// (the agent's side of the proof is host/token's; decision 0018).
	var tok tokenfmt.Token
	secret, _ := hex.DecodeString(goldenSecret)
	copy(tok.Secret[:], secret)
	if id := tok.SecretHash(); req.TokenID != hex.EncodeToString(id[:]) {
		t.Fatalf("token_id %s is not the golden secret's id", req.TokenID)
	}
	tp, err := base64.StdEncoding.DecodeString(req.TokenProof)
	if err != nil || !tokenfmt.VerifyProof(tok.ProofKey(), req.Mesh, req.Node, req.PublicKey, tp) {
		t.Fatal("the golden token proof does not verify under tokenfmt's proof key")
	}
	sr, err := Decode[SyncRequest](v["sync_request"])
	if err != nil || sr.AppliedVersion != 3 || sr.KeyringEpoch != 1 || !sr.HaveApplied ||
		!sr.AppliedExpiresAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("sync request = %+v, %v", sr, err)
	}
	st, err := Decode[Status](v["status_with_error"])
	if err != nil || st.Error == nil || st.Error.Code != "rolled_back" || st.Error.Version != 2 || !st.Stale {
		t.Fatalf("status = %+v, %v", st, err)
	}
	ok, _ := Decode[Status](v["status"])
	if ok.Error != nil || !ok.HaveApplied || ok.AppliedVersion != 3 {
		t.Fatalf("status = %+v", ok)
	}
	// The reply's subjects are the ones this side computes.
	var resp EnrolResponse
	json.Unmarshal(v["enrol_response_ok"], &resp)
	if resp.Subjects == nil || *resp.Subjects != SubjectsFor("web-1") {
		t.Fatalf("golden subjects %+v, SubjectsFor gives %+v", resp.Subjects, SubjectsFor("web-1"))
	}
}

func TestSubjects(t *testing.T) {
	// docs/protocol.md, spelled out.
	for got, want := range map[string]string{
		EnrolSubject("web-1"):            "mesh.enrol.web-1",
		EnrolKeySubject("web-1", "UKEY"): "mesh.enrol.web-1.UKEY",
		DeclarationSubject("web-1"):      "mesh.node.web-1.decl",
		StatusSubject("web-1"):           "mesh.node.web-1.status",
		SyncSubject("web-1"):             "mesh.node.web-1.sync",
		NodeInbox("web-1"):               "_INBOX.node.web-1",
		EnrolInbox("web-1", "UKEY"):      "_INBOX.enrol.web-1.UKEY",
		AdminSubject(OpRevoke):           "mesh.admin.revoke",
		AdminSubject(OpTokenCreate):      "mesh.admin.token.create",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if got := string(KeyProofMessage("demo", "web-1", "UKEY")); got != "mesh-enrol-v1\x00demo\x00web-1\x00UKEY" {
		t.Errorf("KeyProofMessage = %q", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := `{"v":2,"applied_version":3,"keyring_epoch":1}`
	pad := func(n int) []byte {
		// Valid JSON of exactly n bytes: the size cap is checked before parsing.
		return []byte(valid[:len(valid)-1] + strings.Repeat(" ", n-len(valid)) + "}")
	}
	kinds := []error{ErrTooLarge, ErrMalformed, ErrVersion}
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"one byte over the cap", pad(MaxMessageSize + 1), ErrTooLarge},
		{"far over the cap", bytes.Repeat([]byte("x"), 4*MaxMessageSize), ErrTooLarge},
		{"version 1, the previous protocol", []byte(`{"v":1,"applied_version":3}`), ErrVersion},
		{"version 0", []byte(`{"v":0}`), ErrVersion},
		{"version negative", []byte(`{"v":-1}`), ErrVersion},
		{"version missing", []byte(`{"applied_version":3}`), ErrVersion},
		{"version null", []byte(`{"v":null}`), ErrVersion},
		{"json null", []byte(`null`), ErrVersion},
		{"duplicate v, last wins", []byte(`{"v":2,"v":1}`), ErrVersion},
		{"empty", nil, ErrMalformed},
		{"not json", []byte("hello"), ErrMalformed},
		{"truncated", []byte(valid[:20]), ErrMalformed},
		{"array", []byte(`[1]`), ErrMalformed},
		{"version as string", []byte(`{"v":"2"}`), ErrMalformed},
		{"version as float", []byte(`{"v":2.5}`), ErrMalformed},
		{"field of the wrong type", []byte(`{"v":2,"applied_version":"3"}`), ErrMalformed},
		{"negative version number", []byte(`{"v":2,"applied_version":-3}`), ErrMalformed},
		{"trailing garbage", []byte(valid + "x"), ErrMalformed},
		{"two objects", []byte(valid + valid), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode[SyncRequest](tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			for _, k := range kinds {
				if k != tt.want && errors.Is(err, k) {
					t.Fatalf("err = %v is also %v", err, k)
				}
			}
		})
	}
	// Exactly at the cap is accepted; unknown fields are ignored within a version.
	if _, err := Decode[SyncRequest](pad(MaxMessageSize)); err != nil {
		t.Fatalf("a message of exactly the cap: %v", err)
	}
	if m, err := Decode[SyncRequest]([]byte(`{"v":2,"applied_version":7,"future":true}`)); err != nil || m.AppliedVersion != 7 {
		t.Fatalf("unknown field: %+v, %v", m, err)
	}
	// The error never echoes a large or secret-bearing input back.
	_, err := Decode[EnrolRequest]([]byte(`{"v":1,"secret":"` + strings.Repeat("ab", 32) + `"}`))
	if err == nil || strings.Contains(err.Error(), "abab") {
		t.Fatalf("err = %v", err)
	}
}

func TestDuration(t *testing.T) {
	b, err := json.Marshal(TokenCreateRequest{ID: "x", Node: "n", Role: "worker", TTL: Duration(15 * time.Minute)})
	if err != nil || !strings.Contains(string(b), `"ttl":"15m0s"`) {
		t.Fatalf("%s, %v", b, err)
	}
	var r TokenCreateRequest
	if err := json.Unmarshal(b, &r); err != nil || time.Duration(r.TTL) != 15*time.Minute {
		t.Fatalf("%+v, %v", r, err)
	}
	for _, bad := range []string{`{"ttl":15}`, `{"ttl":"soon"}`, `{"ttl":""}`, `{"ttl":null}`, `{"ttl":"15"}`} {
		var r TokenCreateRequest
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s accepted as %v", bad, time.Duration(r.TTL))
		}
	}
}

func FuzzDecode(f *testing.F) {
	data, err := os.ReadFile(goldenPath)
	if err != nil {
		f.Fatal(err)
	}
	var m map[string]json.RawMessage
	json.Unmarshal(data, &m)
	for _, raw := range m {
		f.Add([]byte(raw))
	}
	f.Add([]byte(`{"v":1}`))
	// Year -1 in UTC, year 0 as written: a report carrying it once blinded every
	// operator's meshctl nodes (the leader could not write its answer).
	f.Add([]byte(`{"v":2,"node":"n","put_back":1,"last_put_back_at":"0000-01-01T00:00:00+23:59"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRoundTrip[EnrolRequest](t, data)
		fuzzRoundTrip[SyncRequest](t, data)
		fuzzRoundTrip[Status](t, data)
	})
}

// fuzzRoundTrip checks that Decode refuses with one of its errors, or accepts a
// version-1 message within the cap that survives re-encoding unchanged.
func fuzzRoundTrip[T Message](t *testing.T, data []byte) {
	m, err := Decode[T](data)
	if err != nil {
		if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) {
			t.Fatalf("error of no known kind: %v", err)
		}
		return
	}
	if v := reflect.ValueOf(m).FieldByName("V").Int(); v != ProtocolVersion || len(data) > MaxMessageSize {
		t.Fatalf("accepted v=%d, %d bytes", v, len(data))
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	// The times the control plane keeps are taken to UTC and written into Raft
	// commands or operators' answers: every one must encode there too, whichever
	// field it came in (a field added later included: each is found by its type).
	everyTime(reflect.ValueOf(m), func(at time.Time) {
		if _, err := json.Marshal(at.UTC()); err != nil {
			t.Fatalf("accepted a time the control plane cannot write: %v", err)
		}
	})
	again, err := Decode[T](out)
	if err != nil {
		t.Fatalf("re-encoded %T refused: %v", m, err)
	}
	// Compared as written: a time read with a zero offset ("+00:00") is in the local
	// zone, written back as "Z" and read again as UTC, the same instant.
	if out2, err := json.Marshal(again); err != nil || !bytes.Equal(out, out2) {
		t.Fatalf("round trip changed %s into %s (%v)", out, out2, err)
	}
}

// everyTime calls f with every time.Time v holds, through structs and pointers.
func everyTime(v reflect.Value, f func(time.Time)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			everyTime(v.Elem(), f)
		}
	case reflect.Struct:
		if at, ok := v.Interface().(time.Time); ok {
			f(at)
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				everyTime(v.Field(i), f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			everyTime(v.Index(i), f)
		}
	}
}

// TestAdminRequest: an operator request is exactly an AdminRequest for its operation;
// anything else, such as another call's reply delivered on the subject, is refused.
func TestAdminRequest(t *testing.T) {
	good, err := EncodeAdminRequest(OpRevoke, RevokeRequest{Node: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	var r RevokeRequest
	if err := DecodeAdminRequest(OpRevoke, good, &r); err != nil || r.Node != "web-1" {
		t.Fatalf("round trip: %+v, %v", r, err)
	}
	reply, _ := json.Marshal(AdminResponse{V: ProtocolVersion, Result: json.RawMessage(`{"node":"web-1"}`)})
	for name, data := range map[string][]byte{
		"another operation":   must(EncodeAdminRequest(OpLabel, RevokeRequest{Node: "web-1"})),
		"a reply":             reply,
		"empty":               nil,
		"empty object":        []byte(`{}`),
		"bare arguments":      []byte(`{"node":"web-1"}`),
		"previous version":    []byte(`{"v":1,"op":"revoke","args":{"node":"web-1"}}`),
		"no arguments":        []byte(`{"v":2,"op":"revoke"}`),
		"unknown field":       []byte(`{"v":2,"op":"revoke","args":{"node":"web-1"},"force":true}`),
		"unknown argument":    []byte(`{"v":2,"op":"revoke","args":{"node":"web-1","all":true}}`),
		"trailing data":       append(slices.Clone(good), []byte(` {}`)...),
		"arguments of a type": []byte(`{"v":2,"op":"revoke","args":"web-1"}`),
	} {
		var r RevokeRequest
		if err := DecodeAdminRequest(OpRevoke, data, &r); !errors.Is(err, ErrAdminRequest) {
			t.Errorf("%s: %v, want ErrAdminRequest", name, err)
		}
	}
	var rot RotateRequest
	if err := DecodeAdminRequest(OpSigningKeyRotate, must(EncodeAdminRequest(OpSigningKeyRotate, RotateRequest{})), &rot); err != nil {
		t.Fatalf("an operation without arguments: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// A sync sends the declaration again unless the node holds that very version
// applied, valid at least as long.
func TestSyncRequestHasDeclared(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name string
		req  SyncRequest
		want bool
	}{
		{"holds it", SyncRequest{HaveApplied: true, AppliedVersion: 3, AppliedExpiresAt: exp}, true},
		{"holds a copy valid longer", SyncRequest{HaveApplied: true, AppliedVersion: 3, AppliedExpiresAt: exp.Add(time.Hour)}, true},
		{"holds a copy that expires sooner (a refresh is due)", SyncRequest{HaveApplied: true, AppliedVersion: 3, AppliedExpiresAt: exp.Add(-time.Second)}, false},
		{"holds an older version", SyncRequest{HaveApplied: true, AppliedVersion: 2, AppliedExpiresAt: exp}, false},
		{"holds a newer version (the mesh lost one?)", SyncRequest{HaveApplied: true, AppliedVersion: 4, AppliedExpiresAt: exp}, false},
		{"has applied nothing", SyncRequest{AppliedVersion: 3, AppliedExpiresAt: exp}, false},
		{"an agent that does not say (older agents)", SyncRequest{AppliedVersion: 3}, false},
		{"version 0 applied", SyncRequest{HaveApplied: true, AppliedVersion: 0, AppliedExpiresAt: exp}, false},
	} {
		version := uint64(3)
		if c.name == "version 0 applied" {
			version = 1
		}
		if got := c.req.HasDeclared(version, exp); got != c.want {
			t.Errorf("%s: HasDeclared = %v, want %v", c.name, got, c.want)
		}
	}
}

// The lists of operations that run beside changes (reads) and that may be sent again
// when no answer came (reads, token creation, an operator's record): a change counted in either by
// mistake would run beside other changes, or be carried out twice.
func TestOpClasses(t *testing.T) {
	for _, c := range []struct {
		name string
		is   func(string) bool
		want []string
	}{
		{"read-only", ReadOnly, []string{OpPing, OpTokenList, OpProgress, OpNodes, OpSigningKeyStatus, OpOperatorList}},
		// operator.add: the same key's record again is answered with it; not
		// operator.revoke, which sent again would revoke credentials issued
		// under the name since.
		{"repeatable", Repeatable, []string{OpPing, OpTokenList, OpProgress, OpNodes, OpSigningKeyStatus, OpOperatorList, OpTokenCreate, OpOperatorAdd}},
	} {
		var got []string
		for _, op := range AdminOps() {
			if c.is(op) {
				got = append(got, op)
			}
		}
		slices.Sort(got)
		slices.Sort(c.want)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s operations %v, want %v", c.name, got, c.want)
		}
		if c.is("no.such.op") {
			t.Errorf("an unknown operation counts as %s", c.name)
		}
	}
}

// goldenEnrolPassword is EnrolPassword("ab"×32, 64 bytes of 1). host/wire's test
// holds the same literal.
const goldenEnrolPassword = "proof1.abababababababababababababababababababababababababababababababab.AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ"

func TestEnrolPassword(t *testing.T) {
	id, proof := strings.Repeat("ab", 32), bytes.Repeat([]byte{1}, 64)
	if got := EnrolPassword(id, proof); got != goldenEnrolPassword {
		t.Fatalf("EnrolPassword = %s", got)
	}
	gotID, gotProof, ok := ParseEnrolPassword(goldenEnrolPassword)
	if !ok || gotID != id || !bytes.Equal(gotProof, proof) {
		t.Fatalf("ParseEnrolPassword = %s %x %v", gotID, gotProof, ok)
	}
	if gotID, _, ok := ParseEnrolPassword(strings.Replace(goldenEnrolPassword, "abab", "ABAB", 1)); !ok || gotID != id {
		t.Fatalf("an id in capitals: %s %v; want it read, in lower case", gotID, ok)
	}
	for name, pw := range map[string]string{
		"empty":            "",
		"a bare secret":    strings.Repeat("ab", 32),
		"no proof":         "proof1." + id,
		"empty proof":      "proof1." + id + ".",
		"short id":         "proof1." + id[:62] + "." + goldenEnrolPassword[len("proof1.")+65:],
		"id not hex":       "proof1." + strings.Repeat("zz", 32) + "." + goldenEnrolPassword[len("proof1.")+65:],
		"proof truncated":  goldenEnrolPassword[:len(goldenEnrolPassword)-4],
		"proof padded":     goldenEnrolPassword + "==",
		"proof too long":   goldenEnrolPassword + "AQEB",
		"proof std base64": strings.Replace(goldenEnrolPassword, "AQEB", "+/+/", 1),
		"another version":  strings.Replace(goldenEnrolPassword, "proof1.", "proof2.", 1),
		"oversized":        goldenEnrolPassword + strings.Repeat("A", 1<<16),
		"a third dot":      goldenEnrolPassword + ".x",
	} {
		if _, _, ok := ParseEnrolPassword(pw); ok {
			t.Errorf("%s: read as a token proof", name)
		}
	}
}

func FuzzParseEnrolPassword(f *testing.F) {
	f.Add(goldenEnrolPassword)
	f.Add(strings.Repeat("ab", 32))
	f.Fuzz(func(t *testing.T, pw string) {
		id, proof, ok := ParseEnrolPassword(pw)
		if !ok {
			return
		}
		if len(id) != 64 || len(proof) != 64 || strings.ToLower(id) != id {
			t.Fatalf("read %q as id %q and a %d-byte proof", pw, id, len(proof))
		}
		if again := EnrolPassword(id, proof); !strings.EqualFold(again, pw) {
			t.Fatalf("%q reads as %q again", pw, again)
		}
	})
}

// TestOperatorSigHeader: the signature header reads back what was written, and
// nothing else of its form is read as one.
func TestOperatorSigHeader(t *testing.T) {
	v := FormatOperatorSig("UKEY", 1700000000, []byte{1, 2, 3})
	key, at, sig, ok := ParseOperatorSig(v)
	if !ok || key != "UKEY" || at != 1700000000 || string(sig) != "\x01\x02\x03" {
		t.Fatalf("round trip of %q: %q %d %v %t", v, key, at, sig, ok)
	}
	for _, bad := range []string{"", "v1", "v1 UKEY 17 AQID extra", "v2 UKEY 17 AQID", "v1 UKEY soon AQID", "v1 UKEY 17 !!", "v1 UKEY 17 " + strings.Repeat("A", 600)} {
		if _, _, _, ok := ParseOperatorSig(bad); ok {
			t.Errorf("%q read as a signature", bad)
		}
	}
	a, b := OperatorSigned("declare", 1, "id", []byte("x")), OperatorSigned("declare", 1, "id", []byte("y"))
	if string(a) == string(b) || string(a) == string(OperatorSigned("revoke", 1, "id", []byte("x"))) ||
		string(a) == string(OperatorSigned("declare", 2, "id", []byte("x"))) || string(a) == string(OperatorSigned("declare", 1, "id2", []byte("x"))) {
		t.Fatal("what is signed does not tell bodies, operations, times or request ids apart")
	}
}
