package state

import (
	"errors"
	"testing"
	"time"
)

// A control token recorded with its identity sealed to the control nodes' curve
// keys: the same request sent again (its copies sealed afresh, so other bytes) is a
// repeat by the identity's sum, another identity is not; a command carrying both
// forms is refused; a cancellation and the expiry drop every copy.
func TestControlTokenSealedToControlNodes(t *testing.T) {
	addrs := &ControlAddrs{Broker: "10.0.0.2:7300", Raft: "10.0.0.2:7301", Cluster: "10.0.0.2:7302"}
	cmd := func(id, sum string, blob string) *CreateTokenCmd {
		return &CreateTokenCmd{ID: id, Node: "cp-2", Role: RoleControl, TTL: time.Hour, Control: addrs,
			SealedTo: map[string]SealedIdentity{"cp-1": {Blob: []byte(blob), Sealer: "X"}}, SealedSum: sum}
	}
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(Command{Op: OpCreateToken, At: t0, CreateToken: cmd("tok", "sum-1", "first")})
	if r := m.apply(Command{Op: OpCreateToken, At: t0.Add(time.Second), CreateToken: cmd("tok", "sum-1", "sealed again")}); r.Err != nil || !r.Repeated {
		t.Fatalf("the same request sent again: %+v, want a repeat", r)
	}
	if r := m.apply(Command{Op: OpCreateToken, At: t0.Add(time.Second), CreateToken: cmd("tok", "sum-2", "first")}); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("the same id with another identity: %v, want ErrBadCommand", r.Err)
	}
	both := cmd("tok-both", "sum-3", "x")
	both.Node, both.Sealed = "cp-3", []byte("plain")
	if r := m.apply(Command{Op: OpCreateToken, At: t0, CreateToken: both}); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("both forms of the identity: %v, want ErrBadCommand", r.Err)
	}
	noSum := cmd("tok-nosum", "", "x")
	noSum.Node = "cp-4"
	if r := m.apply(Command{Op: OpCreateToken, At: t0, CreateToken: noSum}); !errors.Is(r.Err, ErrBadCommand) {
		t.Fatalf("copies without their sum: %v, want ErrBadCommand", r.Err)
	}
	if tk := m.state().Tokens["tok"]; string(tk.SealedTo["cp-1"].Blob) != "first" || !tk.HoldsIdentity() {
		t.Fatalf("recorded %+v", tk)
	}

	m.must(Command{Op: OpCancelTokens, At: t0.Add(time.Minute), CancelTokens: &CancelTokensCmd{Node: "cp-2"}})
	if tk := m.state().Tokens["tok"]; tk.HoldsIdentity() {
		t.Fatalf("a cancelled token keeps its identity: %+v", tk.SealedTo)
	}
	m.must(Command{Op: OpCreateToken, At: t0, CreateToken: func() *CreateTokenCmd { c := cmd("tok-5", "sum-5", "y"); c.Node = "cp-5"; return c }()})
	m.must(Command{Op: OpPurge, At: t0.Add(time.Hour)})
	if tk := m.state().Tokens["tok-5"]; tk.HoldsIdentity() {
		t.Fatalf("an expired token keeps its identity: %+v", tk.SealedTo)
	}
}
