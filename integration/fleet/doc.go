// Package fleet is a fleet benchmark of the mesh: one `meshctl serve` process on
// real disk, N real host agents in the benchmark's own process (each with its own
// TLS connection, nkey, verifier, file applier and state on tmpfs), and, in the same
// run, a plain nats-server in a process of its own as the baseline: the cost of
// mutual-TLS connections and one message per host with nothing of the mesh on top.
//
// It is a library for cmd/fleetbench and is not run by `go test`: a run at 1,000
// hosts takes minutes. The unit tests here cover the helpers only.
//
// Each phase is timed and charged with the CPU time (user+system) each process
// spent in it: the serve process and the NATS server read from /proc/<pid>/stat (or
// from the rusage of a process that exited), the benchmark process from
// getrusage(RUSAGE_SELF), and the short-lived meshctl commands from their rusage.
package fleet
