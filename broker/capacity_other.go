//go:build !unix

package broker

// openFileLimit is unknown here: the broker keeps nats-server's default.
func openFileLimit() uint64 { return 0 }
