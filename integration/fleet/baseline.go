package fleet

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"mesh/host/link"
)

// BaselineResult is raw NATS on the same machine in the same run: a nats-server in
// a process of its own, N mutual-TLS connections from this process, each
// subscribed to its own subject, and one message per host published per round.
type BaselineResult struct {
	Connect BaselineConnect `json:"connect"`
	Rounds  []FanoutRound   `json:"rounds"`
	Fanout  Latency         `json:"fanout"` // delivery latency over every host of every round
	Memory  BaselineMemory  `json:"memory"`
	Idle    IdleResult      `json:"idle"`
	// Disconnects counts connections the server dropped during the run.
	Disconnects int64   `json:"disconnects"`
	Phases      []Phase `json:"phases"`
}

// BaselineConnect is connecting and subscribing all N, Inflight at a time.
type BaselineConnect struct {
	Connected      int     `json:"connected"`
	Failed         int     `json:"failed"`
	FailedAttempts int     `json:"failed_attempts"`
	Latency        Latency `json:"latency"` // one connect + subscribe + flush
	ServerCPUPerUs float64 `json:"server_cpu_per_conn_us"`
	BenchCPUPerUs  float64 `json:"bench_cpu_per_conn_us"`
	Phase          Phase   `json:"phase"`
}

// FanoutRound is one message to each of the N subscribers.
type FanoutRound struct {
	Delivered int `json:"delivered"`
	Missing   int `json:"missing"`
	// Latency is each host's delivery, from just before the first publish.
	Latency                 Latency `json:"latency"`
	ServerCPUPerHostUs      float64 `json:"server_cpu_per_host_us"`
	ReceiverCPUPerMessageUs float64 `json:"receiver_cpu_per_message_us"` // this process: N receivers and the publisher
	Phase                   Phase   `json:"phase"`

	lat []time.Duration
}

// BaselineMemory is the server process's resident set.
type BaselineMemory struct {
	IdleBytes      int64 `json:"idle_bytes"`
	ConnectedBytes int64 `json:"connected_bytes"`
	PerConnBytes   int64 `json:"per_conn_bytes"`
	// AfterRoundBytes is the resident set once every connection carried a message
	// (after the first fan-out round), as the product's is read once every host
	// received its first declaration; PerConnAfterRoundBytes is per connection.
	AfterRoundBytes        int64 `json:"after_round_bytes"`
	PerConnAfterRoundBytes int64 `json:"per_conn_after_round_bytes"`
}

// natsProc is the baseline server process.
type natsProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

// startNATS re-runs the benchmark binary as the baseline's server.
func startNATS(self, certDir string) (*natsProc, error) {
	cmd := exec.Command(self, "nats-server", "-certs", certDir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the baseline nats-server: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the baseline nats-server did not start (%q, %v)", line, err)
	}
	return &natsProc{cmd: cmd, stdin: stdin, addr: addr}, nil
}

func (p *natsProc) cpu() (time.Duration, error) { return ProcCPU(p.cmd.Process.Pid) }
func (p *natsProc) rss() (int64, error)         { return ProcRSS(p.cmd.Process.Pid) }

