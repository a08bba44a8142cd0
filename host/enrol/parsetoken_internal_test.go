package enrol

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestAFarExpiryIsSaidAsADate (a walkthrough): a token expiring far ahead (a clock,
// or a token written by hand) printed "expires in 2562047h47m16.854775807s", the
// duration's overflow.
func TestAFarExpiryIsSaidAsADate(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for exp, want := range map[time.Time]string{
		now.Add(15 * time.Minute):                        "expires in 15m0s",
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC): "expires at 9999-12-31T23:59:59Z, far past the hour a token lives",
		now.Add(-time.Minute):                            "expired 1m0s ago",
	} {
		if got := expiryText(exp, now); !strings.HasPrefix(got, want) || strings.Contains(got, "2562047h") {
			t.Errorf("expiryText(%s) = %q, want %q", exp, got, want)
		}
	}
}

// TestARedactedTokenIsSaidAsSuch (a walkthrough): a token copied from a log, its
// secret "<redacted>", was refused as truncated, "copy the whole line again".
func TestARedactedTokenIsSaidAsSuch(t *testing.T) {
	text := "mesh1_demo_192.0.2.10:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1796000900_<redacted>"
	// A mesh or a node whose id holds "mesh1" (a review: the check counted
	// "mesh" in the whole line), and the line a log prints it in.
	for _, redacted := range []string{text, strings.Replace(text, "_demo_", "_mesh1_", 1), strings.Replace(text, "_web-1_", "_mesh1-gw_", 1),
		strings.Replace(text, "_demo_", "_meshlab_", 1), "time=2026-12-07T12:00:00Z level=INFO msg=minted token=" + text} {
		_, err := ParseToken(redacted+"\n", time.Now(), "")
		if !errors.Is(err, ErrToken) || !strings.Contains(err.Error(), "a token as a log prints it") || strings.Contains(err.Error(), "copy the whole line") {
			t.Fatalf("ParseToken(%s) = %v", redacted, err)
		}
	}
	// A token pasted with a log line after it is told what is wrong with that
	// (a review: it was told to use the token meshctl token printed, which it is).
	_, err := ParseToken("mesh1_demo_192.0.2.10:7300_"+strings.Repeat("ab", 32)+"_"+strings.Repeat("cd", 32)+"_web-1_worker_1796000900_"+strings.Repeat("5e", 32)+"_0badc0de\n"+text, time.Now(), "")
	if err == nil || strings.Contains(err.Error(), "a token as a log prints it") {
		t.Fatalf("a token and a log line: %v, want the parser's own refusal", err)
	}
}
