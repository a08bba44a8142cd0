package state

import (
	"os"
	"strings"
	"testing"

	"mesh/host/atomicfile"
)

// BenchmarkSave measures saving the applied state an agent of a running mesh
// holds (a keyring envelope, one managed file), as it does after every applied
// declaration: Store.Save, in place, as the agent does, and Save, a new file each
// time, as enrolment does; beside atomicfile.WriteFile of bytes of the same size
// alone, the baseline for the latter. On tmpfs when there is one (as the fleet's
// hosts use) and on the disk of the temporary directory:
//
//	go test -run='^$' -bench=Save ./host/state/
func BenchmarkSave(b *testing.B) {
	a := runningState()
	dirs := map[string]string{"disk": ""}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dirs["tmpfs"] = "/dev/shm"
	}
	for _, name := range []string{"tmpfs", "disk"} {
		parent, ok := dirs[name]
		if !ok {
			continue
		}
		dir := func(b *testing.B) string {
			if parent == "" {
				return b.TempDir()
			}
			d, err := os.MkdirTemp(parent, "meshhost-bench-")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
		b.Run(name+"/Store.Save", func(b *testing.B) {
			st := NewStore(dir(b))
			for i := 0; b.Loop(); i++ {
				a.Version = uint64(i)
				if err := st.Save(a); err != nil {
					b.Fatal(err)
				}
			}
			reportUs(b)
		})
		b.Run(name+"/Save", func(b *testing.B) {
			d := dir(b)
			for i := 0; b.Loop(); i++ {
				a.Version = uint64(i)
				if err := Save(d, a); err != nil {
					b.Fatal(err)
				}
			}
			reportUs(b)
		})
		b.Run(name+"/atomicfile.WriteFile", func(b *testing.B) {
			d := dir(b)
			data := fileOf(b, a)
			b.ReportMetric(float64(len(data)), "file-B")
			for b.Loop() {
				if err := atomicfile.WriteFile(Path(d), data, 0o600); err != nil {
					b.Fatal(err)
				}
			}
			reportUs(b)
		})
	}
}

func reportUs(b *testing.B) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/op")
}

// BenchmarkLoad measures reading the applied state an agent of a running mesh holds
// (as BenchmarkSave writes it), as the agent does when it starts, beside reading the
// file alone:
//
//	go test -run='^$' -bench=Load -benchmem ./host/state/
func BenchmarkLoad(b *testing.B) {
	a := runningState()
	parent := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		parent = "/dev/shm"
	}
	d, err := os.MkdirTemp(parent, "meshhost-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	if err := Save(d, a); err != nil {
		b.Fatal(err)
	}
	b.Run("os.ReadFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(Path(d)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Load", func(b *testing.B) {
		for b.Loop() {
			if _, err := Load(d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// runningState is the applied state an agent of a running mesh holds: a keyring
// envelope, one managed file, no error.
func runningState() Applied {
	a := sample()
	a.Keyring = []byte(`{"payloadType":"application/vnd.mesh.keyring.v1+json","payload":"` + strings.Repeat("eyJtZXNoIjoibSJ9", 16) +
		`","signatures":[{"keyid":"ed25519:0123456789abcdef","sig":"` + strings.Repeat("A", 86) + `=="}]}`)
	a.Managed = []string{"etc/fleet.conf"}
	a.LastError, a.LastErrorCode, a.LastErrorVersion = "", "", 0
	return a
}

// BenchmarkEncode measures Store.encode alone, the JSON of the applied state an
// agent of a running mesh holds, which every Save writes:
//
//	go test -run='^$' -bench=Encode -benchmem ./host/state/
func BenchmarkEncode(b *testing.B) {
	a := runningState()
	s := NewStore(b.TempDir())
	for i := 0; b.Loop(); i++ {
		a.Version = uint64(i)
		if _, err := s.encode(a); err != nil {
			b.Fatal(err)
		}
	}
}
