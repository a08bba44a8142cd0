package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controlplane/datadir"
)

// joinedConfig is the mesh.json `meshctl join` writes for cp-2 of mesh demo.
func joinedConfig(o Options) datadir.Config {
	return datadir.Config{Mesh: "demo", Node: "cp-2", Listen: o.Listen, RaftListen: o.RaftListen, ClusterListen: o.ClusterListen,
		Brokers: []string{"127.0.0.1:7300", o.Listen}, CAPin: strings.Repeat("ab", 32), AdminAccount: "AABC", CAHolder: "cp-1", Joined: true}
}

// TestRefusesAJoinedNode: bootstrap, and its dry run, refuse the directory of a
// control node that joined, whatever flags they are given, and say which mesh and
// node it is, that it joined, and what to run instead. Nothing is planned or changed.
func TestRefusesAJoinedNode(t *testing.T) {
	for name, c := range map[string]struct {
		prepare func(d datadir.Dir, cfg datadir.Config)
		want    []string
	}{
		"joined": {func(d datadir.Dir, cfg datadir.Config) { saveConfig(t, d, cfg) },
			[]string{"control node cp-2 of mesh demo", "joined the mesh with `meshctl join`", "when it joined, the CA key was on cp-1", "meshctl serve --data"}},
		"joined before the field was recorded": {func(d datadir.Dir, cfg datadir.Config) {
			cfg.Joined = false
			saveConfig(t, d, cfg)
		}, []string{"control node cp-2 of mesh demo", "joined the mesh", "cp-1"}},
		"joined, CA key restored here": {func(d datadir.Dir, cfg datadir.Config) {
			cfg.CAHolder = "cp-2"
			saveConfig(t, d, cfg)
		}, []string{"control node cp-2 of mesh demo", "joined the mesh"}},
		"join not completed": {func(d datadir.Dir, cfg datadir.Config) {
			cfg.Joining = true
			saveConfig(t, d, cfg)
		}, []string{"control node cp-2 of mesh demo", "has not completed", "meshctl join --data"}},
		"join begun": {func(d datadir.Dir, _ datadir.Config) {
			if err := os.WriteFile(d.Path(datadir.JoinPendingFile), []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, []string{datadir.JoinPendingFile, "has not completed", "meshctl join --data"}},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			d := datadir.Dir(dir)
			o, out := options(t, dir)
			c.prepare(d, joinedConfig(o))
			before := snapshotDir(t, dir)
			for _, flags := range []struct {
				node   string
				dryRun bool
			}{{"cp-2", false}, {"cp-2", true}, {"cp-1", false}, {"cp-1", true}} {
				o.Node, o.DryRun = flags.node, flags.dryRun
				out.Reset()
				err := Run(o)
				var je *JoinedError
				if !errors.As(err, &je) || !errors.Is(err, ErrConflict) {
					t.Fatalf("%+v: err = %v, want a *JoinedError matching ErrConflict", flags, err)
				}
				for _, want := range append(c.want, dir, "nothing to bootstrap or resume", "empty --data directory") {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%+v: the refusal lacks %q: %v", flags, want, err)
					}
				}
				if strings.Contains(out.String(), "generate the mesh CA") || strings.Contains(out.String(), "plan:") {
					t.Errorf("%+v: a plan was printed for a joined node:\n%s", flags, out)
				}
				assertUnchanged(t, dir, before)
				if d.Exists(datadir.CAKeyFile) {
					t.Fatalf("%+v: a CA key was made on a joined node", flags)
				}
			}
		})
	}
}

func saveConfig(t *testing.T, d datadir.Dir, cfg datadir.Config) {
	t.Helper()
	if err := d.SaveConfig(cfg); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesADirectoryInUse: while another holds the data directory's lock,
// bootstrap and its dry run are refused at once, naming the holder, and change
// nothing; a lock file left by a process that is gone blocks nothing.
func TestRefusesADirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	d := datadir.Dir(dir)
	o, _ := options(t, dir)
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	lock, err := d.Lock("meshctl serve")
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotDir(t, dir)
	for _, dry := range []bool{false, true} {
		o.DryRun = dry
		err := Run(o)
		if !errors.Is(err, datadir.ErrInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d (meshctl serve)", os.Getpid())) {
			t.Fatalf("dry run %v: err = %v, want ErrInUse naming this process", dry, err)
		}
	}
	assertUnchanged(t, dir, before)
	lock.Release()

	// A fresh directory: the refusal comes before anything is made.
	fresh := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(fresh, 0o700); err != nil {
		t.Fatal(err)
	}
	held, err := datadir.Dir(fresh).Lock("meshctl join")
	if err != nil {
		t.Fatal(err)
	}
	o2, _ := options(t, fresh)
	if err := Run(o2); !errors.Is(err, datadir.ErrInUse) {
		t.Fatalf("fresh directory in use: %v", err)
	}
	assertEmpty(t, fresh)
	held.Release()
	if err := Run(o2); err != nil {
		t.Fatalf("after the holder is gone: %v", err)
	}
}

// TestNoLockFileInARefusedDirectory: a directory bootstrap refuses (not empty, no
// mesh.json) gets no lock file either.
func TestNoLockFileInARefusedDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, _ := options(t, dir)
	if err := Run(o); !errors.Is(err, ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	if datadir.Dir(dir).Exists(datadir.LockFile) {
		t.Fatal("a refused directory got a lock file")
	}
}

// TestInterruptedStopsBetweenSteps: once the context ends (SIGINT or SIGTERM in
// meshctl), bootstrap begins no further step and says how to resume; the next run
// does.
func TestInterruptedStopsBetweenSteps(t *testing.T) {
	dir := t.TempDir()
	o, out := options(t, dir)
	cause := errors.New("interrupted by SIGTERM")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	_, err := RunContext(ctx, o)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "before step 1") || !strings.Contains(err.Error(), "run bootstrap again to resume") {
		t.Fatalf("err = %v, want the cause and how to resume", err)
	}
	if !strings.Contains(out.String(), "not begun: interrupted") {
		t.Errorf("output does not say the step was not begun:\n%s", out)
	}
	assertEmpty(t, dir)
	if err := Run(o); err != nil {
		t.Fatalf("the next run: %v", err)
	}
}

// TestCAKeyWithoutCertificateOrPin: a run killed between writing the CA key and its
// certificate left a key nothing trusts (no pin recorded): the next run replaces it
// rather than refusing to go on.
func TestCAKeyWithoutCertificateOrPin(t *testing.T) {
	dir := t.TempDir()
	d := datadir.Dir(dir)
	o, _ := options(t, dir)
	saveConfig(t, d, datadir.Config{Mesh: o.Mesh, Node: o.Node, Listen: o.Listen, RaftListen: o.RaftListen, ClusterListen: o.ClusterListen,
		Brokers: []string{o.Listen}, CAHolder: o.Node})
	orphan := []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
	if err := os.WriteFile(d.Path(datadir.CAKeyFile), orphan, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Run(o); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(d.Path(datadir.CAKeyFile))
	if bytes.Equal(key, orphan) {
		t.Fatal("the orphan key was kept")
	}
	if _, err := d.LoadCA(); err != nil {
		t.Fatalf("the CA made in its place: %v", err)
	}
}
