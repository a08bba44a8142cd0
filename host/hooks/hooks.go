// Package hooks runs commands after declared files change, as the host's own local
// configuration says. A declaration never names a command: it can only change files,
// and whether a change runs anything is decided on the host, by a file the mesh cannot
// write. The format:
//
//	{"hooks":[{"name":"reload-app","paths":["etc/app/*.conf"],"run":["/usr/bin/systemctl","reload","app"],"timeout":"30s"}]}
//
// paths are path.Match patterns relative to the managed root; run is an argv, executed
// without a shell; each hook runs at most once per applied declaration, with the
// changed paths in MESH_CHANGED (newline-separated).
package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"mesh/host/jsonkeys"
	"mesh/host/redact"
	"mesh/host/statedir"
	"mesh/host/token"
)

// MaxConfigSize caps the hooks file.
const MaxConfigSize = 64 << 10

// DefaultTimeout bounds a hook without a timeout of its own.
const DefaultTimeout = 60 * time.Second

// Hook is one configured command.
type Hook struct {
	Name    string   `json:"name"`
	Paths   []string `json:"paths"`
	Run     []string `json:"run"`
	Timeout string   `json:"timeout,omitempty"`
	timeout time.Duration
}

// Config is the hooks file.
type Config struct {
	Hooks []Hook `json:"hooks"`
	// groupFile, when set (WithGroupFile), records the process group of the hook
	// that runs, for KillLeftover.
	groupFile string
	// beforeStart, when set by tests, is called between a hook's command check and
	// its start: where another user would change the command to win a race.
	beforeStart func(h Hook)
}

// WithGroupFile returns c recording, in the file at path while a hook runs, the
// process group the hook runs in: an agent killed (SIGKILL, a crash) cannot kill
// the group on its way out, and the agent started next finds it there
// (KillLeftover) instead of running the same hook beside it.
func (c Config) WithGroupFile(path string) Config {
	c.groupFile = path
	return c
}

// ErrConfig means the hooks file cannot be used; the agent refuses to start rather
// than run without the hooks the operator configured.
var ErrConfig = errors.New("hooks file")

// ErrTooLarge is Load's refusal of a file over MaxConfigSize, read no further; it
// matches ErrConfig too.
var ErrTooLarge = fmt.Errorf("%w: larger than %d bytes", ErrConfig, MaxConfigSize)

// ErrTruncated is Load's refusal of a file that ends before its JSON object does
// (empty, or cut short); it matches ErrConfig too.
var ErrTruncated = fmt.Errorf("%w: it ends before its JSON object does (empty or cut short)", ErrConfig)

// Load reads and checks a hooks file. It names commands the agent runs, as root
// where the agent is, so it is read as sudo reads sudoers: only if neither it nor a
// directory above it can be changed by another user than the agent's and root
// (statedir.OpenFile), and only as a regular file.
func Load(file string) (Config, error) {
	f, err := statedir.OpenFile("the hooks file", file)
	if errors.Is(err, fs.ErrNotExist) {
		// Named as given: the lstat's own words named the path cleaned
		// ("lstat nope.json" for ./nope.json), as none was given.
		return Config{}, fmt.Errorf("%w: %s does not exist: write it (docs/declarations.md, \"Hooks: commands after a change, from the host only\"), or run without --hooks", ErrConfig, file)
	}
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer f.Close()
	// Never more than one byte past the cap is read, however large the file.
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("%w %s: %w", ErrConfig, file, err)
	}
	c, err := parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", file, err)
	}
	return c, nil
}

// ErrInRoot is CheckApart's refusal of a hooks file inside the managed root.
var ErrInRoot = errors.New("the hooks file must not be inside the managed root")

