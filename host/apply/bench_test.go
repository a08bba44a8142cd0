package apply

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkApply measures one Apply of a one-file declaration that replaces the
// file of the previous one (what each round of `declare --all` asks of a host),
// and one that finds it unchanged, beside the bare durable replacement of a file
// with os calls (temp file, write, fsync, chmod, rename, fsync of the directory)
// as the baseline, on tmpfs when there is one (as the fleet's hosts use) and on
// the disk of the temporary directory:
//
//	go test -run='^$' -bench=Apply ./host/apply/
func BenchmarkApply(b *testing.B) {
	for _, fsys := range benchFilesystems(b) {
		b.Run(fsys.name+"/replace", func(b *testing.B) {
			root := filepath.Join(fsys.dir(b), "managed")
			a := FileApplier{Root: root}
			var managed []string
			for i := 0; b.Loop() || i == 0; i++ {
				files := []File{{Path: "etc/fleet.conf", Data: fmt.Appendf(nil, "# round %d\n", i), Mode: 0o644}}
				res, err := a.Apply(context.Background(), files, managed)
				if err != nil || len(res.Written) != 1 {
					b.Fatalf("%+v, %v", res, err)
				}
				managed = res.Managed
			}
			reportUs(b)
		})
		b.Run(fsys.name+"/unchanged", func(b *testing.B) {
			root := filepath.Join(fsys.dir(b), "managed")
			a := FileApplier{Root: root}
			files := []File{{Path: "etc/fleet.conf", Data: []byte("# the same\n"), Mode: 0o644}}
			res, err := a.Apply(context.Background(), files, nil)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if res, err = a.Apply(context.Background(), files, res.Managed); err != nil || len(res.Unchanged) != 1 {
					b.Fatalf("%+v, %v", res, err)
				}
			}
			reportUs(b)
		})
		// An agent's first Apply (the fleet's first round), on a new goroutine.
		// The runtime starts new goroutines at the stack size they use on
		// average, so a growth a long-lived agent's goroutine pays at its first
		// declaration hardly shows here; the fleet's profile shows it.
		b.Run(fsys.name+"/first", func(b *testing.B) {
			parent := fsys.dir(b)
			files := []File{{Path: "etc/fleet.conf", Data: []byte("# first\n"), Mode: 0o644}}
			for i := 0; b.Loop(); i++ {
				a := FileApplier{Root: filepath.Join(parent, fmt.Sprint(i)), Guard: new(RootGuard)}
				done := make(chan error)
				go func() {
					_, err := a.Apply(context.Background(), files, nil)
					done <- err
				}()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			reportUs(b)
		})
		b.Run(fsys.name+"/bare-durable-write", func(b *testing.B) {
			dir := filepath.Join(fsys.dir(b), "etc")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				if err := bareDurableWrite(dir, "fleet.conf", fmt.Appendf(nil, "# round %d\n", i)); err != nil {
					b.Fatal(err)
				}
			}
			reportUs(b)
		})
	}
}

// bareDurableWrite is the least a durable replacement of a file does.
func bareDurableWrite(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

type benchFS struct {
	name string
	dir  func(b *testing.B) string
}

func benchFilesystems(b *testing.B) []benchFS {
	out := []benchFS{{"disk", func(b *testing.B) string { return b.TempDir() }}}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		out = append([]benchFS{{"tmpfs", func(b *testing.B) string {
			dir, err := os.MkdirTemp("/dev/shm", "meshhost-bench-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}}}, out...)
	}
	return out
}

func reportUs(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
}
