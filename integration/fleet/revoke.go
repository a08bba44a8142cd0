package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"mesh/controlplane/api"
	"mesh/controlplane/operator"
	"mesh/host/agent"
)

// RevokeResult is the revocation of K nodes, in calls of Batch nodes one after the
// other as an operator's script would, while another operator pings the control
// plane in a loop.
type RevokeResult struct {
	Requested int `json:"requested"`
	Batch     int `json:"batch"`
	Revoked   int `json:"revoked"`
	Failed    int `json:"failed"`
	// TotalMs is the wall time of all K revocations; Each is one revoke call.
	TotalMs float64 `json:"total_ms"`
	Each    Latency `json:"each"`
	// Connections is the connections the revoked nodes held, as the control plane
	// reported them.
	Connections int `json:"connections"`
	// AgentsStopped is how many of the revoked agents ended with ErrRevoked within
	// the wait after the last revocation; AgentsOther ended otherwise, AgentsRunning
	// had not ended.
	AgentsStopped int `json:"agents_stopped"`
	AgentsOther   int `json:"agents_other"`
	AgentsRunning int `json:"agents_running"`
	// PingIdle is operator ping latency just before the revocations, Ping while
	// they run; PingFailures are pings that returned an error.
	PingIdle     Latency  `json:"ping_idle"`
	Ping         Latency  `json:"ping"`
	PingFailures int      `json:"ping_failures"`
	Examples     []string `json:"examples,omitempty"`
	Phase        Phase    `json:"phase"`
}

// pingLoop pings the control plane back to back (10 ms apart) from its own operator
// connection until stop is closed, and returns the latencies and the failures.
func pingLoop(cp *ControlPlane, stop <-chan struct{}) ([]time.Duration, int, error) {
	c, err := cp.Dial(operator.Options{Timeout: 10 * time.Second})
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	var lat []time.Duration
	failures := 0
	for {
		select {
		case <-stop:
			return lat, failures, nil
		default:
		}
		start := time.Now()
		var res api.PingResult
		if err := c.Call(api.OpPing, struct{}{}, &res); err != nil {
			failures++
		} else {
			lat = append(lat, time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// revoke revokes k of the running hosts, spread over the fleet.
func (b *bench) revoke(ctx context.Context, hosts []*Host, k, batch int) (RevokeResult, error) {
	res := RevokeResult{Requested: min(k, len(hosts)), Batch: max(1, batch)}
	if res.Requested == 0 {
		return res, nil
	}
	var victims []*Host
	step := len(hosts) / res.Requested
	for i := range res.Requested {
		victims = append(victims, hosts[i*step])
	}
	c, err := b.cp.Dial(operator.Options{Timeout: 30 * time.Second})
	if err != nil {
		return res, err
	}
	defer c.Close()

	idle, err := timedPings(b.cp, 2*time.Second)
	if err != nil {
		return res, err
	}
	res.PingIdle = Summarise(idle)

	// The phase begins, with its collection in this process, before the pings run:
	// they are this process's too.
	sp := b.meter.begin(fmt.Sprintf("7. revoke %d nodes, %d a call, one call after the other, pinging meanwhile", res.Requested, res.Batch))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pings []time.Duration
	var pingErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		pings, res.PingFailures, pingErr = pingLoop(b.cp, stop)
	}()
	var each []time.Duration
	start := time.Now()
	for i := 0; i < len(victims); i += res.Batch {
		if ctx.Err() != nil {
			break
		}
		call := victims[i:min(i+res.Batch, len(victims))]
		ids := make([]string, len(call))
		for j, h := range call {
			ids[j] = h.ID
		}
		t := time.Now()
		var rr api.RevokeResult
		if err := c.Call(api.OpRevoke, api.RevokeRequest{Nodes: ids}, &rr); err != nil {
			res.Failed += len(call)
			res.example(fmt.Sprintf("%v: %v", ids, err))
			continue
		}
		each = append(each, time.Since(t))
		res.Revoked += len(rr.Revoked)
		for _, r := range rr.Revoked {
			res.Connections += r.Connections
		}
	}
	res.TotalMs = ms(time.Since(start))
	res.Phase = sp.end()
	close(stop)
	wg.Wait()
	if pingErr != nil {
		return res, pingErr
	}
	res.Each, res.Ping = Summarise(each), Summarise(pings)

	// The revoked agents stop on the signed notice (or after the kick and refusals).
	deadline := time.Now().Add(30 * time.Second)
	for _, h := range victims {
		for {
			done, err, _ := h.exited()
			if done {
				if errors.Is(err, agent.ErrRevoked) {
					res.AgentsStopped++
				} else {
					res.AgentsOther++
					res.example(fmt.Sprintf("%s: agent ended with %v, not ErrRevoked", h.ID, err))
				}
				break
			}
			if time.Now().After(deadline) {
				res.AgentsRunning++
				res.example(h.ID + ": agent still running after its revocation")
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Fprintf(b.out, "   revoked %d (failed %d) in %.0f ms; ping p50 %.1f ms p99 %.1f ms max %.1f ms (idle p99 %.1f ms); agents stopped %d\n",
		res.Revoked, res.Failed, res.TotalMs, res.Ping.P50Ms, res.Ping.P99Ms, res.Ping.MaxMs, res.PingIdle.P99Ms, res.AgentsStopped)
	return res, nil
}

// timedPings runs the ping loop for d.
func timedPings(cp *ControlPlane, d time.Duration) ([]time.Duration, error) {
	stop := make(chan struct{})
	time.AfterFunc(d, func() { close(stop) })
	lat, _, err := pingLoop(cp, stop)
	return lat, err
}

func (r *RevokeResult) example(s string) {
	if len(r.Examples) < 10 {
		r.Examples = append(r.Examples, s)
	}
}
