package fleet

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"mesh/controlplane/api"
	"mesh/host/apply"
	"mesh/host/state"
)

// declaredPath is the one file each round declares, relative to the managed root.
const declaredPath = "etc/fleet.conf"

// RoundResult is one `meshctl declare --all --file F --wait` to the whole fleet.
type RoundResult struct {
	Name string `json:"name"`
	// ExitCode is declare's; 5 means --wait ended with nodes not converged.
	ExitCode int `json:"exit_code"`
	// ConvergeMs is the wall time of the declare command: commit, sign, send, and
	// poll the roster (every 500 ms) until every node reported it applied.
	ConvergeMs float64 `json:"converge_ms"`
	// Apply is each host's apply latency, from just before declare was started to
	// its file applier returning.
	Apply Latency `json:"apply"`
	// Assigned nodes, and where declare --wait says they stand.
	Assigned  int `json:"assigned"`
	Converged int `json:"converged"`
	Failed    int `json:"failed"`
	Pending   int `json:"pending"`
	Offline   int `json:"offline"`
	// Failures seen from the hosts, over the whole fleet: hosts the declaration
	// was not assigned to, hosts whose applier never applied it, hosts whose
	// applied state does not hold the assigned version, and sampled hosts whose
	// file is not byte for byte the declared content.
	Unassigned      int `json:"unassigned"`
	NotApplied      int `json:"not_applied"`
	VersionMismatch int `json:"version_mismatch"`
	Sampled         int `json:"sampled"`
	SampleMismatch  int `json:"sample_mismatch"`
	// Versions counts the assigned versions (all hosts normally share one).
	Versions map[uint64]int `json:"versions"`
	Examples []string       `json:"examples,omitempty"`
	Phase    Phase          `json:"phase"`

	lat     []time.Duration // every host's apply latency, for pooling rounds
	started time.Time       // just before declare was started
}

// Failures is the sum of every failure the round counted.
func (r RoundResult) Failures() int {
	return r.Unassigned + r.NotApplied + r.VersionMismatch + r.SampleMismatch + r.Failed + r.Pending + r.Offline
}

// bodyFile is a declaration body on disk and the files it declares.
type bodyFile struct {
	path  string
	data  []byte
	files []apply.File
}

// writeBody writes a body declaring one small file whose content names the round
// and carries a random nonce, so that no two rounds declare the same thing.
func writeBody(dir, name string) (bodyFile, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	content := fmt.Sprintf("# fleet benchmark, %s\nnonce = %s\n", name, hex.EncodeToString(nonce[:]))
	type file struct {
		Path    string `json:"path"`
		Content string `json:"content"`
		Mode    string `json:"mode"`
	}
	raw, err := json.Marshal(struct {
		Files []file `json:"files"`
	}{[]file{{Path: declaredPath, Content: content, Mode: "0644"}}})
	if err != nil {
		return bodyFile{}, err
	}
	p := filepath.Join(dir, name+".json")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		return bodyFile{}, err
	}
	return bodyFile{path: p, data: []byte(content), files: []apply.File{{Path: declaredPath, Data: []byte(content), Mode: 0o644}}}, nil
}

// declareOutput is what `declare --json --wait` prints.
type declareOutput struct {
	api.DeclareResult
	Wait struct {
		Converged []string          `json:"converged"`
		Failed    map[string]string `json:"failed"`
		Pending   []string          `json:"pending"`
		Offline   []string          `json:"offline"`
	} `json:"wait"`
}

