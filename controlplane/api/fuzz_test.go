package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// adminOps pairs each operation with a fresh value of its arguments, as the control
// plane decodes them.
var adminOps = []struct {
	op   string
	args func() any
}{
	{OpTokenCreate, func() any { return new(TokenCreateRequest) }},
	{OpTokenList, func() any { return new(TokenListRequest) }},
	{OpTokenCancel, func() any { return new(TokenCancelRequest) }},
	{OpDeclare, func() any { return new(DeclareRequest) }},
	{OpNodes, func() any { return new(NodesRequest) }},
	{OpProgress, func() any { return new(ProgressRequest) }},
	{OpRevoke, func() any { return new(RevokeRequest) }},
	{OpLabel, func() any { return new(LabelRequest) }},
	{OpControlConfirm, func() any { return new(ControlConfirmRequest) }},
	{OpControlRemove, func() any { return new(ControlRequest) }},
	{OpControlAdd, func() any { return new(ControlRequest) }},
	{OpControlAbort, func() any { return new(ControlRequest) }},
	{OpSigningKeyRotate, func() any { return new(RotateRequest) }},
	{OpSigningKeyStatus, func() any { return new(KeyringStatusRequest) }},
	{OpSigningKeyRetire, func() any { return new(RetireRequest) }},
	{OpOperatorAdd, func() any { return new(OperatorAddRequest) }},
	{OpOperatorList, func() any { return new(OperatorListRequest) }},
	{OpOperatorRevoke, func() any { return new(OperatorRevokeRequest) }},
	{OpControlStatus, func() any { return new(ControlStatusRequest) }},
}

// TestFuzzedOpsAreEveryOp: every operation the control plane decodes arguments for
// is in adminOps, so that FuzzDecodeAdminRequest feeds its decoder. The operator
// credentials' three operations went without for a session (found by looking).
func TestFuzzedOpsAreEveryOp(t *testing.T) {
	fuzzed := map[string]bool{}
	for _, o := range adminOps {
		fuzzed[o.op] = true
	}
	for _, op := range append(AdminOps(), OpControlStatus) {
		if op == OpPing {
			continue // answered without reading its body
		}
		if !fuzzed[op] {
			t.Errorf("%s is not in adminOps: FuzzDecodeAdminRequest never feeds its decoder", op)
		}
	}
}

// TestAdminRequestTrailingBrackets: a request followed by a stray closing bracket
// is trailing data like any other, not the end of some enclosing value.
func TestAdminRequestTrailingBrackets(t *testing.T) {
	good := must(EncodeAdminRequest(OpRevoke, RevokeRequest{Node: "web-1"}))
	for _, tail := range []string{"}", "]", " }", "\n]", "}}", "]{}", ",", ":1"} {
		var r RevokeRequest
		if err := DecodeAdminRequest(OpRevoke, append(bytes.Clone(good), tail...), &r); !errors.Is(err, ErrAdminRequest) {
			t.Errorf("request + %q: %v, want ErrAdminRequest", tail, err)
		}
	}
	var r RevokeRequest
	if err := DecodeAdminRequest(OpRevoke, append(bytes.Clone(good), " \n\t"...), &r); err != nil || r.Node != "web-1" {
		t.Fatalf("trailing white space refused: %+v, %v", r, err)
	}
	// The arguments are read as strictly: a stray bracket after them is refused too
	// (inside the envelope it is a syntax error of the whole request).
	if err := DecodeAdminRequest(OpRevoke, []byte(`{"v":2,"op":"revoke","args":{"node":"web-1"}}}`), &r); !errors.Is(err, ErrAdminRequest) {
		t.Fatalf("args + }: %v", err)
	}
}

