//go:build unix

package enrol

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mesh/host/statedir"
)

// goldenWorkerToken is the valid worker token of host/token's golden vectors; its
// broker is a documentation address nothing answers on.
const goldenWorkerToken = "mesh1_demo_192.0.2.10:7300_82f8df6cf97a41d3f5bb7fb08077a5b3219431a440fe4ab5418b03e72477d9bc_9ea3df41f2f21714d2693bfaf019c940f9d69abf30d725916d4b8d5cae1ae816_web-1_worker_1796000900_999e1d651419d00ff5600b17835889fcc6fa1f648205327732534e16bdd0bdc2_4fe82970"

// TestEnrolRefusesAnUnsafeStateDirectory: enrolment into a directory another user
// owns or group or others may write stops before anything is written there or sent.
func TestEnrolRefusesAnUnsafeStateDirectory(t *testing.T) {
	for name, prepare := range map[string]func(t *testing.T, dir string) error{
		"group-writable": func(_ *testing.T, dir string) error { return os.Chmod(dir, 0o770) },
		"another user's": func(t *testing.T, dir string) error {
			if os.Geteuid() != 0 {
				t.Skip("giving the directory to another user (chown to 65534) needs root")
			}
			return os.Chown(dir, 65534, 65534)
		},
	} {
		// The subtest's own t skips: the outer one's, called from a subtest,
		// would not stop it.
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := prepare(t, dir); err != nil {
				t.Fatal(err)
			}
			_, err := Enrol(context.Background(), Options{StateDir: dir, Token: goldenWorkerToken,
				Now: func() time.Time { return time.Unix(1796000000, 0) }, DialTimeout: 100 * time.Millisecond})
			if !errors.Is(err, statedir.ErrUnsafe) {
				t.Fatalf("got %v, want statedir.ErrUnsafe", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("something was written: %v", entries)
			}
		})
	}
}