// stop closes the server's stdin, which ends it, and waits.
func (p *natsProc) stop() {
	p.stdin.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// fanout is one round in flight: when each subscriber got its message.
type fanout struct {
	t0        time.Time
	at        []atomic.Int64 // nanoseconds since t0, plus one; 0: not yet
	remaining atomic.Int64
	done      chan struct{}
}

// receive records subscriber i's message, once.
func (f *fanout) receive(i int) {
	d := int64(time.Since(f.t0)) + 1
	if f.at[i].CompareAndSwap(0, d) && f.remaining.Add(-1) == 0 {
		close(f.done)
	}
}

// runBaseline measures raw NATS with cfg.Hosts connections.
func runBaseline(ctx context.Context, cfg Config, certDir string) (*BaselineResult, error) {
	if err := MakeCerts(certDir); err != nil {
		return nil, err
	}
	clientTLS, err := mutualTLS(certDir, false)
	if err != nil {
		return nil, err
	}
	srv, err := startNATS(cfg.Self, certDir)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	m := &meter{out: cfg.Out, self: "bench", sources: []cpuSource{{"nats-server", srv.cpu}, {"bench", SelfCPU}}}
	res := &BaselineResult{}
	fmt.Fprintf(cfg.Out, "== baseline: nats-server (own process, pid %d) on %s, mutual TLS\n", srv.cmd.Process.Pid, srv.addr)
	time.Sleep(time.Second) // let the new process settle before its idle RSS is read
	if res.Memory.IdleBytes, err = srv.rss(); err != nil {
		return res, err
	}

	var cur atomic.Pointer[fanout]
	var disconnects atomic.Int64
	opts := []nats.Option{
		nats.Secure(clientTLS), nats.TLSHandshakeFirst(), nats.Timeout(10 * time.Second),
		// The agents' liveness settings (pings, the kernel's keepalive), so that the
		// idle phase compares what the product adds to the same connections.
		nats.PingInterval(link.PingInterval), nats.MaxPingsOutstanding(link.MaxPingsOutstanding),
		nats.SetCustomDialer(link.Dialer()), nats.NoReconnect(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				disconnects.Add(1)
			}
		}),
	}
	url := "tls://" + srv.addr
	conns := make([]*nats.Conn, cfg.Hosts)
	defer func() { forEach(conns, 256, func(nc *nats.Conn) { closeConn(nc) }) }()

	// Connect all.
	idx := make([]int, cfg.Hosts)
	for i := range idx {
		idx[i] = i
	}
	var mu sync.Mutex
	var lat []time.Duration
	sp := m.begin(fmt.Sprintf("baseline: connect and subscribe %d (%d in flight)", cfg.Hosts, cfg.Inflight))
	forEach(idx, cfg.Inflight, func(i int) {
		var nc *nats.Conn
		var err error
		var took time.Duration
		failed := 0
		for attempt := 0; attempt < enrolAttempts; attempt++ {
			start := time.Now()
			nc, err = connectSubscriber(url, opts, i, &cur)
			took = time.Since(start)
			if err == nil {
				break
			}
			failed++
			time.Sleep(time.Second)
		}
		mu.Lock()
		defer mu.Unlock()
		res.Connect.FailedAttempts += failed
		if err != nil {
			res.Connect.Failed++
			return
		}
		conns[i] = nc
		res.Connect.Connected++
		lat = append(lat, took)
	})
	res.Connect.Phase = sp.end()
	res.Connect.Latency = Summarise(lat)
	res.Connect.ServerCPUPerUs = us(perUnit(res.Connect.Phase.CPU("nats-server"), res.Connect.Connected))
	res.Connect.BenchCPUPerUs = us(perUnit(res.Connect.Phase.CPU("bench"), res.Connect.Connected))
	fmt.Fprintf(cfg.Out, "   %d connected (%d failed, %d failed attempts); server %.0f µs CPU per connection\n",
		res.Connect.Connected, res.Connect.Failed, res.Connect.FailedAttempts, res.Connect.ServerCPUPerUs)
	time.Sleep(time.Second)
	if res.Memory.ConnectedBytes, err = srv.rss(); err != nil {
		return res, err
	}
	if res.Connect.Connected > 0 {
		res.Memory.PerConnBytes = (res.Memory.ConnectedBytes - res.Memory.IdleBytes) / int64(res.Connect.Connected)
	}
	fmt.Fprintf(cfg.Out, "   server RSS %s idle, %s connected: %s per connection\n",
		mib(res.Memory.IdleBytes), mib(res.Memory.ConnectedBytes), kib(res.Memory.PerConnBytes))

	if cfg.Idle > 0 {
		name := fmt.Sprintf("baseline: idle %s with every connection open", cfg.Idle)
		if res.Idle, err = m.idle(ctx, name, cfg.Idle, res.Connect.Connected, "nats-server"); err != nil {
			return res, err
		}
	}

	// The publisher.
	pub, err := nats.Connect(url, opts...)
	if err != nil {
		return res, fmt.Errorf("baseline publisher: %w", err)
	}
	defer pub.Close()
	payload := make([]byte, cfg.MessageSize)
	_, _ = rand.Read(payload)
	for r := range cfg.Rounds {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		round, err := fanoutRound(m, fmt.Sprintf("baseline: fan-out round %d", r+1), pub, conns, payload, &cur)
		if err != nil {
			return res, err
		}
		res.Rounds = append(res.Rounds, round)
		if r == 0 {
			time.Sleep(time.Second) // as after connecting, before reading the RSS
			if res.Memory.AfterRoundBytes, err = srv.rss(); err != nil {
				return res, err
			}
			if res.Connect.Connected > 0 {
				res.Memory.PerConnAfterRoundBytes = (res.Memory.AfterRoundBytes - res.Memory.IdleBytes) / int64(res.Connect.Connected)
			}
			fmt.Fprintf(cfg.Out, "   server RSS %s once every connection carried a message: %s per connection\n",
				mib(res.Memory.AfterRoundBytes), kib(res.Memory.PerConnAfterRoundBytes))
		}
	}
	var all []time.Duration
	for _, r := range res.Rounds {
		all = append(all, r.lat...)
	}
	res.Fanout = Summarise(all)
	res.Disconnects = disconnects.Load()
	res.Phases = m.phases
	return res, nil
}

