//go:build !linux

package agent

// markRoot keeps no mark where the agent is not built for Linux: the file check
// goes by the state directory alone there.
func markRoot(string, int, rootMarkValue) error { return nil }

// rootMark finds no mark where markRoot keeps none.
func rootMark(string, int) (rootMarkValue, bool) { return rootMarkValue{}, false }
