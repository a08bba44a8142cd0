package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mesh/dist/pack"
)

// readmeBuildLine is the README's command that builds the two binaries.
func readmeBuildLine(t *testing.T, root string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "go build ") && strings.Contains(line, "./controlplane/cmd/meshctl") {
			cmd, _, _ := strings.Cut(line, "#")
			return strings.Fields(cmd)
		}
	}
	t.Fatal("README.md has no `go build ... ./controlplane/cmd/meshctl ...` line")
	return nil
}

// withoutBuildVCS is GOFLAGS less any -buildvcs setting: the README's line is run
// with Go's default, as on a machine whose configuration does not turn stamping off.
func withoutBuildVCS(goflags string) string {
	var keep []string
	for _, f := range strings.Fields(goflags) {
		if !strings.HasPrefix(strings.TrimLeft(f, "-"), "buildvcs") {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// TestReadmeBuildLine runs the README's build line as a person would (Go's default
// VCS stamping, whatever this machine's GOFLAGS or go env say), writing into a scratch
// directory instead of ./bin, and checks that it writes both binaries and that their
// versions name the commit they were built from.
func TestReadmeBuildLine(t *testing.T) {
	root := moduleDir(t)
	before, why := headRevision(root)
	out := readmeBuild(t, root)
	// Another commit made while the binaries were built moves HEAD on.
	after, _ := headRevision(root)
	heads := []string{before, after}
	versions := map[string]string{}
	for _, name := range []string{"meshctl", "meshhost"} {
		p := filepath.Join(out, name)
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("the README's build line did not write an executable %s: %v", name, err)
		}
		vout, err := exec.Command(p, "version", "--json").Output()
		if err != nil {
			t.Fatalf("%s version --json: %v", name, err)
		}
		var v struct{ Program, Version, Revision string }
		if err := json.Unmarshal(vout, &v); err != nil || v.Program != name || v.Version == "" {
			t.Fatalf("%s version --json: %v\n%s", name, err, vout)
		}
		versions[name] = v.Revision
	}

	t.Run("revision", func(t *testing.T) {
		if why != "" {
			t.Skip(why)
		}
		for name, rev := range versions {
			if !slices.Contains(heads, rev) {
				t.Errorf("%s reports revision %q, want HEAD %s", name, rev, heads[1])
			}
		}
	})

	// Packaged as `task package` does, the packages' version names the commit the
	// binaries were built from, the same version they report. Before, every
	// package was 0.1.0 whatever it was built from: dpkg took a newer build for a
	// reinstall of the same version, and nobody could tell two packages apart.
	t.Run("package version", func(t *testing.T) {
		if why != "" {
			t.Skip(why)
		}
		if _, err := exec.LookPath("dpkg-deb"); err != nil {
			t.Skip("dpkg-deb is not installed: the package's version is read with it")
		}
		meshctl, meshhost := filepath.Join(out, "meshctl"), filepath.Join(out, "meshhost")
		var v struct{ Version, Revision string }
		vout, err := exec.Command(meshctl, "version", "--json").Output()
		if err != nil || json.Unmarshal(vout, &v) != nil {
			t.Fatalf("meshctl version --json: %v\n%s", err, vout)
		}
		if v.Revision == "" || !strings.Contains(v.Version, v.Revision[:12]) {
			t.Fatalf("meshctl reports version %q (revision %q): want the commit in the version", v.Version, v.Revision)
		}
		line, err := exec.Command(meshctl, "--version").Output()
		if err != nil || !strings.HasPrefix(string(line), "meshctl "+v.Version+" (revision "+v.Revision[:12]) {
			t.Errorf("meshctl --version: %q (%v), want the version and the revision", line, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		debs, err := pack.Build(ctx, pack.Options{Root: root, Out: t.TempDir(), Meshctl: meshctl, Meshhost: meshhost})
		if err != nil {
			t.Fatal(err)
		}
		for _, deb := range debs {
			if got := strings.TrimSpace(mustRun(t, "dpkg-deb", "-f", deb, "Version")); got != v.Version {
				t.Errorf("%s: Version %q, want %q, the binaries' version", filepath.Base(deb), got, v.Version)
			}
			if !strings.Contains(filepath.Base(deb), "_"+v.Version+"_") {
				t.Errorf("%s: the file name does not carry the version %s", filepath.Base(deb), v.Version)
			}
		}
	})
}

// headRevision is the commit the module's checkout is at, and why it is not known
// where Go records no revision.
func headRevision(root string) (string, string) {
	// Go stamps the revision only in a checkout whose .git is a directory (not
	// a git worktree's .git file) with git on the PATH.
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		return "", "the module is not a plain git checkout here (no .git directory): Go records no revision"
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", "git rev-parse HEAD: " + err.Error()
	}
	return strings.TrimSpace(string(head)), ""
}

// readmeBuild runs the README's build line as a person would (Go's default VCS
// stamping, whatever this machine's GOFLAGS or go env say), writing into a scratch
// directory instead of ./bin, and returns that directory.
func readmeBuild(t *testing.T, root string) string {
	t.Helper()
	args := readmeBuildLine(t, root)
	out := t.TempDir()
	found := false
	for i, a := range args {
		if a == "-o" && i+1 < len(args) && strings.HasSuffix(args[i+1], "/") {
			args[i+1] = out + "/"
			found = true
		}
	}
	if !found {
		t.Fatalf("the README's build line %q names no output directory (-o DIR/): with two packages, go build writes nothing", strings.Join(args, " "))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = root
	// An empty GOFLAGS would fall back to `go env -w` settings (this machine's turn
	// stamping off there), so Go's default is spelt out.
	cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(withoutBuildVCS(os.Getenv("GOFLAGS"))+" -buildvcs=auto"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out
}