// CheckApart refuses a hooks file that is in the managed root, or whose link leads
// there (ErrInRoot), links resolved as far as the paths exist: a declaration names
// any path in the root, and a hooks file it wrote there (root's, 0644, as Load
// wants it) would name the commands the agent runs, as root, from its next start.
// The file is judged both where its name is (the directory holding it, resolved)
// and where it leads, and each directory on the way by identity too
// (statedir.Within): the root under another name is the root. Whether the file exists is Load's to say; one not there yet
// is refused too, as a declaration could make it.
func CheckApart(file, root string) error {
	r, err := statedir.Resolved(root)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return err
	}
	dir, err := statedir.Resolved(filepath.Dir(abs))
	if err != nil {
		return err
	}
	leads, err := leadsTo(abs)
	if err != nil {
		return err
	}
	for _, p := range []string{filepath.Join(dir, filepath.Base(abs)), leads} {
		if statedir.Within(p, r) {
			resolved := ""
			if p != abs {
				resolved = " (" + p + ", links resolved)"
			}
			return fmt.Errorf("%w: --hooks %s%s is in --root %s, where a declaration could replace it and choose the commands the agent runs as root; choose places apart (/etc/meshhost/hooks.json, with a root that does not hold it)", ErrInRoot, file, resolved, root)
		}
	}
	return nil
}

// leadsTo is where p leads, links resolved, a link to nothing (yet) included:
// statedir.Resolved stops at a path that does not exist, and would judge such a
// link where it is, not where what a declaration makes there would be read.
func leadsTo(p string) (string, error) {
	for range 40 { // as Linux's limit on links in a row
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			break
		}
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			// From the directory the link is in, its own links resolved: "../x"
			// through a linked directory is not the lexical parent's x.
			dir, err := statedir.Resolved(filepath.Dir(p))
			if err != nil {
				return "", err
			}
			target = filepath.Join(dir, target)
		}
		p = target
	}
	return statedir.Resolved(p)
}

// parse decodes and checks a hooks file's content: one JSON object, nothing after it
// but white space, no unknown field. Its errors match ErrConfig; content over the cap
// is ErrTooLarge, content cut short ErrTruncated.
func parse(data []byte) (Config, error) {
	if len(data) > MaxConfigSize {
		return Config{}, ErrTooLarge
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return Config{}, ErrTruncated
	}
	if trimmed[0] != '{' {
		return Config{}, fmt.Errorf("%w: it is not a JSON object", ErrConfig)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c Config
	err := dec.Decode(&c)
	if err == nil {
		// Anything but white space after the object is trailing data: dec.More would
		// take a stray '}' or ']' for the end of an enclosing value and miss it.
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("trailing data after the JSON object")
		} else {
			// A member twice (encoding/json keeps the last: the command run
			// would be the one a reader of the file may not have seen) or a
			// name in another case ("Command") is refused, not guessed at.
			err = jsonkeys.Check(data, &c)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Config{}, ErrTruncated
	default:
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, saidAs{decodeReason(data, err), err})
	}
	return c, c.validate()
}

// decodeReason says what encoding/json found wrong with a hooks file in its
// terms, not Go's ("cannot unmarshal string into Go struct field Hook.hooks.run
// of type []string", a walkthrough): where, by line and column, and what each
// member takes.
func decodeReason(data []byte, err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := lineAndColumn(data, syn.Offset)
		return fmt.Sprintf("not valid JSON at line %d, column %d: %s", line, col, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		// (Offset is where the value ends: its line, not a column within it.)
		line, _ := lineAndColumn(data, typ.Offset)
		field := typ.Field[strings.LastIndexByte(typ.Field, '.')+1:]
		takes := map[string]string{
			"hooks":   `a list of hooks, [{"name": …, "paths": […], "run": […]}, …]`,
			"name":    "a string",
			"paths":   `a list of patterns, such as ["etc/app/*.conf"]`,
			"run":     `an argv, a list of strings run without a shell, such as ["/usr/bin/systemctl", "reload", "app"]`,
			"timeout": `a duration with its unit, such as "30s"`,
		}[field]
		if typ.Field == "" || takes == "" {
			return fmt.Sprintf("a JSON %s where it does not belong, at line %d", typ.Value, line)
		}
		if typ.Type != nil && typ.Type.Kind() != reflect.Slice && (field == "hooks" || field == "paths" || field == "run") {
			// An element of the list, not the list ("run": ["systemctl", 1]).
			return fmt.Sprintf("an element of %q at line %d is a JSON %s: %q takes %s", field, line, typ.Value, field, takes)
		}
		return fmt.Sprintf("%q at line %d is a JSON %s: it takes %s", field, line, typ.Value, takes)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Sprintf("unknown member %s: the file holds \"hooks\", and each hook \"name\", \"paths\", \"run\" and \"timeout\"", name)
	}
	return err.Error()
}

