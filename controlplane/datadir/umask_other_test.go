//go:build !unix

package datadir

func syscallUmask(int) int { return 0 }
