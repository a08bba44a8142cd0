//go:build !unix

package readfile

const openFlags = 0
