package buildinfo

import "testing"

// TestStampedVersion: a build names its commit in its version, not only beside it:
// before, every build said 0.1.0, and so did every package made of one.
func TestStampedVersion(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct {
		main, rev, at string
		modified      bool
		want          string
	}{
		{"v0.2.0", rev, "2026-12-01T10:00:00Z", false, "0.2.0"},
		{"v0.2.0+dirty", rev, "2026-12-01T10:00:00Z", true, "0.1.0+git20261201100000.0123456789ab.dirty"},
		{"v0.0.0-20261201100000-0123456789ab", rev, "2026-12-01T10:00:00Z", false, "0.1.0+git20261201100000.0123456789ab"},
		{"v0.2.1-0.20261201100000-0123456789ab", rev, "2026-12-01T10:00:00+01:00", false, "0.1.0+git20261201090000.0123456789ab"},
		{"v0.3.0-rc.1", rev, "", false, "0.1.0+git0123456789ab"},
		{"(devel)", "", "", false, "0.1.0"},
		{"", "", "", false, "0.1.0"},
	} {
		if got := Stamped("0.1.0", c.main, c.rev, c.at, c.modified); got != c.want {
			t.Errorf("Stamped(%q, %q, %v) = %q, want %q", c.main, c.at, c.modified, got, c.want)
		}
	}
}
