package main

import (
	"runtime/debug"
	"strings"

	"mesh/host/buildinfo"
	"mesh/host/enrol"
)

// agentVersion is the agent's version, the one it announces to the mesh.
func agentVersion() string { return strings.TrimPrefix(enrol.Agent, "meshhost/") }

// buildVersion is what `meshhost version` reports (buildinfo: the same as meshctl's).
type buildVersion = buildinfo.Version

// readVersion reads this binary's build information.
func readVersion() buildVersion { return buildinfo.Read("meshhost", agentVersion()) }

// versionFrom is the version of this agent, of release v, built as info says (ok
// false: no build information).
func versionFrom(v string, info *debug.BuildInfo, ok bool) buildVersion {
	return buildinfo.From("meshhost", v, info, ok)
}