// declareRound declares a new body to every node with meshctl and waits, then
// checks every host of the fleet against what declare assigned.
// The phase starts after a collection of the benchmark's garbage unless it goes on
// timing something under way (asIs).
func (b *bench) declareRound(ctx context.Context, name string, hosts []*Host, asIs bool) (RoundResult, error) {
	res := RoundResult{Name: name, Versions: map[uint64]int{}}
	body, err := writeBody(b.workDir, name)
	if err != nil {
		return res, err
	}
	begin := b.meter.begin
	if asIs {
		begin = b.meter.beginAsIs
	}
	sp := begin(name)
	t0 := time.Now()
	res.started = t0
	r, err := b.cp.Ctl(ctx, "declare", "--all", "--file", body.path, "--json", "--wait="+b.cfg.WaitTimeout.String())
	if err != nil {
		return res, err
	}
	res.ConvergeMs = ms(r.Wall)
	res.Phase = sp.end()
	res.ExitCode = r.Code
	var out declareOutput
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		return res, fmt.Errorf("declare exited %d and printed no result (%v):\n%s", r.Code, err, r.Stderr)
	}
	res.Assigned = len(out.Assignments)
	res.Converged, res.Failed = len(out.Wait.Converged), len(out.Wait.Failed)
	res.Pending, res.Offline = len(out.Wait.Pending), len(out.Wait.Offline)
	for n, why := range out.Wait.Failed {
		res.example(fmt.Sprintf("declare --wait: %s failed: %s", n, why))
	}
	want := make(map[string]uint64, len(out.Assignments))
	for _, a := range out.Assignments {
		want[a.Node] = a.Version
		res.Versions[a.Version]++
	}
	res.lat = b.checkHosts(&res, hosts, want, body, t0)
	res.Apply = Summarise(res.lat)
	fmt.Fprintf(b.out, "   %s: exit %d, %d assigned, %d converged; apply min %.1f ms p50 %.1f ms p99 %.1f ms max %.1f ms; %d failures\n",
		name, res.ExitCode, res.Assigned, res.Converged, res.Apply.MinMs, res.Apply.P50Ms, res.Apply.P99Ms, res.Apply.MaxMs, res.Failures())
	return res, nil
}

// sampleSize is how many hosts' files are compared byte for byte each round.
const sampleSize = 100

// hostCheck is what checkHosts found on one host.
type hostCheck struct {
	assigned, applied, versionOK bool
	sampled, sampleOK            bool
	at                           time.Time
	detail                       string
}

// checkHosts verifies every host: the declaration was assigned to it, its applier
// applied it, and its applied state holds the assigned version; and compares the
// file of a sample of hosts byte for byte. It returns the apply latencies from t0.
func (b *bench) checkHosts(res *RoundResult, hosts []*Host, want map[string]uint64, body bodyFile, t0 time.Time) []time.Duration {
	step := max(1, len(hosts)/sampleSize)
	checks := make([]hostCheck, len(hosts))
	idx := make([]int, len(hosts))
	for i := range idx {
		idx[i] = i
	}
	forEach(idx, 32, func(i int) {
		h, c := hosts[i], &checks[i]
		v, assigned := want[h.ID]
		c.assigned = assigned
		c.at, c.applied = h.appliedAt(body.files)
		if assigned {
			st, err := state.Load(h.StateDir)
			c.versionOK = err == nil && st.HaveApplied && st.Version == v
			if !c.versionOK {
				c.detail = fmt.Sprintf("applied state: want v%d, have v%d (have_applied %t, err %v)", v, st.Version, st.HaveApplied, err)
			}
		}
		if c.sampled = i%step == 0 && i/step < sampleSize; c.sampled {
			got, err := os.ReadFile(filepath.Join(h.Root, filepath.FromSlash(declaredPath)))
			c.sampleOK = err == nil && bytes.Equal(got, body.data)
			if !c.sampleOK {
				c.detail += fmt.Sprintf("; %s: %d bytes, not the declared %d (err %v)", declaredPath, len(got), len(body.data), err)
			}
		}
	})
	lat := make([]time.Duration, 0, len(hosts))
	for i, c := range checks {
		switch {
		case !c.assigned:
			res.Unassigned++
			res.example(hosts[i].ID + ": not assigned the declaration")
		case !c.versionOK:
			res.VersionMismatch++
			res.example(hosts[i].ID + ": " + c.detail)
		}
		if c.applied {
			lat = append(lat, c.at.Sub(t0))
		} else {
			res.NotApplied++
			res.example(hosts[i].ID + ": its applier never applied the declaration")
		}
		if c.sampled {
			res.Sampled++
			if !c.sampleOK {
				res.SampleMismatch++
				res.example(hosts[i].ID + ": " + c.detail)
			}
		}
	}
	return lat
}

// example keeps the first few failure messages.
func (r *RoundResult) example(s string) {
	if len(r.Examples) < 10 {
		r.Examples = append(r.Examples, s)
	}
}

// pooled summarises the apply latencies of every host over all rounds.
func pooled(rounds []RoundResult) Latency {
	var all []time.Duration
	for _, r := range rounds {
		all = append(all, r.lat...)
	}
	return Summarise(all)
}
