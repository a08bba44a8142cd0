package daemon

import (
	"testing"

	"mesh/controlplane/api"
	"mesh/controlplane/state"
)

// TestAHookFailureIsNotConverged: a node that applied the version declared for it
// but whose hook failed after (hook_failed), or whose hooks still run, has not
// converged: declare --wait sees it failed (or pending), status and the metrics
// failing, until it reports the hook run again with success. Before, such a node
// was counted converged by status and declare --wait (exit 0) and failing by the
// metrics.
func TestAHookFailureIsNotConverged(t *testing.T) {
	hookFailed := func(v uint64) state.Applied {
		return state.Applied{HaveApplied: true, Version: v, ErrorCode: api.StatusHookFailed, ErrorMessage: "hook restart-app: exit status 1: port in use", ErrorVersion: v}
	}
	cases := []struct {
		name      string
		a         state.Applied
		target    uint64
		alive     bool
		want      string
		converged bool
	}{
		{"applied, no hooks", state.Applied{HaveApplied: true, Version: 3}, 3, true, "", true},
		{"applied, hooks running", state.Applied{HaveApplied: true, Version: 3, HooksRunning: true}, 3, true, api.ProgressPending, false},
		{"applied, hook failed", hookFailed(3), 3, true, api.ProgressFailed, false},
		{"hook failed, offline", hookFailed(3), 3, false, api.ProgressFailed, false},
		{"hook failed, retry running", func() state.Applied { a := hookFailed(3); a.HooksRunning = true; return a }(), 3, true, api.ProgressPending, false},
		{"hook failed at an earlier version, the target not applied yet", hookFailed(2), 3, true, api.ProgressPending, false},
		{"hook failed at an earlier version, a later one applied", func() state.Applied { a := hookFailed(2); a.Version = 3; return a }(), 3, true, api.ProgressFailed, false},
		{"apply failed for the target", state.Applied{HaveApplied: true, Version: 2, ErrorCode: api.StatusApplyFailed, ErrorVersion: 3}, 3, true, api.ProgressFailed, false},
		// A file check found the applied version's files changed and could not
		// put them back: the host's files are not what was declared.
		{"put back failed for the applied version", state.Applied{HaveApplied: true, Version: 3, ErrorCode: api.StatusApplyFailed, ErrorVersion: 3}, 3, true, api.ProgressFailed, false},
		{"put back failed, a later version declared and pending", state.Applied{HaveApplied: true, Version: 3, ErrorCode: api.StatusApplyFailed, ErrorVersion: 3}, 4, true, api.ProgressPending, false},
		// The agent could not persist what it applied (its state directory
		// removed under it, a full disk): failing until a save works, whichever
		// version the report first failed at.
		{"state not saved for the applied version", state.Applied{HaveApplied: true, Version: 3, ErrorCode: api.StatusStateNotSaved, ErrorVersion: 3}, 3, true, api.ProgressFailed, false},
		{"state not saved since an earlier version", state.Applied{HaveApplied: true, Version: 3, ErrorCode: api.StatusStateNotSaved, ErrorVersion: 2}, 3, false, api.ProgressFailed, false},
		{"state not saved, a later version declared and pending", state.Applied{HaveApplied: true, Version: 3, ErrorCode: api.StatusStateNotSaved, ErrorVersion: 3}, 4, true, api.ProgressPending, false},
		{"a refusal of junk after the apply", state.Applied{HaveApplied: true, Version: 3, ErrorCode: "malformed"}, 3, true, "", true},
		{"behind, offline", state.Applied{HaveApplied: true, Version: 2}, 3, false, api.ProgressOffline, false},
	}
	for _, c := range cases {
		if got := standing(c.a, c.target, c.alive); got != c.want {
			t.Errorf("%s: standing %q, want %q", c.name, got, c.want)
		}
		if got := convergedOn(c.a, c.target); got != c.converged {
			t.Errorf("%s: converged %v, want %v", c.name, got, c.converged)
		}
	}
}
