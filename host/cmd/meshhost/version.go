package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

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
	return bv
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
