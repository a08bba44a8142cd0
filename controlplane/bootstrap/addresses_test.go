package bootstrap

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// assertNotCreated fails unless dir, new before the call, still does not exist:
// not even the lock file was made.
func assertNotCreated(t *testing.T, dir string) {
	t.Helper()
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%s was created (holding %v); a refused bootstrap must not touch it", dir, names)
	}
}

// TestListenWhoseDefaultsOverflow: the default Raft and cluster addresses are
// --listen's port plus 1 and 2, in uint16: --listen 127.0.0.1:65535 made them
// 127.0.0.1:0 (a random port) and 127.0.0.1:1, recorded in mesh.json for good. Such
// a --listen is refused (a usage error, the data directory untouched) unless the
// addresses whose default would overflow are given; given, the top port is an
// address like any other.
func TestListenWhoseDefaultsOverflow(t *testing.T) {
	for _, c := range []struct {
		name, listen, raft, cluster string
		refused                     []string // what the refusal names; nil: accepted
	}{
		{"top port, no defaults given", "127.0.0.1:65535", "", "", []string{"--listen", "--raft-listen and --cluster-listen", "past 65535"}},
		{"top port, only Raft given", "127.0.0.1:65535", "127.0.0.1:7301", "", []string{"--listen", "give --cluster-listen,"}},
		{"one below, cluster default overflows", "127.0.0.1:65534", "", "", []string{"--listen", "give --cluster-listen,"}},
		{"two below: both defaults fit", "127.0.0.1:65533", "", "", nil},
		{"top port, both given", "127.0.0.1:65535", "127.0.0.1:7301", "127.0.0.1:7302", nil},
		{"IPv6 top port, both given", "[::1]:65535", "[::1]:7301", "[::1]:7302", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o, out := options(t, dir)
			o.Listen, o.RaftListen, o.ClusterListen, o.DryRun = c.listen, c.raft, c.cluster, true
			err := Run(o)
			if c.refused == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if strings.Contains(out.String(), ":0,") || strings.Contains(out.String(), "cluster 127.0.0.1:1\n") {
					t.Fatalf("the plan holds a wrapped port:\n%s", out)
				}
				return
			}
			var oe *OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("err = %v, want an OptionError (a usage error)", err)
			}
			for _, want := range c.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("err = %v, want it to say %q", err, want)
				}
			}
			if out.Len() > 0 {
				t.Errorf("a plan was printed for refused addresses:\n%s", out)
			}
			assertNotCreated(t, dir)
		})
	}
}
