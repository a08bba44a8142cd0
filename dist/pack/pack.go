// Package pack builds the mesh's Debian packages (meshctl and meshhost) with nfpm,
// from binaries already built, the systemd units of dist/systemd and the nfpm
// configurations of dist/nfpm. `task package` runs it through dist/cmd/package; the
// integration test of the packages calls it directly.
//
// nfpm runs as a Go tool of its own module file, dist/tools.mod, so that its
// dependencies stay out of the product's go.mod: `go tool -modfile=dist/tools.mod
// nfpm` needs nothing but the Go module proxy, and is built once into Go's cache.
package pack

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// Options say what to package and where.
type Options struct {
	// Root is the module root: dist/ and go.mod are there.
	Root string
	// Out is the directory the .deb files are written to.
	Out string
	// Meshctl and Meshhost are the built binaries.
	Meshctl, Meshhost string
	// Version is the packages' version; empty means the one `meshctl version`
	// reports.
	Version string
	// Arch is the Go architecture the binaries were built for; empty means this
	// machine's.
	Arch string
	// Log receives nfpm's output; nil discards it.
	Log io.Writer
}

// ErrTool means nfpm could not be run or refused the configuration.
var ErrTool = errors.New("nfpm failed")

// Build writes one .deb per package into o.Out and returns their paths.
func Build(ctx context.Context, o Options) ([]string, error) {
	if o.Root == "" || o.Out == "" || o.Meshctl == "" || o.Meshhost == "" {
		return nil, errors.New("pack: Root, Out, Meshctl and Meshhost are required")
	}
	if o.Arch == "" {
		o.Arch = runtime.GOARCH
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	meshctl, err := filepath.Abs(o.Meshctl)
	if err != nil {
		return nil, err
	}
	meshhost, err := filepath.Abs(o.Meshhost)
	if err != nil {
		return nil, err
	}
	if o.Version == "" {
		if o.Version, err = PackageVersion(ctx, meshctl, meshhost, o.Log); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp("", "mesh-pack-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	if err := completions(ctx, meshctl, stage); err != nil {
		return nil, err
	}
	var debs []string
	for _, name := range []string{"meshctl", "meshhost"} {
		binary := map[string]string{"meshctl": meshctl, "meshhost": meshhost}[name]
		libc, err := LibcDepends(binary)
		if err != nil {
			return debs, err
		}
		target, err := filepath.Abs(filepath.Join(o.Out, fmt.Sprintf("%s_%s_%s.deb", name, o.Version, o.Arch)))
		if err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, "go", "tool", "-modfile=dist/tools.mod", "nfpm", "package",
			"--config", filepath.Join("dist", "nfpm", name+".yaml"), "--packager", "deb", "--target", target)
		cmd.Dir = o.Root
		cmd.Env = append(os.Environ(),
			"VERSION="+o.Version, "ARCH="+o.Arch,
			"MESHCTL_BIN="+meshctl, "MESHHOST_BIN="+meshhost, "STAGE="+stage,
			"LIBC_DEPENDS="+libc)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, o.Log), io.MultiWriter(&out, o.Log)
		if err := cmd.Run(); err != nil {
			return debs, fmt.Errorf("%w for %s: %v\n%s", ErrTool, name, err, out.Bytes())
		}
		debs = append(debs, target)
	}
	return debs, nil
}

// glibcLibraries are the shared libraries of Debian's libc6 a Go binary built with
// cgo may need (libpthread, libdl and libresolv are separate before glibc 2.34).
var glibcLibraries = map[string]bool{
	"libc.so.6": true, "libpthread.so.0": true, "libdl.so.2": true,
	"libresolv.so.2": true, "libm.so.6": true,
}

// LibcDepends is the Depends entry a package of the binary at path needs: "libc6
// (>= 2.N)", N the newest GLIBC_2.N symbol version the binary requires, when it is
// dynamically linked (the default with cgo: os/user and the resolver call glibc);
// "" when it is static. A binary built against a newer glibc than the target
// machine's does not start there ("GLIBC_2.34 not found"): the Depends makes dpkg
// refuse the package instead. A binary that needs any other shared library is an
// error: the packages declare no other dependency.
func LibcDepends(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("pack: %s: %w", path, err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		return "", fmt.Errorf("pack: %s: %w", path, err)
	}
	if len(libs) == 0 {
		return "", nil
	}
	for _, l := range libs {
		if !glibcLibraries[l] {
			return "", fmt.Errorf("pack: %s needs the shared library %s, which the packages do not depend on (build it with CGO_ENABLED=0, or add its package to dist/nfpm)", path, l)
		}
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return "", fmt.Errorf("pack: %s: symbol versions: %w", path, err)
	}
	major, minor := 0, 0
	for _, n := range needs {
		for _, d := range n.Needs {
			v, ok := strings.CutPrefix(d.Dep, "GLIBC_")
			if !ok {
				continue
			}
			a, b, _ := strings.Cut(v, ".")
			b, _, _ = strings.Cut(b, ".")
			ma, err1 := strconv.Atoi(a)
			mi, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil {
				continue // GLIBC_PRIVATE
			}
			if ma > major || ma == major && mi > minor {
				major, minor = ma, mi
			}
		}
	}
	if major == 0 {
		return "libc6", nil
	}
	return fmt.Sprintf("libc6 (>= %d.%d)", major, minor), nil
}

// ErrVersions means the two binaries were not built from the same sources: one
// version would name both packages.
var ErrVersions = errors.New("pack: meshctl and meshhost report different versions")

// PackageVersion is the version the packages take: the one the built binaries
// report, which names the commit they were built from (0.1.0+git20261203145709.
// 7132ef2931ef; see `meshctl version`), or the release a tagged commit is. nfpm
// reads it as semver, and the deb version keeps what follows "+". Both binaries
// must report the same. A binary built without VCS information reports only the
// release, as every such build does: that is said on log.
func PackageVersion(ctx context.Context, meshctl, meshhost string, log io.Writer) (string, error) {
	ctl, err := binaryVersion(ctx, meshctl)
	if err != nil {
		return "", err
	}
	host, err := binaryVersion(ctx, meshhost)
	if err != nil {
		return "", err
	}
	if ctl.Version != host.Version {
		return "", fmt.Errorf("%w: %s and %s: build both from one checkout (task build)", ErrVersions, ctl.Version, host.Version)
	}
	if ctl.Revision == "" && log != nil {
		fmt.Fprintf(log, "package: the binaries carry no VCS revision (built with -buildvcs=false or outside a git checkout): the packages are version %s, as every such build; `task build` stamps it\n", ctl.Version)
	}
	return ctl.Version, nil
}

// builtVersion is what `version --json` reports of a binary.
type builtVersion struct {
	Version  string `json:"version"`
	Revision string `json:"revision"`
}

// binaryVersion is the version a built binary reports.
func binaryVersion(ctx context.Context, binary string) (builtVersion, error) {
	out, err := exec.CommandContext(ctx, binary, "version", "--json").Output()
	if err != nil {
		return builtVersion{}, fmt.Errorf("%s version --json: %w", binary, err)
	}
	var v builtVersion
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" {
		return builtVersion{}, fmt.Errorf("%s version --json printed no version: %q", binary, out)
	}
	return v, nil
}

// completions writes meshctl's completion scripts, which the meshctl package
// installs, into dir.
func completions(ctx context.Context, meshctl, dir string) error {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, err := exec.CommandContext(ctx, meshctl, "completion", shell).Output()
		if err != nil {
			return fmt.Errorf("meshctl completion %s: %w", shell, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "meshctl."+shell), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}
