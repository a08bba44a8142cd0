package identity

import (
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkLoad measures what an agent pays for its identity when it starts:
// LoadKeyPair (read, decode strictly, validate: the seed against the public key, the
// CA certificate against its pin; and the key pair derived for that), beside Load
// followed by KeyPair, which derives the key a second time, and reading the file
// alone. On tmpfs when there is one, as the fleet benchmark's hosts use:
//
//	go test -run='^$' -bench=Load -benchmem ./host/identity/
func BenchmarkLoad(b *testing.B) {
	dir := benchDir(b)
	if err := Save(dir, validIdentity(b)); err != nil {
		b.Fatal(err)
	}
	b.Run("os.ReadFile", func(b *testing.B) {
		for b.Loop() {
			if _, err := os.ReadFile(Path(dir)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Load", func(b *testing.B) {
		for b.Loop() {
			if _, err := Load(dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Load+KeyPair", func(b *testing.B) {
		for b.Loop() {
			id, err := Load(dir)
			if err != nil {
				b.Fatal(err)
			}
			kp, err := id.KeyPair()
			if err != nil {
				b.Fatal(err)
			}
			kp.Wipe()
		}
	})
	b.Run("LoadKeyPair", func(b *testing.B) {
		for b.Loop() {
			_, kp, err := LoadKeyPair(dir)
			if err != nil {
				b.Fatal(err)
			}
			kp.Wipe()
		}
	})
}

// BenchmarkEnrolmentKey measures what an enrolment pays for its node key on the
// host, on tmpfs when there is one: a new key pair, saved as the pending enrolment,
// and the identity assembled from the mesh's answer checked against that key.
//
//	go test -run='^$' -bench=EnrolmentKey -benchmem ./host/identity/
func BenchmarkEnrolmentKey(b *testing.B) {
	dir := benchDir(b)
	id := validIdentity(b)
	for b.Loop() {
		kp, err := NewKeyPair()
		if err != nil {
			b.Fatal(err)
		}
		seed, _ := kp.Seed()
		if err := SavePending(dir, Pending{Mesh: id.Mesh, Node: id.Node, TokenHash: strings.Repeat("ab", 32), Seed: Secret(seed), CreatedAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
		id.Seed, id.PublicKey = Secret(seed), kp.pub
		if err := id.ValidateWith(kp); err != nil {
			b.Fatal(err)
		}
		kp.Wipe()
	}
}

// benchDir is a state directory for a benchmark, on tmpfs when there is one (as the
// fleet benchmark's hosts use), removed when it ends.
func benchDir(b *testing.B) string {
	parent := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "meshhost-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
