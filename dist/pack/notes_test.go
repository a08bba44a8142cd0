package pack

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// installed is what a package's nfpm configuration installs: every dst.
func installed(t *testing.T, pkg string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "nfpm", pkg+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if dst, ok := strings.CutPrefix(strings.TrimSpace(line), "dst: "); ok {
			out[dst] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s.yaml installs nothing", pkg)
	}
	return out
}

// TestNotesPointAtInstalledFiles: what a package tells the person who installed it
// (its NEXT-STEPS note, its post-install messages, its units' Documentation=)
// points only at documents the package installs. Before, the note named
// docs/getting-started.md and docs/operations.md, which no installed machine has.
func TestNotesPointAtInstalledFiles(t *testing.T) {
	docRef := regexp.MustCompile(`/usr/share/doc/[A-Za-z0-9._/-]*[A-Za-z0-9]`)
	relative := regexp.MustCompile(`(^|[\s(])docs/[A-Za-z0-9._/-]+`)
	units := map[string][]string{
		"meshctl":  {"meshctl.service"},
		"meshhost": {"meshhost.service", "meshhost-enrol.service"},
	}
	for pkg, unitFiles := range units {
		files := installed(t, pkg)
		sources := []string{
			filepath.Join("..", "deb", pkg, "NEXT-STEPS"),
			filepath.Join("..", "deb", pkg, "postinst"),
		}
		for _, u := range unitFiles {
			sources = append(sources, filepath.Join("..", "systemd", u))
		}
		for _, src := range sources {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if m := relative.FindString(string(data)); m != "" {
				t.Errorf("%s names %q, a path of the source tree, not of the installed machine", src, strings.TrimSpace(m))
			}
			for _, ref := range docRef.FindAllString(string(data), -1) {
				if !files[ref] && !holdsAny(files, ref) {
					t.Errorf("%s points at %s, which the %s package does not install", src, ref, pkg)
				}
			}
		}
		for _, doc := range []string{"getting-started.md", "operations.md"} {
			if !files["/usr/share/doc/"+pkg+"/"+doc] {
				t.Errorf("the %s package does not install %s, which its note names", pkg, doc)
			}
		}
	}
}

// holdsAny reports whether dir is a directory some installed file is in.
func holdsAny(files map[string]bool, dir string) bool {
	for f := range files {
		if strings.HasPrefix(f, dir+"/") {
			return true
		}
	}
	return false
}
