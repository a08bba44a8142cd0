package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mainEnv, set, makes the test binary run meshhost's main with these arguments
// (separated by the unit separator, 0x1f) instead of the tests: the program in a
// process of its own, for what only a process shows (a signal and how it ends).
const mainEnv = "MESHHOST_TEST_MAIN"

func init() {
	if args := os.Getenv(mainEnv); args != "" {
		os.Args = append([]string{"meshhost"}, strings.Split(args, "\x1f")...)
		main()
	}
}

// TestRunLogsItsStop: `meshhost run` told to stop by SIGTERM (systemctl stop) or
// SIGINT (Ctrl-C) logs, at info and in the format --log-format asks for, that the
// agent stops and why, then that it stopped, and exits 0. It stopped without a word,
// where meshctl serve logs "control node stopping" and "control node stopped".
func TestRunLogsItsStop(t *testing.T) {
	for _, c := range []struct {
		format string
		sig    syscall.Signal
		name   string
	}{
		{"text", syscall.SIGTERM, "SIGTERM"},
		{"json", syscall.SIGTERM, "SIGTERM"},
		{"text", syscall.SIGINT, "SIGINT"},
		{"json", syscall.SIGINT, "SIGINT"},
	} {
		t.Run(c.format+"/"+c.name, func(t *testing.T) {
			t.Parallel()
			dir, _ := enrolled(t) // its one broker, 127.0.0.1:1, never answers
			args := []string{"run", "--state", dir, "--root", filepath.Join(dir, "managed"), "--log-format", c.format}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), mainEnv+"="+strings.Join(args, "\x1f"))
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 256)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			deadline := time.After(30 * time.Second)
			var log []string
			// "agent running" is logged once the signals are handled.
			for running := false; !running; {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("meshhost run ended before it ran:\n%s", strings.Join(log, "\n"))
					}
					log = append(log, l)
					running = strings.Contains(l, "agent running")
				case <-deadline:
					_ = cmd.Process.Kill()
					t.Fatalf("no \"agent running\" within 30s:\n%s", strings.Join(log, "\n"))
				}
			}
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			for ended := false; !ended; {
				select {
				case l, ok := <-lines:
					if !ok {
						ended = true
						break
					}
					log = append(log, l)
				case <-deadline:
					_ = cmd.Process.Kill()
					t.Fatalf("not stopped within 30s of %s:\n%s", c.name, strings.Join(log, "\n"))
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("%s: %v, want exit 0:\n%s", c.name, err, strings.Join(log, "\n"))
			}
			// Every line in the format asked for; the stop's two at info, in order.
			stopping, stopped := -1, -1
			for i, l := range log {
				var level, msg, reason string
				if c.format == "json" {
					var rec map[string]any
					if err := json.Unmarshal([]byte(l), &rec); err != nil {
						t.Errorf("a line that is not JSON with --log-format json: %q", l)
						continue
					}
					level, _ = rec["level"].(string)
					msg, _ = rec["msg"].(string)
					reason, _ = rec["reason"].(string)
				} else {
					if !strings.HasPrefix(l, "time=") {
						t.Errorf("a line that is not slog's text with --log-format text: %q", l)
						continue
					}
					level = textValue(l, "level")
					msg = textValue(l, "msg")
					reason = textValue(l, "reason")
				}
				switch msg {
				case "agent stopping":
					if level != "INFO" || reason != "interrupted by "+c.name {
						t.Errorf("%q: want level INFO, reason %q", l, "interrupted by "+c.name)
					}
					stopping = i
				case "agent stopped":
					if level != "INFO" {
						t.Errorf("%q: want level INFO", l)
					}
					stopped = i
				}
			}
			if stopping < 0 || stopped < stopping || stopped != len(log)-1 {
				t.Errorf("want \"agent stopping\", then \"agent stopped\" last; got lines %d and %d of %d:\n%s", stopping, stopped, len(log), strings.Join(log, "\n"))
			}
		})
	}
}

// textValue is the value of key in a line of slog's text handler, unquoted.
func textValue(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	if strings.HasPrefix(rest, `"`) {
		end := strings.Index(rest[1:], `"`)
		if end < 0 {
			return rest[1:]
		}
		return rest[1 : end+1]
	}
	v, _, _ := strings.Cut(rest, " ")
	return v
}
