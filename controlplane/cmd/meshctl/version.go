package main

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"

	"mesh/host/buildinfo"
)

// version is the last release's version: a build of another commit adds which one
// (buildinfo.Stamped).
const version = "0.1.0"

// buildVersion is what `meshctl version` reports (buildinfo: the same as meshhost's).
type buildVersion = buildinfo.Version

// readVersion reads this binary's build information.
func readVersion(program string) buildVersion { return buildinfo.Read(program, version) }

// versionFrom is the version of program v built as info says (ok false: no
// build information).
func versionFrom(program, v string, info *debug.BuildInfo, ok bool) buildVersion {
	return buildinfo.From(program, v, info, ok)
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
