package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the product's version; the build adds which commit it was made from.
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
	return bv
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
