package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// version is the last release's version: a build of another commit adds which one
// (stamped).
const version = "0.1.0"

// buildVersion is what `meshctl version` reports: the product version and what Go
// recorded in the binary about its build (runtime/debug.BuildInfo).
type buildVersion struct {
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

// readVersion reads this binary's build information.
func readVersion(program string) buildVersion {
	info, ok := debug.ReadBuildInfo()
	return versionFrom(program, version, info, ok)
}

// versionFrom is the version of program v built as info says (ok false: no
// build information).
func versionFrom(program, v string, info *debug.BuildInfo, ok bool) buildVersion {
	bv := buildVersion{Program: program, Version: v, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
	bv.Version = stamped(bv.Version, info.Main.Version, bv.Revision, bv.CommitTime, bv.Modified)
	return bv
}

// stamped is the version of a binary built from the sources of release base, as
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
func stamped(base, mainVersion, revision, commitTime string, modified bool) string {
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
func (v buildVersion) String() string {
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

func versionCommand() command {
	return command{
		name:  "version",
		usage: "[--json]",
		summary: `Print the version and the commit this binary was built from (also: meshctl --version).
The revision and its time come from the build information Go records in the binary.`,
		setup: func(c *cobra.Command, cio *cliIO) func([]string) error {
			var asJSON bool
			c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
			return func(args []string) error {
				if err := noPositional(args); err != nil {
					return err
				}
				v := readVersion("meshctl")
				if asJSON {
					return writeJSON(cio.stdout, v)
				}
				fmt.Fprintln(cio.stdout, v)
				return nil
			}
		},
	}
}
