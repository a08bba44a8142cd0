package state

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAUsedControlTokenOfARemovedAdmissionSaysSo: the machine whose key a control
// token admitted, after that node was removed and its id admitted again elsewhere,
// was told "another key, which stays admitted", both false: the refusal says the
// node was removed and admitted again since (a review). Still token_used.
func TestAUsedControlTokenOfARemovedAdmissionSaysSo(t *testing.T) {
	m := newMachine(t)
	m.must(initCmd("demo", t0))
	m.must(controlToken("ctl", "cp-2", "p2", "UOP2"))
	m.must(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(time.Minute)))
	m.must(controlToken("ctl3", "cp-3", "p3", "UOP3"))
	m.must(controlEnrol("ctl3", "cp-3", "K3", "XC3", t0.Add(2*time.Minute)))
	m.must(Command{Op: OpRemoveControl, At: t0.Add(3 * time.Minute), RemoveControl: &RemoveControlCmd{Node: "cp-2"}})
	m.must(controlToken("ctl2", "cp-2", "pB", "UOPB"))
	m.must(controlEnrol("ctl2", "cp-2", "KB", "XCB", t0.Add(4*time.Minute)))
	r := m.apply(controlEnrol("ctl", "cp-2", "K2", "XC2", t0.Add(2*time.Hour)))
	if !errors.Is(r.Err, ErrTokenUsed) || strings.Contains(r.Err.Error(), "another key") || !strings.Contains(r.Err.Error(), "admitted again since") {
		t.Fatalf("first machine (key K2, the key token ctl admitted) after cp-2 was re-admitted on KB: %v; want ErrTokenUsed saying cp-2 was admitted again, not 'another key'", r.Err)
	}
}