// FuzzDecodeAdminRequest feeds operator requests to every operation's decoder. It
// must not panic; it refuses only with ErrAdminRequest; what it accepts is one valid
// JSON value naming the operation at this version, and its arguments encode again
// into a request that decodes to the same arguments.
func FuzzDecodeAdminRequest(f *testing.F) {
	for _, r := range []struct {
		op   string
		args any
	}{
		{OpTokenCreate, TokenCreateRequest{ID: "ab", ProofKey: "cd", Node: "web-1", Role: "worker", Labels: map[string]string{"tier": "web"}, TTL: Duration(15 * time.Minute)}},
		{OpTokenList, TokenListRequest{Node: "web-1"}},
		{OpTokenCancel, TokenCancelRequest{Node: "web-1"}},
		{OpDeclare, DeclareRequest{Labels: map[string]string{"a": "b"}, Body: json.RawMessage(`{"files":[{"path":"a","content":"x"}]}`)}},
		{OpNodes, NodesRequest{Nodes: []string{"a"}, After: "a", Limit: 3}},
		{OpProgress, ProgressRequest{Targets: []Assignment{{Node: "a", Version: 2}}}},
		{OpRevoke, RevokeRequest{Node: "web-1"}},
		{OpLabel, LabelRequest{Node: "web-1", Labels: map[string]string{"k": ""}}},
		{OpControlConfirm, ControlConfirmRequest{Node: "cp-2", Probes: []string{"p"}}},
		{OpControlAdd, ControlRequest{Node: "cp-2"}},
		{OpSigningKeyRotate, RotateRequest{}},
		{OpSigningKeyStatus, KeyringStatusRequest{}},
		{OpSigningKeyRetire, RetireRequest{Force: true}},
		{OpOperatorAdd, OperatorAddRequest{JWT: "eyJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln", IssuedBy: "cp-1", Renew: true}},
		{OpOperatorList, OperatorListRequest{}},
		{OpOperatorRevoke, OperatorRevokeRequest{Names: []string{"alice", "bob"}}},
		{OpOperatorRevoke, OperatorRevokeRequest{Names: []string{"alice"}, Keys: []string{"UABC"}}},
		{OpControlStatus, ControlStatusRequest{}},
	} {
		f.Add(r.op, must(EncodeAdminRequest(r.op, r.args)))
	}
	f.Add(OpRevoke, []byte(`{"v":2,"op":"revoke","args":{"node":"web-1"}}]`))
	f.Add(OpRevoke, []byte(`{"v":2,"op":"revoke","args":null}`))
	f.Add(OpTokenCreate, []byte(`{"v":2,"op":"token.create","args":{"ttl":"-9223372036854775808ns"}}`))
	f.Fuzz(func(t *testing.T, op string, data []byte) {
		for _, o := range adminOps {
			if op != o.op && len(op) > 0 {
				continue
			}
			args := o.args()
			err := DecodeAdminRequest(o.op, data, args)
			if err != nil {
				if !errors.Is(err, ErrAdminRequest) {
					t.Fatalf("%s: error of no known kind: %v", o.op, err)
				}
				continue
			}
			if !json.Valid(data) {
				t.Fatalf("%s: accepted input that is not one JSON value: %q", o.op, data)
			}
			enc, err := EncodeAdminRequest(o.op, args)
			if err != nil {
				t.Fatalf("%s: accepted arguments do not encode: %v", o.op, err)
			}
			again := o.args()
			if err := DecodeAdminRequest(o.op, enc, again); err != nil {
				t.Fatalf("%s: re-encoded request refused: %v\n%s", o.op, err, enc)
			}
			enc2, err := EncodeAdminRequest(o.op, again)
			if err != nil || !bytes.Equal(enc, enc2) {
				t.Fatalf("%s: round trip changed the arguments:\n%s\n%s", o.op, enc, enc2)
			}
		}
	})
}

// TestDecodeRefusesTimesOutOfRange: a status whose retry_at, or a sync whose
// applied_expires_at, falls outside the years 0 to 9999 once taken to UTC is
// malformed. The control plane keeps retry_at in UTC in the status command it
// commits for a batch of nodes, and encoding/json cannot write such a time: one
// host's report made every batch it was in fail to commit, the other nodes'
// reports with it.
func TestDecodeRefusesTimesOutOfRange(t *testing.T) {
	for _, at := range []string{"0000-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "0000-01-01T00:00:00+00:01"} {
		status := []byte(`{"v":2,"node":"web-1","error":{"code":"expired","message":"x","retry_at":"` + at + `"}}`)
		if _, err := Decode[Status](status); !errors.Is(err, ErrMalformed) {
			t.Errorf("status retry_at %s: %v, want ErrMalformed", at, err)
		}
		sync := []byte(`{"v":2,"have_applied":true,"applied_expires_at":"` + at + `"}`)
		if _, err := Decode[SyncRequest](sync); !errors.Is(err, ErrMalformed) {
			t.Errorf("sync applied_expires_at %s: %v, want ErrMalformed", at, err)
		}
	}
	for _, at := range []string{"0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00-01:00", "2026-12-01T10:00:00+02:00"} {
		st, err := Decode[Status]([]byte(`{"v":2,"node":"web-1","error":{"code":"expired","message":"x","retry_at":"` + at + `"}}`))
		if err != nil {
			t.Errorf("status retry_at %s: %v", at, err)
			continue
		}
		if _, err := json.Marshal(st.Error.RetryAt.UTC().Truncate(time.Second)); err != nil {
			t.Errorf("retry_at %s accepted but cannot be written: %v", at, err)
		}
	}
}

// FuzzParseOperatorSig feeds the operator's signature header, which any client of
// the operators' account can write, to its parser. It must not panic; what it reads
// is written back by FormatOperatorSig as a value that reads the same.
func FuzzParseOperatorSig(f *testing.F) {
	f.Add(FormatOperatorSig("UKEY", 1700000000, []byte{1, 2, 3}))
	f.Add("v1 UKEY -1 AQID")
	f.Add("v1\tUKEY  17\nAQID")
	f.Add("v1 UKEY 99999999999999999999 AQID")
	f.Fuzz(func(t *testing.T, v string) {
		key, at, sig, ok := ParseOperatorSig(v)
		if !ok {
			return
		}
		if len(v) > 512 {
			t.Fatalf("a value of %d bytes read as a signature", len(v))
		}
		again := FormatOperatorSig(key, at, sig)
		key2, at2, sig2, ok2 := ParseOperatorSig(again)
		if !ok2 || key2 != key || at2 != at || !bytes.Equal(sig2, sig) {
			t.Fatalf("%q read as (%q %d %x), written back as %q, which reads as (%q %d %x %t)", v, key, at, sig, again, key2, at2, sig2, ok2)
		}
	})
}
