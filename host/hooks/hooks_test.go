package hooks

import (
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nkeys"

	"mesh/host/redact"
	"mesh/host/statedir"
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
	absent := t.TempDir() + "/./absent.json" // named as given, not cleaned
	if _, err := Load(absent); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), absent+" does not exist") {
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

// TestLoadRefusesAFileOthersCanChange: the hooks file names commands run as root;
// one that group or others may write, or that sits in a directory they may write,
// is refused, as sudo refuses such a sudoers. Before, any file was read.
func TestLoadRefusesAFileOthersCanChange(t *testing.T) {
	good := `{"hooks":[{"name":"a","paths":["x"],"run":["true"]}]}`
	open := write(t, good)
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(open); !errors.Is(err, ErrConfig) || !errors.Is(err, statedir.ErrUnsafePath) {
		t.Errorf("a world-writable hooks file: %v, want ErrConfig and statedir.ErrUnsafePath", err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777)
	inShared := filepath.Join(shared, "hooks.json")
	if err := os.WriteFile(inShared, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(inShared); !errors.Is(err, statedir.ErrUnsafePath) {
		t.Errorf("a hooks file in a world-writable directory: %v, want statedir.ErrUnsafePath", err)
	}
	if _, err := Load(write(t, good)); err != nil {
		t.Errorf("the agent's own hooks file: %v", err)
	}
}

// TestAHooksFileInTheRootIsRefused: the hooks file names the commands the agent
// runs as root, and a declaration may write any path of the managed root: a hooks
// file there (`--root /srv/app --hooks /srv/app/hooks.json`, or a root such as /etc
// holding /etc/meshhost/hooks.json) is refused, as a state directory there is, by
// where its name is and where its links lead. Before, it was read: a declaration
// wrote hooks.json (root's, 0644, which Load takes) and the agent ran the mesh's
// commands as root from its next start.
func TestAHooksFileInTheRootIsRefused(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "etc")
	for _, d := range []string{filepath.Join(root, "meshhost"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) string {
		p := filepath.Join(outside, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	rootLink := link("root-link", root)
	refused := map[string][2]string{ // file, root
		"in the root":                {filepath.Join(root, "hooks.json"), root},
		"deeper in the root":         {filepath.Join(root, "meshhost", "hooks.json"), root},
		"not there yet, in the root": {filepath.Join(root, "new", "hooks.json"), root},
		"a link into the root":       {link("hooks.json", filepath.Join(root, "hooks.json")), root},
		"through a link to the root": {filepath.Join(rootLink, "hooks.json"), root},
		"the root through a link":    {filepath.Join(root, "hooks.json"), rootLink},
		"relative, in the root":      {"root/hooks.json", root},
	}
	t.Chdir(base)
	for name, c := range refused {
		err := CheckApart(c[0], c[1])
		if !errors.Is(err, ErrInRoot) || !strings.Contains(err.Error(), "choose places apart") {
			t.Errorf("%s (--hooks %s --root %s): %v, want ErrInRoot saying to choose places apart", name, c[0], c[1], err)
		}
	}
	// A relative link in a directory reached through a link leads from where it
	// really is (a/b/../../root is the root), not from the path given (L/../..).
	if err := os.MkdirAll(filepath.Join(base, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../root/hooks.json", filepath.Join(base, "a", "b", "hooks.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a/b", filepath.Join(base, "L")); err != nil {
		t.Fatal(err)
	}
	if err := CheckApart(filepath.Join(base, "L", "hooks.json"), root); !errors.Is(err, ErrInRoot) {
		t.Errorf("a relative link, in a directory reached through a link, into the root: %v, want ErrInRoot", err)
	}
	linkInRoot := filepath.Join(root, "hooks-link.json")
	if err := os.Symlink(filepath.Join(outside, "real.json"), linkInRoot); err != nil {
		t.Fatal(err)
	}
	if err := CheckApart(linkInRoot, root); !errors.Is(err, ErrInRoot) {
		t.Errorf("a link in the root to a file outside it: %v, want ErrInRoot (a declaration names the link's path)", err)
	}
	for name, file := range map[string]string{
		"beside the root":              filepath.Join(base, "root-hooks.json"),
		"apart":                        filepath.Join(outside, "meshhost.json"),
		"in a directory named like it": filepath.Join(base, "rootx", "hooks.json"),
	} {
		if err := CheckApart(file, root); err != nil {
			t.Errorf("%s (--hooks %s): %v, want it taken", name, file, err)
		}
	}
}

// TestHooksInheritLittle: a hook gets the locale and PATH of the agent's environment
// and nothing else of it (not MESH_TOKEN, not systemd's credentials), no descriptor
// the agent inherited, and a token it prints is hidden in the output the node
// reports. Before, it got the whole environment and every inherited descriptor.
func TestHooksInheritLittle(t *testing.T) {
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_web-1_worker_1900000000_" + secret + "_0badc0de"
	t.Setenv("MESH_TOKEN", tok)
	t.Setenv("CREDENTIALS_DIRECTORY", "/run/credentials/meshhost.service")
	t.Setenv("LANG", "C.UTF-8")
	// A descriptor the agent's parent left open, not close-on-exec.
	fd, err := syscall.Open(os.Args[0], syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	cfg, err := Load(write(t, `{"hooks":[{"name":"tell","paths":["x"],"run":["sh","-c","env; ls /proc/self/fd; echo `+tok+`; exit 1"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"x"})
	if len(failures) != 1 {
		t.Fatalf("failures %v", failures)
	}
	out := failures[0].Output
	for _, leak := range []string{secret, "CREDENTIALS_DIRECTORY", "MESH_TOKEN"} {
		if strings.Contains(out, leak) {
			t.Errorf("the hook saw or printed %s:\n%s", leak, out)
		}
	}
	for _, want := range []string{"LANG=C.UTF-8", "PATH=", "MESH_CHANGED=x", "<a token: not shown>"} {
		if !strings.Contains(out, want) {
			t.Errorf("the hook's output lacks %s:\n%s", want, out)
		}
	}
	if runtime.GOOS == "linux" {
		// ls itself opens /proc/self/fd: 0, 1, 2 and that one.
		fds := strings.Fields(out[strings.Index(out, "\n0\n")+1 : strings.Index(out, "<a token")])
		if len(fds) > 4 {
			t.Errorf("the hook holds descriptors %v: more than stdin, stdout, stderr and ls's own", fds)
		}
	}
}

// TestHookOutputKeepsItsEnd runs a hook that prints megabytes before it says why
// it failed. Before, the cap on its output was bypassed (exec copies output with
// io.Copy, which used the embedded bytes.Buffer's ReadFrom): the agent held, logged
// and recorded all of it, and the reason, at the end, was past what the control
// plane shows. A token cut by the cap must not leave its secret behind either.
func TestHookOutputKeepsItsEnd(t *testing.T) {
	secret := strings.Repeat("5e", 32)
	tok := "mesh1_demo_127.0.0.1:7300_" + strings.Repeat("ab", 32) + "_web-1_worker_1900000000_" + secret + "_0badc0de"
	// The kept end begins inside the token: its head is dropped, its secret is not.
	pad := maxOutput - len("the real reason\n") - len(tok) - 1 + 40
	script := `head -c 3000000 /dev/zero | tr '\0' x; echo; echo ` + tok + `; head -c ` + strconv.Itoa(pad) + ` /dev/zero | tr '\0' y; echo; echo 'the real reason' >&2; exit 1`
	cfg, err := Load(write(t, `{"hooks":[{"name":"loud","paths":["x"],"run":["sh","-c",`+strconv.Quote(script)+`]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"x"})
	if len(failures) != 1 {
		t.Fatalf("failures %v", failures)
	}
	out := failures[0].Output
	if len(out) > maxOutput+8 {
		t.Errorf("the failure holds %d bytes of output; want at most the last %d", len(out), maxOutput)
	}
	if !strings.Contains(out, "the real reason") {
		t.Errorf("the failure lacks the end of the output: %.200q", out)
	}
	if strings.Contains(out, secret[len(secret)-20:]) {
		t.Errorf("the failure holds the end of a token's secret: %.200q", out)
	}
}

// TestAHookPrintingALongKeyHidesIt (a reviewer's audit, 2026-12, finding 9): a
// hook prints a private key longer than about 4 KiB (RSA of 8,192 bits here) after
// much output and before 3 KB more. What the output keeps begins inside the key,
// its BEGIN line cut off, and the last 4 KiB shown held the end of its body in the
// clear. Now it is hidden up to the key's END line; the reason is kept.
func TestAHookPrintingALongKeyHidesIt(t *testing.T) {
	material := make([]byte, 4700)
	if _, err := rand.Read(material); err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: material})
	keyFile := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	script := `head -c 20000 /dev/zero | tr '\0' x; echo; cat ` + keyFile + `; head -c 3000 /dev/zero | tr '\0' y; echo; echo 'the real reason' >&2; exit 1`
	cfg, err := Load(write(t, `{"hooks":[{"name":"check","paths":["x"],"run":["sh","-c",`+strconv.Quote(script)+`]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"x"})
	if len(failures) != 1 {
		t.Fatalf("failures %v", failures)
	}
	out := failures[0].Output
	lines := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")
	for _, l := range lines[1 : len(lines)-1] {
		if strings.Contains(out, l) {
			t.Fatalf("the failure holds a line of the key's body, %.40q…:\n%.300q", l, out)
		}
	}
	if !strings.Contains(out, "the real reason") || !strings.Contains(out, redact.Hidden) {
		t.Fatalf("the failure lost the hook's reason, or hides nothing: %.300q", out)
	}
}

// TestHookRunsForADeclarationOfManyLongPaths changes 1000 paths of 160 bytes, a
// declaration well within its caps. Before, MESH_CHANGED held them all, 160 KiB,
// over the 128 KiB Linux allows one environment string, and the hook never
// started ("argument list too long"), at every declaration that changed them.
func TestHookRunsForADeclarationOfManyLongPaths(t *testing.T) {
	var changed []string
	for i := 0; i < 1000; i++ {
		changed = append(changed, fmt.Sprintf("etc/%04d-%s", i, strings.Repeat("x", 150)))
	}
	out := filepath.Join(t.TempDir(), "env")
	cfg, err := Load(write(t, `{"hooks":[{"name":"many","paths":["etc/*"],"run":["sh","-c","printf '%s\n' \"$MESH_CHANGED\" | wc -l > `+out+`; echo $MESH_CHANGED_OMITTED >> `+out+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, failures := cfg.Run(context.Background(), t.TempDir(), changed); len(failures) != 0 {
		t.Fatalf("failures %v", failures)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(got))
	if len(f) != 2 {
		t.Fatalf("the hook wrote %q", got)
	}
	listed, _ := strconv.Atoi(f[0])
	omitted, _ := strconv.Atoi(f[1])
	if listed == 0 || omitted == 0 || listed+omitted != len(changed) {
		t.Fatalf("MESH_CHANGED listed %d paths and MESH_CHANGED_OMITTED says %d; want them to add up to %d", listed, omitted, len(changed))
	}
}

// TestAHookCommandOthersCanChangeIsNotRun: a hook's command in a directory others
// may write (an app's directory, a directory of the managed root that is not the
// agent's) is not run, and the hook fails saying why; as root, the agent would run
// what that directory's users put there. Check says so as the agent starts. The same
// command in a directory only its owner writes runs.
func TestAHookCommandOthersCanChangeIsNotRun(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	script := "#!/bin/sh\ntouch " + marker + "\n"
	for _, d := range []string{open, dir} {
		if err := os.WriteFile(filepath.Join(d, "reload"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := Load(write(t, `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["`+filepath.Join(open, "reload")+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cfg.Check(t.TempDir()); len(errs) != 1 || !strings.Contains(errs[0].Error(), "group or others may write it") {
		t.Fatalf("Check: %v, want the command's directory named", errs)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"etc/a"})
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "not run") || !strings.Contains(failures[0].Error(), open) {
		t.Fatalf("failures %v, want the hook not run, naming %s", failures, open)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command others could change was run")
	}
	cfg.Hooks[0].Run[0] = filepath.Join(dir, "reload")
	if _, failures := cfg.Run(context.Background(), t.TempDir(), []string{"etc/a"}); len(failures) != 0 {
		t.Fatalf("the command in its owner's directory: %v", failures)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command in its owner's directory did not run")
	}
}

// TestAHookCommandIsRunAsChecked: the file a hook runs is the one its check passed.
// A command in a directory another user may write, not executable when the check
// looked (or not there yet), is not run: before, the check let it through as "not
// found, left to exec", exec looked it up again by name, and a user who made it
// executable in between (a loop of chmod) had it run as root. The test makes it
// executable where that user would, between the check and the start. And a command
// named bare is still found on PATH, and run from where the check found it.
func TestAHookCommandIsRunAsChecked(t *testing.T) {
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	reload := filepath.Join(open, "reload")
	if err := os.WriteFile(reload, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(write(t, `{"hooks":[{"name":"reload","paths":["etc/*"],"run":["`+reload+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.beforeStart = func(Hook) { _ = os.Chmod(reload, 0o755) }
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"etc/a"})
	if len(failures) != 1 || !strings.Contains(failures[0].Error(), "not run") || !strings.Contains(failures[0].Error(), "not executable") {
		t.Fatalf("failures %v, want the hook not run because its command was not executable", failures)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a command made executable after its check was run")
	}

	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "named"), []byte("#!/bin/sh\nprintf '%s' \"$0\" > "+marker+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	cfg, err = Load(write(t, `{"hooks":[{"name":"named","paths":["etc/*"],"run":["named"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, failures := cfg.Run(context.Background(), t.TempDir(), []string{"etc/a"}); len(failures) != 0 {
		t.Fatalf("a command on PATH: %v", failures)
	}
	if got, _ := os.ReadFile(marker); string(got) != filepath.Join(bin, "named") {
		t.Fatalf("the command ran as %q, want the file found on PATH", got)
	}
}

// TestMESHROOTIsAbsolute: a hook runs in /, not where the agent runs, so a relative
// root given to the agent (`--root ./h1/managed`, as the docs' examples do) would
// make MESH_ROOT name a directory that is not there from where the hook runs.
func TestMESHROOTIsAbsolute(t *testing.T) {
	base := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "h1", "managed"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(base)
	marker := filepath.Join(base, "root")
	cfg, err := Load(write(t, `{"hooks":[{"name":"where","paths":["*"],"run":["sh","-c","test -d \"$MESH_ROOT\" && printf '%s' \"$MESH_ROOT\" > `+marker+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, failures := cfg.Run(context.Background(), "h1/managed", []string{"a"}); len(failures) != 0 {
		t.Fatalf("the hook failed: %v (MESH_ROOT not a directory from where the hook runs?)", failures)
	}
	got, _ := os.ReadFile(marker)
	if !filepath.IsAbs(string(got)) || filepath.Base(string(got)) != "managed" {
		t.Fatalf("MESH_ROOT = %q, want the root's absolute path", got)
	}
}

// TestRunAnyway: a pending path goes along with changes whose batch runs every hook
// it has; one with a hook the changes do not run, or with none, does not.
func TestRunAnyway(t *testing.T) {
	c := Config{Hooks: []Hook{
		{Name: "app", Paths: []string{"etc/app/*"}},
		{Name: "all-etc", Paths: []string{"etc/*", "etc/app/*"}},
		{Name: "srv", Paths: []string{"srv/*"}},
	}}
	got := c.RunAnyway([]string{"etc/app/a.conf", "etc/x.conf", "srv/y", "var/z"}, []string{"etc/app/b.conf"})
	if want := []string{"etc/app/a.conf", "etc/x.conf"}; !slices.Equal(got, want) {
		t.Fatalf("RunAnyway: %v, want %v", got, want)
	}
}

// TestAHookRunsInTheFileSystemRoot: a hook runs in /, not in the managed root, where
// a declaration (or a user who may write there) could put files a command takes
// from its working directory: the lib.sh a script sources as ./lib.sh, the
// json/__init__.py of `python3 -m json.tool`, run as root. A command under the root
// named relatively (bin/show) still runs, and is told its own path as its argv[0].
// Before, hooks ran in the root, and the planted lib.sh ran.
func TestAHookRunsInTheFileSystemRoot(t *testing.T) {
	root, out := t.TempDir(), filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(filepath.Join(root, "lib.sh"), []byte("echo planted-by-a-declaration >> "+out+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh to copy under the root:", err)
	}
	if err := os.Mkdir(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "show"), sh, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(write(t, `{"hooks":[
		{"name":"sources","paths":["etc/*"],"run":["sh","-c","if [ -r ./lib.sh ]; then . ./lib.sh; fi; pwd >> `+out+`"]},
		{"name":"in-root","paths":["etc/*"],"run":["bin/show","-c","printf '%s\\n' \"$0\" >> `+out+`; pwd >> `+out+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, failures := cfg.Run(context.Background(), root, []string{"etc/a.conf"}); len(failures) != 0 {
		t.Fatalf("failures: %v", failures)
	}
	got, _ := os.ReadFile(out)
	if want := "/\n" + filepath.Join(root, "bin", "show") + "\n/\n"; string(got) != want {
		t.Fatalf("the hooks wrote %q, want %q: both run in /, nothing of the root's lib.sh, and bin/show told its path", got, want)
	}
}

// TestAHookPrintingASeedOrAKeyHidesThem (audit of secrets, finding 2): the output of
// a failing hook is reported to the control plane, which keeps it in its replicated
// state; only tokens were hidden. A seed and a PEM private key the hook prints (a
// config check quoting what it choked on) are hidden too; the reason is kept.
func TestAHookPrintingASeedOrAKeyHidesThem(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	seed, _ := kp.Seed()
	keyPEM := "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIPrivateKeyMaterialXYZ\n-----END PRIVATE KEY-----"
	script := "echo 'cannot load " + string(seed) + "'; printf '%s\\n' '" + keyPEM + "'; echo 'bad key' >&2; exit 1"
	cfg, err := Load(write(t, `{"hooks":[{"name":"check","paths":["x"],"run":["sh","-c",`+strconv.Quote(script)+`]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	_, failures := cfg.Run(context.Background(), t.TempDir(), []string{"x"})
	if len(failures) != 1 {
		t.Fatalf("failures %v", failures)
	}
	out := failures[0].Error()
	for _, leak := range []string{string(seed), "PrivateKeyMaterial"} {
		if strings.Contains(out, leak) {
			t.Errorf("the failure holds %q:\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "bad key") || !strings.Contains(out, "cannot load") {
		t.Errorf("the failure lost the hook's reason:\n%s", out)
	}
}

// TestBoundKeepsWhatEachHookIsTold: Bound keeps, for each hook, the paths its
// MESH_CHANGED carries and the one past them, so a hook run with what is kept is
// still told some paths did not fit; paths no hook matches go; a list within that is
// kept whole.
func TestBoundKeepsWhatEachHookIsTold(t *testing.T) {
	cfg, err := Load(write(t, `{"hooks":[{"name":"etc","paths":["etc/*"],"run":["true"]},{"name":"srv","paths":["srv/*"],"run":["true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var etc, srv []string
	for i := range 1000 {
		etc = append(etc, fmt.Sprintf("etc/%04d-%s", i, strings.Repeat("x", 150)))
	}
	for i := range 10 {
		srv = append(srv, fmt.Sprintf("srv/%d", i))
	}
	all := slices.Concat(etc, srv, []string{"var/none", "etc/0001-" + strings.Repeat("x", 150)})
	kept := cfg.Bound(all)
	var keptEtc []string
	for _, p := range kept {
		if strings.HasPrefix(p, "etc/") {
			keptEtc = append(keptEtc, p)
		}
	}
	listed, omitted := changedList(keptEtc)
	if omitted != 1 || len(listed) > maxChanged || len(keptEtc) >= len(etc) {
		t.Fatalf("etc: %d of %d kept, %d bytes listed, %d omitted; want what 64 KiB lists and one more", len(keptEtc), len(etc), len(listed), omitted)
	}
	if !slices.Equal(keptEtc, etc[:len(keptEtc)]) {
		t.Fatal("etc: the paths kept are not the first ones")
	}
	if got := kept[len(keptEtc):]; !slices.Equal(got, srv) {
		t.Fatalf("srv: kept %v, want all of %v, and var/none (no hook's) dropped", got, srv)
	}
	if small := cfg.Bound(append(slices.Clone(srv), "etc/a")); !slices.Equal(small, append([]string{"etc/a"}, srv...)) {
		t.Fatalf("a short list was not kept whole: %v", small)
	}
}

// TestAHooksFileInTheRootUnderAnotherNameIsRefused: the root reached by a second
// name that no link explains (a bind mount here; another letter case on a file
// system that folds it, as macOS's and Windows' do, is the same to the check) is
// still the root. Judged by name alone, --hooks ALIAS/hooks.json beside --root ROOT
// was taken, and a declaration writing hooks.json chose the commands run as root.
func TestAHooksFileInTheRootUnderAnotherNameIsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to bind-mount the managed root under a second name")
	}
	base := t.TempDir()
	root, alias := filepath.Join(base, "root"), filepath.Join(base, "alias")
	for _, d := range []string{filepath.Join(root, "meshhost"), alias} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("mount", "--bind", root, alias).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", alias).Run() })
	for _, file := range []string{filepath.Join(alias, "hooks.json"), filepath.Join(alias, "meshhost", "hooks.json"),
		filepath.Join(alias, "not", "yet", "hooks.json")} {
		if err := CheckApart(file, root); !errors.Is(err, ErrInRoot) {
			t.Errorf("--hooks %s --root %s (the same directory): %v, want ErrInRoot", file, root, err)
		}
	}
	if err := CheckApart(filepath.Join(base, "hooks.json"), root); err != nil {
		t.Errorf("a hooks file beside the root and its second name: %v, want it taken", err)
	}
}

// TestAHooksFileRefusalIsSaidInItsTerms (a walkthrough): a hooks file with a
// command given as a string was refused as "json: cannot unmarshal string into Go
// struct field Hook.hooks.run of type []string", an unknown member as Go's "json:
// unknown field", a syntax error by byte offset, and a timeout without its unit
// as "must be a duration". Each says where (line and column) and what the member
// takes.
func TestAHooksFileRefusalIsSaidInItsTerms(t *testing.T) {
	for name, c := range map[string]struct{ content, want string }{
		"run as a string": {"{\"hooks\": [\n  {\"name\": \"a\", \"paths\": [\"x\"],\n   \"run\": \"systemctl reload app\"}]}",
			`"run" at line 3 is a JSON string: it takes an argv, a list of strings run without a shell, such as ["/usr/bin/systemctl", "reload", "app"]`},
		"paths as a string":  {`{"hooks":[{"name":"a","paths":"etc/*","run":["true"]}]}`, `"paths" at line 1 is a JSON string: it takes a list of patterns`},
		"hooks as an object": {`{"hooks":{"name":"a"}}`, `"hooks" at line 1 is a JSON object: it takes a list of hooks`},
		// An element of a list, said as such (a review: "run ... is a JSON number").
		"a number in run":        {`{"hooks":[{"name":"a","paths":["x"],"run":["systemctl",1]}]}`, `an element of "run" at line 1 is a JSON number: "run" takes an argv`},
		"unknown member":         {`{"hooks":[{"name":"a","path":["x"],"run":["true"]}]}`, `unknown member "path": the file holds "hooks", and each hook "name", "paths", "run" and "timeout"`},
		"syntax":                 {"{\"hooks\": [\n  {\"name\": \"a\" \"paths\": [\"x\"]}]}", "not valid JSON at line 2, column 16: invalid character '\"' after object key:value pair"},
		"timeout without a unit": {`{"hooks":[{"name":"a","paths":["x"],"run":["true"],"timeout":"30"}]}`, `timeout "30" must be a duration with its unit, more than 0 and up to 1h, such as "30s"`},
	} {
		_, err := Load(write(t, c.content))
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "Go struct") || strings.Contains(err.Error(), "json: unknown") {
			t.Errorf("%s: %v, want ErrConfig saying %q", name, err, c.want)
		}
	}
}
