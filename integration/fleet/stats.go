package fleet

import (
	"slices"
	"time"
)

// Latency summarises a set of durations. Times are in milliseconds so that the
// JSON reads without conversion.
type Latency struct {
	N int `json:"n"`
	// MinMs is the first: in a fan-out, what comes before any host can apply (the
	// command's start, the commit, the first signatures), apart from the spread.
	MinMs float64 `json:"min_ms"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// Summarise returns the minimum, nearest-rank p50 and p99, and maximum of ds (which
// it sorts).
func Summarise(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{N: len(ds), MinMs: ms(ds[0]), P50Ms: ms(rank(ds, 50)), P99Ms: ms(rank(ds, 99)), MaxMs: ms(ds[len(ds)-1])}
}

// rank is the nearest-rank p-th percentile of sorted ds: the smallest value that at
// least p% of the values do not exceed.
func rank(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted)+99)/100 - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// us is d in microseconds.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// perUnit divides d by n, zero when n is zero.
func perUnit(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// ratio is a/b, zero when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// medianP99 is the median of the rounds' p99s: the fan-out figure as the fleet's
// issue states it ("p99, median of 3 rounds"), which one slow round moves less than
// the p99 of all rounds pooled. With an even number of rounds it is the lower middle.
func medianP99(rounds []Latency) float64 {
	if len(rounds) == 0 {
		return 0
	}
	p := make([]float64, len(rounds))
	for i, r := range rounds {
		p[i] = r.P99Ms
	}
	slices.Sort(p)
	return p[(len(p)-1)/2]
}
