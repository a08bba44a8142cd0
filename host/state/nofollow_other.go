//go:build !unix

package state

// noFollow is 0 where open has no such flag.
const noFollow = 0