// saidAs is err said in other words: errors.Is and errors.As still reach it.
type saidAs struct {
	text string
	err  error
}

func (e saidAs) Error() string { return e.text }
func (e saidAs) Unwrap() error { return e.err }

// lineAndColumn is where byte offset off of data is, both counted from 1.
func lineAndColumn(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:])
	return line, max(col, 1)
}

func (c *Config) validate() error {
	names := map[string]bool{}
	for i := range c.Hooks {
		h := &c.Hooks[i]
		where := fmt.Sprintf("hook %d (%q)", i, h.Name)
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: %s: %s", ErrConfig, where, fmt.Sprintf(format, args...))
		}
		if h.Name == "" || names[h.Name] {
			return bad("every hook needs a unique name")
		}
		names[h.Name] = true
		if len(h.Paths) == 0 {
			return bad("no paths")
		}
		for _, p := range h.Paths {
			if _, err := path.Match(p, ""); err != nil || strings.HasPrefix(p, "/") || p == "" {
				return bad("path pattern %q is not a relative path.Match pattern", p)
			}
		}
		if len(h.Run) == 0 || h.Run[0] == "" {
			return bad("run must be a non-empty argv")
		}
		h.timeout = DefaultTimeout
		if h.Timeout != "" {
			d, err := time.ParseDuration(h.Timeout)
			if err != nil || d <= 0 || d > time.Hour {
				return bad("timeout %q must be a duration with its unit, more than 0 and up to 1h, such as \"30s\"", h.Timeout)
			}
			h.timeout = d
		}
	}
	return nil
}

// ErrCommand is Check's finding that a hook's command cannot be run now.
var ErrCommand = errors.New("hook command cannot be run")

// ErrPattern is a finding of Check: a hook's path pattern that matches no
// declared path as written (one that is not clean, as "./etc/*" or "etc/"), or
// that reads as recursive and is not ("etc/**" is "etc/*": a * stops at a /).
var ErrPattern = errors.New("hook path pattern does not match as written")

// Warning is what to log of a finding of Check: said by its kind (a command that
// exists but another user could change was told "unless it is installed first", a
// walkthrough).
func Warning(err error) string {
	if errors.Is(err, ErrPattern) {
		return "a hook's path pattern does not match what it seems to: the hook does not run for the paths it seems to name until its hooks file is mended"
	}
	return "a hook's command cannot be run now: the hook will fail when it runs unless this is mended first (the command installed, or its owner or mode set right)"
}

