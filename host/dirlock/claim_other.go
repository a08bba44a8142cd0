//go:build !linux

package dirlock

import "io/fs"

// claimRoot claims nothing here: there are no abstract socket names to hold, and a
// second agent on a root is not found (docs/operations.md says so).
func claimRoot(string, fs.FileInfo) (release func(), holder *claimant, err error) {
	return func() {}, nil, nil
}

// rootClaimant finds no claim here (see claimRoot).
func rootClaimant(fs.FileInfo) *claimant { return nil }

// claimInside finds no claim here (see claimRoot).
func claimInside(string) (string, *claimant, string) { return "", nil, "" }
