//go:build unix

package main

import "syscall"

// privateUmask makes every file serve (or bootstrap, join) creates from here on
// private to its user,
// whatever umask it was started with: hashicorp/raft's snapshot store creates its
// files with os.Create (0666 less the umask), and a snapshot holds every
// declaration body, secrets declared to hosts among them. Files meant to be read
// by others (mesh.json, ca.pem) are written with their mode set explicitly.
// meshctl.service sets UMask=0077 already; a serve started by hand under umask 000
// wrote them 0666.
func privateUmask() { syscall.Umask(0o077) }