// connectSubscriber connects subscriber i and subscribes it to its own subject.
func connectSubscriber(url string, opts []nats.Option, i int, cur *atomic.Pointer[fanout]) (*nats.Conn, error) {
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, err
	}
	_, err = nc.Subscribe(baselineSubject(i), func(*nats.Msg) {
		if f := cur.Load(); f != nil {
			f.receive(i)
		}
	})
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

func baselineSubject(i int) string { return fmt.Sprintf("fleet.host.%d", i) }

// fanoutDeadline is how long a round waits for every message.
const fanoutDeadline = time.Minute

// fanoutRound publishes one message to every connected subscriber and waits for all.
func fanoutRound(m *meter, name string, pub *nats.Conn, conns []*nats.Conn, payload []byte, cur *atomic.Pointer[fanout]) (FanoutRound, error) {
	var round FanoutRound
	want := 0
	for _, nc := range conns {
		if nc != nil {
			want++
		}
	}
	f := &fanout{at: make([]atomic.Int64, len(conns)), done: make(chan struct{})}
	f.remaining.Store(int64(want))
	if want == 0 {
		close(f.done)
	}
	sp := m.begin(name)
	f.t0 = time.Now()
	cur.Store(f)
	for i, nc := range conns {
		if nc == nil {
			continue
		}
		if err := pub.Publish(baselineSubject(i), payload); err != nil {
			return round, fmt.Errorf("publish: %w", err)
		}
	}
	if err := pub.Flush(); err != nil {
		return round, fmt.Errorf("flush: %w", err)
	}
	select {
	case <-f.done:
	case <-time.After(fanoutDeadline):
	}
	round.Phase = sp.end()
	cur.Store(nil)
	for i := range f.at {
		if conns[i] == nil {
			continue
		}
		if d := f.at[i].Load(); d > 0 {
			round.lat = append(round.lat, time.Duration(d-1))
		} else {
			round.Missing++
		}
	}
	round.Delivered = len(round.lat)
	round.Latency = Summarise(round.lat)
	round.ServerCPUPerHostUs = us(perUnit(round.Phase.CPU("nats-server"), want))
	round.ReceiverCPUPerMessageUs = us(perUnit(round.Phase.CPU("bench"), want))
	fmt.Fprintf(m.out, "   delivered %d (%d missing): min %.1f ms p50 %.1f ms p99 %.1f ms max %.1f ms; server %.1f µs CPU per host\n",
		round.Delivered, round.Missing, round.Latency.MinMs, round.Latency.P50Ms, round.Latency.P99Ms, round.Latency.MaxMs, round.ServerCPUPerHostUs)
	if round.Missing > 0 && errors.Is(pub.LastError(), nats.ErrConnectionClosed) {
		return round, errors.New("the baseline publisher lost its connection")
	}
	return round, nil
}

func closeConn(nc *nats.Conn) {
	if nc != nil {
		nc.Close()
	}
}
