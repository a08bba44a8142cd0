package agent

import "time"

// applyRetry is a declaration that verified but failed to apply because of something
// on this host (a file where a directory must go, an immutable file, a full disk).
// It is tried again with capped exponential backoff, re-verified each time, until it
// applies, expires, or a newer declaration supersedes it: once the local fault is
// fixed, the host converges without a new declaration.
type applyRetry struct {
	raw     []byte
	version uint64
	attempt int
	timer   *time.Timer
}

// schedule records raw (version) as failed and returns when it is tried again: the
// first retry after min, each further one of the same version twice as late, at
// most max.
func (r *applyRetry) schedule(raw []byte, version uint64, now time.Time, min, max time.Duration) time.Time {
	if r.raw != nil && r.version == version {
		r.attempt++
	} else {
		r.attempt = 0
	}
	r.raw, r.version = raw, version
	wait := min
	for i := 0; i < r.attempt && wait < max; i++ {
		wait *= 2
	}
	wait = minDuration(wait, max)
	if r.timer != nil {
		r.timer.Stop()
	}
	r.timer = time.NewTimer(wait)
	return now.Add(wait)
}

// clear forgets the pending retry (the declaration applied, or a newer one did).
func (r *applyRetry) clear() {
	if r.timer != nil {
		r.timer.Stop()
	}
	*r = applyRetry{}
}

// due fires when the retry is due; nil (never) when none is pending.
func (r *applyRetry) due() <-chan time.Time {
	if r.timer == nil {
		return nil
	}
	return r.timer.C
}

func minDuration(a, b time.Duration) time.Duration {
	if a < b {
		return a
	}
	return b
}
