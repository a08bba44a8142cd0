package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"mesh/host/enrol"
)

// agentVersion is the agent's version, the one it announces to the mesh.
func agentVersion() string { return strings.TrimPrefix(enrol.Agent, "meshhost/") }

// buildVersion is what `meshhost version` reports: the agent's version and what Go
// recorded in the binary about its build (runtime/debug.BuildInfo). The host
// imports nothing of the control plane, so this mirrors meshctl's on purpose.
type buildVersion struct {
	Program string `json:"program"`
	Version string `json:"version"`
	// Revision is the VCS commit the binary was built from (vcs.revision); empty
	// when it was built without VCS information.
	Revision string `json:"revision,omitempty"`
	// CommitTime is that commit's time (vcs.time): Go records it rather than the
	// wall clock of the build, so that a build is reproducible.
	CommitTime string `json:"commit_time,omitempty"`
	// Modified says the work tree had uncommitted changes (vcs.modified).
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readVersion() buildVersion {
	info, ok := debug.ReadBuildInfo()
	return versionFrom(agentVersion(), info, ok)
}

func versionFrom(v string, info *debug.BuildInfo, ok bool) buildVersion {
	bv := buildVersion{Program: "meshhost", Version: v, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
