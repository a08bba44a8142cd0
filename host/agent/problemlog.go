package agent

import "time"

// problemLogEvery is how often a connection problem that keeps repeating is logged
// again. nats.go reports every failed attempt to reach a broker, one every 1 to 15 s
// per broker while the mesh is unreachable: a line each made hundreds an hour per
// host, the same line over and over, for an outage one line already told.
const problemLogEvery = time.Minute

// maxProblems bounds the problems remembered; past it the memory starts again, and
// each is logged once more.
const maxProblems = 16

// problemLog decides which connection problems are logged: each problem (its text)
// at once the first time, then at most once per problemLogEvery with how many were
// held back meanwhile. A different problem (another broker, another cause) is news
// and is logged at once. Its zero value is ready; only the agent's loop uses it.
type problemLog struct {
	seen map[string]*problemSeen
}

type problemSeen struct {
	at   time.Time
	held int
}

// allow reports whether the problem text is logged at now and, if so, how many of
// the same were held back since it was last logged.
func (p *problemLog) allow(text string, now time.Time) (ok bool, held int) {
	if p.seen == nil {
		p.seen = map[string]*problemSeen{}
	}
	s := p.seen[text]
	if s == nil {
		if len(p.seen) >= maxProblems {
			clear(p.seen)
		}
		p.seen[text] = &problemSeen{at: now}
		return true, 0
	}
	if now.Sub(s.at) < problemLogEvery {
		s.held++
		return false, 0
	}
	held = s.held
	*s = problemSeen{at: now}
	return true, held
}

// reset forgets every problem: the agent connected, and the next outage's first
// problem is logged at once.
func (p *problemLog) reset() { clear(p.seen) }