// Check looks, without running anything, whether each hook's command can be run
// now: found (on the hooks' PATH for a bare name, under root for a relative path)
// and executable, and not a file another user could change (safeCommand). It
// returns one error per hook that cannot, each matching ErrCommand. A finding is
// not a refusal: the command may come later (a package installed, a script a
// declaration writes under the root) or be mended, and the hook fails only when it
// runs; the agent says so as it starts, rather than at the first change, when a
// service restart is due. Patterns that do not match as written are found too
// (ErrPattern): a hooks file in use before this check must not stop the agent.
func (c Config) Check(root string) []error {
	var out []error
	pathEnv := hookPath()
	for _, h := range c.Hooks {
		for _, p := range h.Paths {
			switch {
			case slices.Contains(strings.Split(p, "/"), ".."):
				out = append(out, fmt.Errorf("%w: hook %q: path pattern %q never matches: declared paths have no \"..\" (patterns are under the managed root)", ErrPattern, h.Name, p))
			case path.Clean(p) == ".":
				out = append(out, fmt.Errorf("%w: hook %q: path pattern %q never matches: it names the managed root itself, never a declared file; write %q for the files directly in it", ErrPattern, h.Name, p, "*"))
			case path.Clean(p) != p:
				// A directory's pattern ("etc/") is meant for the files in it.
				fix := path.Clean(p)
				if strings.HasSuffix(p, "/") && fix != "." {
					fix += "/*"
				}
				out = append(out, fmt.Errorf("%w: hook %q: path pattern %q never matches: declared paths are clean (no \"./\", \"//\" or trailing \"/\"); write %q", ErrPattern, h.Name, p, fix))
			case strings.Contains(p, "**"):
				out = append(out, fmt.Errorf("%w: hook %q: path pattern %q matches one level only: a * stops at a /, so ** is *; write one * for each level (such as %q)", ErrPattern, h.Name, p, "etc/app/*/*.conf"))
			}
		}
		if err := runnable(h.Run[0], root, pathEnv); err != nil {
			out = append(out, fmt.Errorf("%w: hook %q: %s: %w", ErrCommand, h.Name, h.Run[0], err))
		} else if _, err := safeCommand(h, root); err != nil {
			out = append(out, fmt.Errorf("%w: hook %q: %w", ErrCommand, h.Name, err))
		}
	}
	return out
}

// safeCommand returns the file a hook runs (as exec would resolve its command),
// refusing one another user could change: it and every directory above it must
// pass the hooks file's own rules (statedir.CheckFile). The agent runs it as root: a
// command under /opt/app that the app's user may write, or a script in a directory
// of the managed root others may write, would be theirs to run as root. Checked at
// each run, as the file may change after the agent started, and the file checked is
// the one run: a command not found (or not executable) at the check is not run,
// rather than left to exec to look up again, when a user who may write its directory
// could have put one there, or made one executable, in between.
func safeCommand(h Hook, root string) (string, error) {
	pathEnv := hookPath()
	p, err := resolve(h.Run[0], root, pathEnv)
	if err != nil {
		if why := runnable(h.Run[0], root, pathEnv); why != nil {
			err = why
		}
		return "", fmt.Errorf("not run: %s: %w", h.Run[0], err)
	}
	if _, err := statedir.CheckFile("the command of hook "+strconv.Quote(h.Name), p); err != nil {
		return "", fmt.Errorf("not run: %w", err)
	}
	return p, nil
}

