package main

import (
	"runtime/debug"

	"mesh/host/buildinfo"
	"mesh/host/enrol"
)

// release is the last release's version: a build of another commit adds which one
// (buildinfo.Stamped), as meshctl's does.
const release = "0.1.0"

// agentName is what this agent names itself to the mesh, in its enrolment and its
// status reports: its build's version (`meshhost version`), so that operators see
// which hosts run which build.
func agentName() string { return enrol.Agent(readVersion().Version) }

// buildVersion is what `meshhost version` reports (buildinfo: the same as meshctl's).
type buildVersion = buildinfo.Version

// readVersion reads this binary's build information.
func readVersion() buildVersion { return buildinfo.Read("meshhost", release) }

// versionFrom is the version of this agent, of release v, built as info says (ok
// false: no build information).
func versionFrom(v string, info *debug.BuildInfo, ok bool) buildVersion {
	return buildinfo.From("meshhost", v, info, ok)
}
