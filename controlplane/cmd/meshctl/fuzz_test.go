package main

import (
	"strings"
	"testing"
	"time"
)

// FuzzFlagValues: arbitrary values for the flags meshctl parses itself, --label
// (k=v) and --wait (a duration, true or false). Neither may panic; an accepted
// label has a key and is stored as given; an accepted --wait is positive and at
// most maxWait, or off for "false", and accepts is true for every duration.
func FuzzFlagValues(f *testing.F) {
	for _, s := range []string{"tier=web", "k=", "=v", "novalue", "a=b=c", "30s", "1m30s", "true", "false", "-1s", "0s", "soon", "9223372036854775807ns", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l := labelFlag{}
		if err := l.Set(v); err == nil {
			k, val, _ := strings.Cut(v, "=")
			if k == "" || len(l) != 1 || l[k] != val {
				t.Fatalf("--label %q stored as %v", v, l)
			}
		} else if len(l) != 0 {
			t.Fatalf("a refused --label %q was stored: %v", v, l)
		}
		var w waitFlag
		err := w.Set(v)
		switch {
		case err != nil:
			if w.d != 0 {
				t.Fatalf("a refused --wait=%q set %v", v, w.d)
			}
		case v == "false":
			if w.d != 0 {
				t.Fatalf("--wait=false set %v", w.d)
			}
		case v == "true":
			if w.d != defaultWait {
				t.Fatalf("--wait=true set %v", w.d)
			}
		default:
			if d, perr := time.ParseDuration(v); perr != nil || d != w.d || d <= 0 || d > maxWait {
				t.Fatalf("--wait=%q set %v", v, w.d)
			}
			if !w.accepts(v) {
				t.Fatalf("--wait %q: Set takes it, accepts does not", v)
			}
		}
		// accepts takes every duration as --wait's value, and only those: one Set
		// refuses (`--wait 1000h`, `--wait -1s`) is then refused as --wait's, not
		// as a stray argument or as shorthand flags.
		if _, perr := time.ParseDuration(v); w.accepts(v) != (perr == nil) {
			t.Fatalf("--wait %q: accepts says %t, ParseDuration %v", v, w.accepts(v), perr)
		}
	})
}
