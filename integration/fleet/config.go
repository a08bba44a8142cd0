package fleet

import (
	"errors"
	"io"
	"time"
)

// Config is one benchmark run.
type Config struct {
	// Hosts is the fleet's size, N.
	Hosts int `json:"hosts"`
	// Rounds of declare --all --wait after the fleet is up.
	Rounds int `json:"rounds"`
	// Revoke is K, how many nodes the last phase revokes.
	Revoke int `json:"revoke"`
	// CheckFiles is the agents' file check interval (meshhost run --check-files):
	// 0 the agent's default, a negative value never.
	CheckFiles time.Duration `json:"check_files,omitempty"`
	// RevokeBatch is how many nodes one revoke call names.
	RevokeBatch int `json:"revoke_batch"`
	// Inflight bounds concurrent enrolments, and the baseline's concurrent connects.
	Inflight int `json:"inflight"`
	// StartInflight bounds agents connecting at once at start (0: all at once).
	StartInflight int `json:"start_inflight"`
	// WaitTimeout is declare's --wait.
	WaitTimeout time.Duration `json:"wait_timeout"`
	// PhaseTimeout bounds each phase that waits for the fleet.
	PhaseTimeout time.Duration `json:"phase_timeout"`
	// MessageSize is the baseline's message size in bytes.
	MessageSize int `json:"message_size"`
	// ServeLogLevel is serve's --log-level.
	ServeLogLevel string `json:"serve_log_level"`
	// Idle is how long the fleet stays connected with nothing to do, to measure
	// what a mesh at rest costs: pings, heartbeats. 0 skips the phase.
	Idle time.Duration `json:"idle"`
	// RestartDelay is how long serve stays down after the kill of phase 6. The
	// agents' first reconnections come 1–2 s after the kill, so a delay near 1 s makes
	// the restarted node start as they arrive.
	RestartDelay time.Duration `json:"restart_delay,omitempty"`
	// Product and Baseline select the parts that run.
	Product  bool `json:"product"`
	Baseline bool `json:"baseline"`

	// WorkDir is where the control plane's data directory goes (real disk);
	// HostDir where the hosts' state and managed roots go (tmpfs).
	WorkDir string `json:"work_dir"`
	HostDir string `json:"host_dir"`
	// Keep keeps both directories after the run.
	Keep bool `json:"keep"`
	// Meshctl is a built meshctl to use; empty builds one from the module the
	// working directory is in.
	Meshctl string `json:"meshctl,omitempty"`
	// Self is the benchmark's own binary, re-run as the baseline's server.
	Self string `json:"-"`
	// ProfileDir, when set, receives CPU profiles of serve and of the agents for
	// the phases whose name contains ProfilePhase (serve's for their first
	// ProfileSeconds), and serve's heap once the fleet is connected.
	ProfileDir     string `json:"profile_dir,omitempty"`
	ProfilePhase   string `json:"profile_phase,omitempty"`
	ProfileSeconds int    `json:"profile_seconds,omitempty"`
	// Out receives the progress lines.
	Out io.Writer `json:"-"`
}

// DefaultConfig is the configuration `task bench:fleet` runs with.
func DefaultConfig() Config {
	return Config{
		Hosts: 1000, Rounds: 3, Revoke: 100, RevokeBatch: 10, Inflight: 200, StartInflight: 200,
		WaitTimeout: 5 * time.Minute, PhaseTimeout: 10 * time.Minute, MessageSize: 300,
		ServeLogLevel: "info", Product: true, Baseline: true, Idle: 15 * time.Second,
		WorkDir: "", HostDir: "/dev/shm",
	}
}

func (c Config) validate() error {
	switch {
	case c.Hosts < 1:
		return errors.New("-hosts must be at least 1")
	case c.Rounds < 1:
		return errors.New("-rounds must be at least 1")
	case c.Revoke < 0 || c.Revoke > c.Hosts:
		return errors.New("-revoke must be between 0 and -hosts")
	case c.Inflight < 1:
		return errors.New("-inflight must be at least 1")
	case c.StartInflight < 0:
		return errors.New("-start-inflight must not be negative")
	case c.MessageSize < 1:
		return errors.New("-msg-size must be at least 1")
	case c.Idle < 0:
		return errors.New("-idle must not be negative")
	case c.RestartDelay < 0:
		return errors.New("-restart-delay must not be negative")
	case !c.Product && !c.Baseline:
		return errors.New("nothing to run: both the product and the baseline are off")
	case c.Out == nil:
		return errors.New("no output")
	}
	return nil
}