// hookPath is the PATH a hook's bare command name is looked up on.
func hookPath() string {
	for _, kv := range hookEnv(os.Environ()) {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return defaultPath
}

// resolve is the file exec runs for name: the first candidate that is an
// executable regular file.
func resolve(name, root, pathEnv string) (string, error) {
	for _, p := range candidates(name, root, pathEnv) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// candidates are the files exec would try for name, in order.
func candidates(name, root, pathEnv string) []string {
	switch {
	case strings.HasPrefix(name, "/"):
		return []string{name}
	case strings.Contains(name, "/"):
		return []string{path.Join(root, name)}
	}
	var out []string
	for _, dir := range strings.Split(pathEnv, ":") {
		// A relative entry (".", "bin") is skipped, as exec's LookPath refuses
		// what it finds there (ErrDot): the file checked would be the one under
		// the agent's working directory, and the one run the one under the hook's.
		if strings.HasPrefix(dir, "/") {
			out = append(out, path.Join(dir, name))
		}
	}
	return out
}

// runnable reports why name, as exec would resolve it for a hook, cannot be run.
func runnable(name, root, pathEnv string) error {
	var first error
	for _, p := range candidates(name, root, pathEnv) {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case !fi.Mode().IsRegular():
			err = fmt.Errorf("%s is not a regular file", p)
		case fi.Mode().Perm()&0o111 == 0:
			err = fmt.Errorf("%s is not executable (mode %s)", p, fi.Mode().Perm())
		default:
			return nil
		}
		if first == nil && !errors.Is(err, os.ErrNotExist) {
			first = err
		}
	}
	if first != nil {
		return first
	}
	switch {
	case strings.HasPrefix(name, "/"):
		return errors.New("not found")
	case strings.Contains(name, "/"):
		// Said where it was looked for: "not found" alone left the operator
		// looking in the agent's working directory (a walkthrough).
		return fmt.Errorf("not found at %s (a relative command is under the managed root)", path.Join(root, name))
	}
	return fmt.Errorf("not found on the hooks' PATH (%s)", pathEnv)
}

// Failure is a hook that did not succeed.
type Failure struct {
	Hook string
	// Paths are the changed paths it ran for: what it is owed until it succeeds.
	Paths  []string
	Err    error
	Output string
}

func (f Failure) Error() string {
	msg := fmt.Sprintf("hook %s: %v", f.Hook, f.Err)
	if out := strings.TrimSpace(f.Output); out != "" {
		msg += ": " + out
	}
	return msg
}

// ErrLeftBehind is a hook's failure when it exited 0 but a process it started
// still held its output killGrace later: that process is killed with the hook's
// process group, as everything a hook leaves there is, so what it started (a
// daemon run in the hook's background) is not running. It is a failure: the hook
// did not leave the host as it meant to.
var ErrLeftBehind = errors.New("it exited 0, but left a process holding its output, which was killed with the hook's process group as everything a hook leaves behind is: start services through systemctl (or systemd-run), not in the hook's background, or have the hook wait for what it starts")

// killGrace is how long after a hook exited or timed out its output pipes may stay
// open (a background child still holding them) before the agent stops waiting for
// them.
const killGrace = 2 * time.Second

// Matching returns the paths of changed that some hook runs for.
func (c Config) Matching(changed []string) []string {
	var out []string
	for _, p := range changed {
		for _, h := range c.Hooks {
			if h.matches(p) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// RunAnyway returns the paths of pending whose every hook runs anyway for changed
// (a path of changed matches it too): a batch of changed takes them along at no
// cost, and its outcome is theirs.
func (c Config) RunAnyway(pending, changed []string) []string {
	runs := map[string]bool{}
	for _, h := range c.Hooks {
		for _, p := range changed {
			if h.matches(p) {
				runs[h.Name] = true
				break
			}
		}
	}
	var out []string
	for _, p := range pending {
		some, all := false, true
		for _, h := range c.Hooks {
			if h.matches(p) {
				some, all = true, all && runs[h.Name]
			}
		}
		if some && all {
			out = append(out, p)
		}
	}
	return out
}

func (h Hook) matches(p string) bool {
	for _, pat := range h.Paths {
		if ok, _ := path.Match(pat, p); ok {
			return true
		}
	}
	return false
}

// Run runs, in order, every hook whose patterns match a changed path, once each, and
// returns the failures. A failure keeps the last 4 KiB of the hook's output. Each hook runs in a
// process group of its own: at its timeout the whole group is killed, children it
// left in the background included, and the agent waits at most killGrace more for
// its output, so no hook can hold the caller past its timeout. What is left in the
// group when the hook exits is killed then (ErrLeftBehind when it held the output).
func (c Config) Run(ctx context.Context, root string, changed []string) (ran []string, failures []Failure) {
	return c.run(ctx, root, changed, false)
}

// RunCut is Run for paths cut short (the agent kept what MESH_CHANGED carries of
// the paths owed to a hook failing for long: Bound): every hook that runs is told
// some paths were left out, MESH_CHANGED_OMITTED at least 1, however few it is
// given; how many is no longer known.
func (c Config) RunCut(ctx context.Context, root string, changed []string) (ran []string, failures []Failure) {
	return c.run(ctx, root, changed, true)
}

func (c Config) run(ctx context.Context, root string, changed []string, cut bool) (ran []string, failures []Failure) {
	// MESH_ROOT is absolute: the command runs in hookDir, where a relative one
	// (`--root ./h1/managed`) names a directory that is not there.
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	for _, h := range c.Hooks {
		var hit []string
		for _, p := range changed {
			if h.matches(p) {
				hit = append(hit, p)
			}
		}
		if len(hit) == 0 {
			continue
		}
		if len(ran) == 0 {
			closeInherited()
		}
		ran = append(ran, h.Name)
		command, err := safeCommand(h, root)
		if err != nil {
			failures = append(failures, Failure{Hook: h.Name, Paths: hit, Err: err})
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, h.timeout)
		// The file checked, not the name looked up again (safeCommand); the
		// command sees the name it was given as its argv[0].
		if c.beforeStart != nil {
			c.beforeStart(h)
		}
		cmd := exec.CommandContext(hctx, command, h.Run[1:]...)
		cmd.Args[0] = h.Run[0]
		if strings.Contains(h.Run[0], "/") {
			// A path (bin/reload, under the root) is said as the file it is:
			// relative, it would name nothing from hookDir.
			cmd.Args[0] = command
		}
		ownGroup(hctx, cmd)
		cmd.WaitDelay = killGrace
		cmd.Dir = hookDir
		listed, omitted := changedList(hit)
		if cut {
			omitted = max(omitted, 1)
		}
		cmd.Env = append(hookEnv(os.Environ()), "MESH_CHANGED="+listed, "MESH_ROOT="+root)
		if omitted > 0 {
			cmd.Env = append(cmd.Env, "MESH_CHANGED_OMITTED="+strconv.Itoa(omitted))
		}
		var out outputTail
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Start()
		if err == nil {
			c.recordGroup(cmd)
			err = cmd.Wait()
		}
		timedOut := hctx.Err() == context.DeadlineExceeded
		if errors.Is(err, exec.ErrWaitDelay) && !timedOut && cmd.ProcessState != nil && cmd.ProcessState.Success() {
			// Exited 0, but something it started still held its output (a daemon
			// started in the background): exec's own words say nothing a person can
			// act on, and what it started is killed below with the group.
			err = ErrLeftBehind
		}
		cancel()
		// A hook that exits but leaves a child in its group: the child goes too, or it
		// would outlive the hook and act after the agent reported the hook done.
		killGroup(cmd)
		c.forgetGroup()
		if err != nil {
			if timedOut {
				err = fmt.Errorf("timed out after %s", h.timeout)
			}
			// The output becomes the node's reported error: a token a hook printed
			// (from a file, a command) does not leave the machine with it.
			failures = append(failures, Failure{Hook: h.Name, Paths: hit, Err: err, Output: out.text()})
		}
	}
	return ran, failures
}

// hookDir is where a hook runs: not the managed root, where a declaration (or a
// user who may write a directory of it) could put files that a command takes from
// its working directory (`python3 -m json.tool` a json/__init__.py, a script
// sourcing ./lib.sh), run as root. A hook finds the root in MESH_ROOT.
const hookDir = "/"

// maxChanged bounds MESH_CHANGED. Linux starts no program with an environment
// string over 128 KiB (MAX_ARG_STRLEN: "argument list too long"), and the paths
// of one declaration can add up to more (1000 paths of 150 bytes), so such a hook
// could never run. Half of that leaves room for the rest of the environment.
const maxChanged = 64 << 10

// Bound returns paths, sorted, cut to what the hooks' MESH_CHANGED can carry: for
// each hook, the paths it matches up to maxChanged, and the one that goes past it.
// Paths no hook matches are dropped: no hook would run for them. What was cut is the
// caller's to say: the agent runs hooks with RunCut until none is owed. The agent
// keeps the paths of a failed hook until it runs again and succeeds; one failing for
// weeks while declarations changed new paths each time kept every one of them, in
// memory and in its applied state, rewritten at every apply.
func (c Config) Bound(paths []string) []string {
	sorted := slices.Sorted(slices.Values(paths))
	size := make([]int, len(c.Hooks))
	var out []string
	for _, p := range slices.Compact(sorted) {
		keep := false
		for i, h := range c.Hooks {
			if h.matches(p) && size[i] <= maxChanged {
				keep = true
			}
		}
		if !keep {
			continue
		}
		for i, h := range c.Hooks {
			if h.matches(p) {
				// As changedList measures: a newline before all but the first.
				if size[i] > 0 {
					size[i]++
				}
				size[i] += len(p)
			}
		}
		out = append(out, p)
	}
	return out
}

// changedList is MESH_CHANGED: the paths one a line, as many whole ones as fit in
// maxChanged, and how many did not fit (MESH_CHANGED_OMITTED), so that a hook
// that acts on each path can tell a partial list and act on all instead.
func changedList(paths []string) (listed string, omitted int) {
	size := 0
	for i, p := range paths {
		add := len(p)
		if i > 0 {
			add++
		}
		if size+add > maxChanged {
			return strings.Join(paths[:i], "\n"), len(paths) - i
		}
		size += add
	}
	return strings.Join(paths, "\n"), 0
}

// defaultPath is a hook's PATH when the agent has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hookEnv is what a hook inherits of the agent's environment: the variables that
// make a command behave as on the machine's shell (PATH, HOME, the locale, TZ,
// TMPDIR, the user's names), and nothing else. The agent's own environment may
// hold MESH_TOKEN (how enrol reads a token), systemd's CREDENTIALS_DIRECTORY and
// NOTIFY_SOCKET, or whatever its unit sets: a hook's output is reported to the
// control plane when it fails, and a hook that printed its environment sent them
// there. A hook that needs more is given it in its command (/usr/bin/env X=1 cmd).
func hookEnv(environ []string) []string {
	out := make([]string, 0, 8)
	hasPath := false
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			hasPath = true
		case k == "HOME", k == "LANG", k == "LANGUAGE", k == "TZ", k == "TMPDIR", k == "USER", k == "LOGNAME",
			strings.HasPrefix(k, "LC_"):
		default:
			continue
		}
		out = append(out, kv)
	}
	if !hasPath {
		out = append(out, "PATH="+defaultPath)
	}
	return out
}

// maxOutput is how much of a hook's output is kept for its failure: the end,
// where a failing command says why.
const maxOutput = 4096

// outputTail keeps the end of what is written to it: maxOutput bytes, and room
// before them for a token cut by the start of what is kept (see text). It neither
// is nor embeds a bytes.Buffer: exec copies a command's output with io.Copy, which
// prefers a writer's ReadFrom, and a Buffer's takes everything, so a hook printing
// gigabytes had them all held in the agent's memory, its log and its state.
type outputTail struct {
	buf []byte
	cut bool // something written before buf was dropped
}

const tailKeep = maxOutput + token.MaxEncodedLen

func (t *outputTail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= tailKeep {
		t.cut = t.cut || len(t.buf) > 0 || len(p) > tailKeep
		t.buf = append(t.buf[:0], p[len(p)-tailKeep:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - tailKeep; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.cut = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// text is the output to report: its last maxOutput bytes at most, tokens, seeds and
// private keys hidden (redact.Secrets).
// Secrets are hidden before the last cut, since a cut inside a token leaves its
// secret without the head token.HideTokens knows a token by, and a cut inside a
// private key leaves its body without its BEGIN line; what the first cut, made
// while writing, left of a token (the run before the first space, line break or
// quote, never longer than a token) is dropped, and what it left of a private key,
// up to its END line, is hidden (redact.CutSecrets).
func (t *outputTail) text() string {
	kept := t.buf
	hide := redact.Secrets
	if t.cut {
		i := bytes.IndexAny(kept, " \t\r\n\"'`")
		if i < 0 || i >= token.MaxEncodedLen {
			i = min(len(kept), token.MaxEncodedLen) - 1
		}
		kept, hide = kept[i+1:], redact.CutSecrets
	}
	s := hide(string(kept))
	if len(s) > maxOutput {
		i := len(s) - maxOutput
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		s, t.cut = s[i:], true
	}
	if t.cut {
		return "… " + s
	}
	return s
}
