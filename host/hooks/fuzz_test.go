package hooks

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestLoadDistinctRefusals: a hooks file cut short, one over the cap and one with
// something after its object are each refused with their own error, and the cap is
// applied before the file is read whole.
func TestLoadDistinctRefusals(t *testing.T) {
	good := `{"hooks":[{"name":"a","paths":["etc/*.conf"],"run":["/bin/true"],"timeout":"5s"}]}`
	if _, err := Load(write(t, good)); err != nil {
		t.Fatalf("the good file is refused: %v", err)
	}
	cases := []struct {
		name    string
		content string
		want    error
	}{
		{"empty", "", ErrTruncated},
		{"white space only", " \n", ErrTruncated},
		{"cut short", good[:len(good)/2], ErrTruncated},
		{"cut before the last brace", good[:len(good)-1], ErrTruncated},
		{"oversized", `{"hooks":[],"x":"` + strings.Repeat("a", MaxConfigSize) + `"}`, ErrTooLarge},
		{"trailing brace", good + "}", ErrConfig},
		{"trailing bracket", good + "]", ErrConfig},
		{"trailing object", good + "{}", ErrConfig},
		{"null", "null", ErrConfig},
		{"an array", "[]", ErrConfig},
		{"a string", `"hooks"`, ErrConfig},
		{"NUL bytes after it", good + "\x00\x00", ErrConfig},
		{"timeout over an hour", `{"hooks":[{"name":"a","paths":["x"],"run":["true"],"timeout":"61m"}]}`, ErrConfig},
		{"negative timeout", `{"hooks":[{"name":"a","paths":["x"],"run":["true"],"timeout":"-1s"}]}`, ErrConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(write(t, tc.content))
			if !errors.Is(err, tc.want) || !errors.Is(err, ErrConfig) {
				t.Fatalf("%v, want %v", err, tc.want)
			}
			for _, other := range []error{ErrTruncated, ErrTooLarge} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
		})
	}
	// Exactly at the cap is not over it.
	pad := MaxConfigSize - len(`{"hooks":[]}`)
	if _, err := Load(write(t, `{"hooks":[]}`+strings.Repeat(" ", pad))); err != nil {
		t.Fatalf("a file of exactly %d bytes: %v", MaxConfigSize, err)
	}
	// A file of a gigabyte (sparse: it costs no disk) is refused after reading one
	// byte more than the cap, quickly and without its size in memory.
	huge := write(t, "{")
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := Load(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge file: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("refusing a huge file took %v: was it read whole?", d)
	}
}

// FuzzParse reads arbitrary bytes as a hooks file. It must not panic, must refuse
// only with ErrConfig (ErrTruncated, ErrTooLarge among them), and what it accepts is
// one JSON object whose hooks each have a unique name, paths, an argv and a timeout
// up to an hour, and which encodes into a file that parses to the same hooks.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"hooks":[{"name":"reload-app","paths":["etc/app/*.conf"],"run":["/usr/bin/systemctl","reload","app"],"timeout":"30s"}]}`))
	f.Add([]byte(`{"hooks":[{"name":"a","paths":["x","y/*"],"run":["true"]},{"name":"b","paths":["[a-z]"],"run":["/bin/sh","-c","x"]}]}`))
	f.Add([]byte(`{"hooks":[]}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"hooks":[]}}`))
	f.Add([]byte(`{"hooks":[{"name":"a","paths":["\\"],"run":["true"]}]}`))
	f.Add([]byte(`{"hooks":[{"name":"a","paths":["x"],"run":["true"],"timeout":"1h0m0.000000001s"}]}`))
	f.Add([]byte(`{"hooks":[{"name":"a","paths":["x"],"run":["true"]`))
	f.Add([]byte(" "))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data)
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error of no known kind: %v", err)
			}
			if errors.Is(err, ErrTooLarge) != (len(data) > MaxConfigSize) {
				t.Fatalf("ErrTooLarge for %d bytes: %v", len(data), err)
			}
			return
		}
		if !json.Valid(data) || bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
			t.Fatalf("accepted what is not one JSON object: %q", data)
		}
		names := map[string]bool{}
		for _, h := range c.Hooks {
			if h.Name == "" || names[h.Name] || len(h.Paths) == 0 || len(h.Run) == 0 || h.Run[0] == "" {
				t.Fatalf("accepted a hook without a unique name, paths or argv: %+v", h)
			}
			names[h.Name] = true
			if h.timeout <= 0 || h.timeout > time.Hour {
				t.Fatalf("accepted timeout %v", h.timeout)
			}
			for _, p := range h.Paths {
				if p == "" || strings.HasPrefix(p, "/") {
					t.Fatalf("accepted path pattern %q", p)
				}
			}
		}
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parse(out)
		if err != nil {
			t.Fatalf("re-encoded file refused: %v\n%s", err, out)
		}
		if out2, _ := json.Marshal(again); !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the hooks:\n%s\n%s", out, out2)
		}
	})
}
