// Package buildinfo is what meshctl and meshhost say of their own build: the release
// they come from, the commit Go recorded in the binary (runtime/debug.BuildInfo), the
// toolchain and the platform. Both programs must give the same answer (packaging
// refuses two binaries that disagree), and the host imports nothing of the control
// plane, hence one package here, on the host's side, that both use.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Version is what `version` prints, and its JSON with --json.
type Version struct {
	Program string `json:"program"`
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from (vcs.revision); empty
	// when it was built without VCS information (outside a checkout, or with
	// -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	// CommitTime is that commit's time (vcs.time). Go records the commit's time
	// rather than the wall clock of the build, so that a build is reproducible.
	CommitTime string `json:"commit_time,omitempty"`
	// Modified says the work tree had uncommitted changes (vcs.modified).
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// Read is the version of this binary, program built from the sources of release
// base.
func Read(program, base string) Version {
	info, ok := debug.ReadBuildInfo()
	return From(program, base, info, ok)
}

// From is the version of program, built from the sources of release base as info
// says (ok false: no build information).
func From(program, base string, info *debug.BuildInfo, ok bool) Version {
	bv := Version{Program: program, Version: base, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok || info == nil {
		return bv
	}
	if info.GoVersion != "" {
		bv.Go = info.GoVersion
	}
	var goos, goarch string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			bv.Revision = s.Value
		case "vcs.time":
			bv.CommitTime = s.Value
		case "vcs.modified":
			bv.Modified = s.Value == "true"
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos != "" && goarch != "" {
		bv.Platform = goos + "/" + goarch
	}
	bv.Version = Stamped(base, info.Main.Version, bv.Revision, bv.CommitTime, bv.Modified)
	return bv
}

// Stamped is the version of a binary built from the sources of release base, as
// Go recorded the build (it stamps the main module's version from the VCS tags, as
// git describe finds them, and the commit):
//   - from a commit tagged vX.Y.Z, unmodified: X.Y.Z;
//   - from any other commit: base+gitYYYYMMDDhhmmss.REV (REV the commit's first 12
//     hex digits; .dirty after it when the tree had uncommitted changes). Debian
//     orders it after base and before the next release, and builds of later
//     commits after earlier ones; nfpm's semver schema keeps what follows "+" as
//     the version's metadata, so the packages carry it whole;
//   - without VCS information (-buildvcs=false, or outside a checkout): base.
//
// base is the last release: the constant is set to X.Y.Z in the commit tagged
// vX.Y.Z.
func Stamped(base, mainVersion, revision, commitTime string, modified bool) string {
	if tag, ok := releaseTag(mainVersion); ok && !modified {
		return tag
	}
	if revision == "" {
		return base
	}
	v := base + "+git"
	if t, err := time.Parse(time.RFC3339, commitTime); err == nil {
		v += t.UTC().Format("20060102150405") + "."
	}
	v += revision[:min(12, len(revision))]
	if modified {
		v += ".dirty"
	}
	return v
}

// releaseTag is X.Y.Z of a main module version vX.Y.Z; a pseudo-version, a
// pre-release, "(devel)" or a version with metadata (+dirty) is none.
func releaseTag(v string) (string, bool) {
	s, ok := strings.CutPrefix(v, "v")
	parts := strings.Split(s, ".")
	if !ok || len(parts) != 3 {
		return "", false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return "", false
		}
	}
	return s, true
}

// String is the one-line form: `meshctl 0.1.0 (revision 0123456789ab of
// 2026-12-01T10:00:00Z, go1.26.8 linux/amd64)`.
func (v Version) String() string {
	rev := "revision unknown: built without VCS information"
	if v.Revision != "" {
		r := v.Revision
		if len(r) > 12 {
			r = r[:12]
		}
		if v.Modified {
			r += "+modified"
		}
		rev = "revision " + r
		if v.CommitTime != "" {
			rev += " of " + v.CommitTime
		}
	}
	return fmt.Sprintf("%s %s (%s, %s %s)", v.Program, v.Version, rev, v.Go, v.Platform)
}
