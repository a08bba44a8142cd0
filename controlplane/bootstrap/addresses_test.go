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

// TestAddressesBySameRules: --raft-listen and --cluster-listen are checked as
// --listen is, before the data directory is touched. Equal addresses passed and the
// mesh was created, then every serve exited 1 blaming "another process" for its own
// clash; names and wildcards were recorded (and the other control nodes dial them);
// `--raft-listen foo` failed the bind check (exit 1) and left a lock file in a
// directory that was new. An address no token carries (a zone, IPv4 written as
// IPv6, multicast) is refused as its flag's too.
func TestAddressesBySameRules(t *testing.T) {
	for _, c := range []struct {
		name                  string
		listen, raft, cluster string
		flag                  string // the OptionError's flag
		says                  string
	}{
		{"Raft on the broker's address", "127.0.0.1:27600", "127.0.0.1:27600", "", "--raft-listen", "must differ"},
		{"cluster on the broker's address", "127.0.0.1:27600", "127.0.0.1:27605", "127.0.0.1:27600", "--cluster-listen", "must differ"},
		{"cluster on the default Raft port", "127.0.0.1:27600", "", "127.0.0.1:27601", "--cluster-listen", "the default of --raft-listen"},
		{"Raft on the cluster address", "127.0.0.1:27600", "127.0.0.1:27609", "127.0.0.1:27609", "--cluster-listen", "must differ"},
		{"Raft on the wildcard broker's port", "0.0.0.0:27600", "127.0.0.1:27600", "127.0.0.1:27602", "--raft-listen", "must differ"},
		{"IPv6 wildcard broker's port", "[::]:27600", "127.0.0.1:27601", "[::1]:27600", "--cluster-listen", "must differ"},
		{"Raft a name", "127.0.0.1:27600", "localhost:27801", "", "--raft-listen", "not ip:port"},
		{"cluster a name", "127.0.0.1:27600", "", "cp-1.example:27802", "--cluster-listen", "not ip:port"},
		{"Raft no address", "127.0.0.1:27600", "foo", "", "--raft-listen", "not ip:port"},
		{"Raft a wildcard", "127.0.0.1:27600", "0.0.0.0:27801", "", "--raft-listen", "wildcard"},
		{"cluster an IPv6 wildcard", "127.0.0.1:27600", "", "[::]:27802", "--cluster-listen", "wildcard"},
		{"Raft port 0", "127.0.0.1:27600", "127.0.0.1:0", "", "--raft-listen", "port 0"},
		{"broker port 0", "127.0.0.1:0", "127.0.0.1:27601", "127.0.0.1:27602", "--listen", "port 0"},
		// What no token carries, which the control plane refuses in a control
		// token after the CA signed its claim (a review): said as the flag's.
		{"broker an IPv6 zone", "[fe80::1%lo]:27600", "127.0.0.1:27601", "127.0.0.1:27602", "--listen", "IPv6 zone"},
		{"Raft IPv4 as IPv6", "127.0.0.1:27600", "[::ffff:127.0.0.1]:27601", "", "--raft-listen", "write it as plain IPv4 (127.0.0.1:27601)"},
		{"cluster multicast", "127.0.0.1:27600", "", "224.0.0.1:27602", "--cluster-listen", "multicast"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o, out := options(t, dir)
			o.Listen, o.RaftListen, o.ClusterListen = c.listen, c.raft, c.cluster
			o.Advertise = "192.0.2.10:7300"
			for _, dry := range []bool{true, false} {
				o.DryRun = dry
				err := Run(o)
				var oe *OptionError
				if !errors.As(err, &oe) || oe.Flag != c.flag || !strings.Contains(err.Error(), c.says) {
					t.Fatalf("dry run %v: err = %v, want an OptionError of %s saying %q", dry, err, c.flag, c.says)
				}
				if out.Len() > 0 {
					t.Fatalf("a plan was printed for refused addresses:\n%s", out)
				}
				assertNotCreated(t, dir)
			}
		})
	}
}

// TestAnAdvertisedAddressATokenCannotCarryIsRefused: every token carries the
// advertised address (--listen's when no --advertise is given); one no token takes
// was recorded, and then every mint failed, each leaving a pending token whose
// secret nobody held (a review). It is refused as its flag's, nothing made.
func TestAnAdvertisedAddressATokenCannotCarryIsRefused(t *testing.T) {
	for _, c := range []struct{ name, listen, advertise, flag, says string }{
		{"advertised IPv4 as IPv6", "127.0.0.1:27600", "[::ffff:192.0.2.10]:7300", "--advertise", "plain IPv4"},
		{"advertised with a zone", "127.0.0.1:27600", "[fe80::1%eth0]:7300", "--advertise", "IPv6 zone"},
		{"advertised multicast", "127.0.0.1:27600", "224.0.0.1:7300", "--advertise", "multicast"},
		{"advertised port written with a leading zero", "127.0.0.1:27600", "192.0.2.10:07300", "--advertise", "canonical form"},
		{"listen port written with a leading zero, no --advertise", "127.0.0.1:027600", "", "--listen", "canonical form"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			o, _ := options(t, dir)
			o.Listen, o.Advertise = c.listen, c.advertise
			err := Run(o)
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Flag != c.flag || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("err = %v, want an OptionError of %s saying %q", err, c.flag, c.says)
			}
			assertNotCreated(t, dir)
		})
	}
}
