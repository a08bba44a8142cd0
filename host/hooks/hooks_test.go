package hooks

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hooks.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadRefusesBadConfigs(t *testing.T) {
	cases := map[string]string{
		"not json":       `hooks`,
		"unknown field":  `{"hooks":[{"name":"a","paths":["x"],"run":["true"],"shell":"sh -c"}]}`,
		"no name":        `{"hooks":[{"paths":["x"],"run":["true"]}]}`,
		"duplicate name": `{"hooks":[{"name":"a","paths":["x"],"run":["true"]},{"name":"a","paths":["y"],"run":["true"]}]}`,
		"no paths":       `{"hooks":[{"name":"a","run":["true"]}]}`,
		"absolute path":  `{"hooks":[{"name":"a","paths":["/etc/x"],"run":["true"]}]}`,
		"bad pattern":    `{"hooks":[{"name":"a","paths":["[x"],"run":["true"]}]}`,
		"empty run":      `{"hooks":[{"name":"a","paths":["x"],"run":[]}]}`,
		"bad timeout":    `{"hooks":[{"name":"a","paths":["x"],"run":["true"],"timeout":"forever"}]}`,
		"trailing data":  `{"hooks":[]} {}`,
		"oversized":      `{"hooks":[],"x":"` + strings.Repeat("a", MaxConfigSize) + `"}`,
	}
	for name, content := range cases {
		if _, err := Load(write(t, content)); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.json")); !errors.Is(err, ErrConfig) {
		t.Errorf("absent file: %v", err)
	}
}

func TestRunMatchesAndReports(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"reload","paths":["etc/*.conf"],"run":["sh","-c","printf '%s' \"$MESH_CHANGED\" > `+marker+`"]},
		{"name":"never","paths":["other/*"],"run":["sh","-c","exit 0"]},
		{"name":"broken","paths":["etc/b.conf"],"run":["sh","-c","echo nope; exit 3"]},
		{"name":"slow","paths":["slow"],"run":["sleep","5"],"timeout":"100ms"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	ran, failures := cfg.Run(context.Background(), t.TempDir(), []string{"etc/a.conf", "etc/b.conf", "bin/x"})
	if strings.Join(ran, ",") != "reload,broken" {
		t.Fatalf("ran %v", ran)
	}
	if got, _ := os.ReadFile(marker); string(got) != "etc/a.conf\netc/b.conf" {
		t.Fatalf("MESH_CHANGED = %q", got)
	}
	if len(failures) != 1 || failures[0].Hook != "broken" || !strings.Contains(failures[0].Error(), "nope") {
		t.Fatalf("failures %v", failures)
	}
	_, failures = cfg.Run(context.Background(), t.TempDir(), []string{"slow"})
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "timed out") {
		t.Fatalf("slow hook: %v", failures)
	}
	if ran, _ := (Config{}).Run(context.Background(), t.TempDir(), []string{"etc/a.conf"}); len(ran) != 0 {
		t.Fatal("an empty configuration ran something")
	}
}
