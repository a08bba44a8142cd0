package fleet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ServeNATS runs the baseline's broker: a plain nats-server, embedded as the mesh
// embeds it (server.NewServer, TLS handshake first, the same TLS and ping timeouts)
// but with mutual TLS instead of the mesh's authentication hook and permissions. It
// prints "listening ADDR" on out once it accepts connections and runs until in
// reaches its end (the benchmark closes the pipe, or died).
func ServeNATS(certDir string, in io.Reader, out io.Writer) error {
	tlsCfg, err := mutualTLS(certDir, true)
	if err != nil {
		return err
	}
	opts := &server.Options{
		Host:              "127.0.0.1",
		Port:              server.RANDOM_PORT,
		NoSigs:            true,
		NoLog:             true,
		MaxPayload:        2 << 20,
		TLS:               true,
		TLSVerify:         true,
		TLSConfig:         tlsCfg,
		TLSTimeout:        5,
		TLSHandshakeFirst: true,
		AuthTimeout:       5,
		PingInterval:      20 * time.Second,
		MaxPingsOut:       3,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return errors.New("nats-server not ready after 10s")
	}
	fmt.Fprintf(out, "listening %s\n", ns.Addr())
	// Block until the parent closes stdin.
	_, _ = io.Copy(io.Discard, bufio.NewReader(in))
	ns.Shutdown()
	ns.WaitForShutdown()
	return nil
}
