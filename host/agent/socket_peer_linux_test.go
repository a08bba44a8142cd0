package agent

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// peerHelperEnv names the socket a re-run of this test binary, as another user,
// asks for a retry on (TestSocketPeerHelper).
const peerHelperEnv = "MESH_TEST_SOCKET_PEER"

// TestSocketPeerHelper is the client TestSocketRefusesOtherUsers runs as another
// user; it does nothing in an ordinary run.
func TestSocketPeerHelper(t *testing.T) {
	p := os.Getenv(peerHelperEnv)
	if p == "" {
		t.Skip("a helper process of TestSocketRefusesOtherUsers")
	}
	c, err := net.Dial("unix", p)
	if err != nil {
		os.Stdout.WriteString("DIAL " + err.Error() + "\n")
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte(RequestRetryHooks + "\n"))
	b, _ := io.ReadAll(c)
	os.Stdout.WriteString("ANSWER " + string(b) + "\n")
}

// TestSocketRefusesOtherUsers: a user other than the agent's (and not root) who
// reaches the socket file (a state directory of mode 0755, which statedir allows;
// the socket as it is between its bind and its chmod under umask 0, here made 0666)
// is refused by the agent on the peer's credentials, answered nothing, and its
// request never reaches the loop. Before, the socket file's mode was the only
// guard: such a user ran the failed hooks again and read their output.
func TestSocketRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user (uid 65534) needs root")
	}
	dir := socketDir(t)
	f := newFixtureIn(t, dir)
	var logs lockedLog
	f.a.log = slog.New(slog.NewTextHandler(&logs, nil))
	asked := make(chan struct{}, 4)
	serveTestSocket(t, f.a, dir, func(r chan<- HooksOutcome) { asked <- struct{}{}; r <- HooksOutcome{Nothing: true} })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(SocketPath(dir), 0o666); err != nil {
		t.Fatal(err)
	}
	// The test binary, where uid 65534 may run it.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "client.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(uid uint32) string {
		t.Helper()
		cmd := exec.Command(bin, "-test.run=^TestSocketPeerHelper$", "-test.v")
		cmd.Env = append(os.Environ(), peerHelperEnv+"="+SocketPath(dir))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("helper as uid %d: %v\n%s", uid, err, out.String())
		}
		return out.String()
	}
	out := run(65534)
	if !strings.Contains(out, "ANSWER \n") {
		t.Fatalf("uid 65534 on the agent's socket got: %s\nwant the connection closed with no answer", out)
	}
	select {
	case <-asked:
		t.Fatal("uid 65534's request reached the agent's loop")
	default:
	}
	if l := logs.String(); !strings.Contains(l, "refused a connection on the agent's socket") || !strings.Contains(l, "uid 65534") {
		t.Fatalf("the refusal is not logged with the peer's uid:\n%s", l)
	}
	// The positive control: root, the agent's user here, is answered.
	if out := run(0); !strings.Contains(out, `ANSWER {"nothing":true}`) {
		t.Fatalf("root on the agent's socket got: %s", out)
	}
}
