package integration

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/dist/pack"
)

// ourMaintainer is the Maintainer field of the packages dist/nfpm builds: a package
// of that name with another maintainer is someone else's and is left alone.
const ourMaintainer = "mesh maintainers <mesh@localhost>"

// packageState is what dpkg knows of pkg: its status abbreviation ("ii"
// installed, "rc" removed with its scripts kept) and its Maintainer; both empty
// when dpkg never heard of it.
func packageState(pkg string) (status, maintainer string) {
	out, err := exec.Command("dpkg-query", "-W", "-f=${db:Status-Abbrev}|${Maintainer}", pkg).Output()
	if err != nil {
		return "", ""
	}
	status, maintainer, _ = strings.Cut(string(out), "|")
	return strings.TrimSpace(status), maintainer
}

// installedMaintainer is the Maintainer of an installed package, or "".
func installedMaintainer(pkg string) string {
	status, m := packageState(pkg)
	if !strings.HasPrefix(status, "i") {
		return ""
	}
	return m
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// wantDir checks a directory's mode and owner.
func wantDir(t *testing.T, path string, mode os.FileMode, owner string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if !fi.IsDir() || fi.Mode().Perm() != mode {
		t.Errorf("%s: %v, want a directory of mode %v", path, fi.Mode(), mode)
	}
	u, err := user.Lookup(owner)
	if err != nil {
		t.Errorf("user %s: %v", owner, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if strconv.Itoa(int(st.Uid)) != u.Uid || strconv.Itoa(int(st.Gid)) != u.Gid {
		t.Errorf("%s: owner %d:%d, want %s (%s:%s)", path, st.Uid, st.Gid, owner, u.Uid, u.Gid)
	}
}

func wantFile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
		t.Errorf("%s: %v, want a file of mode %v", path, fi.Mode(), mode)
	}
}

func gone(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		t.Errorf("%s is still there after dpkg -r", path)
	}
}

// TestPackages builds the .deb packages the way `task package` does, installs each
// with dpkg -i, checks the files, the user and the modes they made, verifies the
// installed units with systemd-analyze, and removes them again with dpkg -r. It
// changes this machine, so it runs only as root, and only where neither package is
// installed from elsewhere.
func TestPackages(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: dpkg -i writes /usr/bin, /lib/systemd/system and /var/lib and creates the meshctl user (CI runs as root)")
	}
	var analyze string
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query", "useradd", "systemd-analyze"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s is not installed: the packages are checked on Debian with systemd (.ci/run installs systemd)", tool)
		}
		if tool == "systemd-analyze" {
			analyze = p
		}
	}
	holdMachine(t, "packages")
	for _, pkg := range []string{"meshctl", "meshhost"} {
		switch status, m := packageState(pkg); {
		case status == "" || status == "un" || status == "pn":
		case m == ourMaintainer:
			// Left behind by an interrupted run of this test.
			mustRun(t, "dpkg", "--purge", pkg)
		default:
			t.Skipf("a package %s by %q is known to dpkg here (%s); not replacing it", pkg, m, status)
		}
	}
	for _, p := range []string{"/usr/bin/meshctl", "/usr/bin/meshhost"} {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("%s exists and belongs to no package of ours; not replacing it", p)
		}
	}
	_, userErr := user.Lookup("meshctl")
	userExisted := userErr == nil
	var made []string
	for _, d := range []string{"/var/lib/meshctl", "/var/lib/meshhost", "/srv/mesh", "/etc/meshhost"} {
		if _, err := os.Lstat(d); err != nil {
			made = append(made, d)
		}
	}
	t.Cleanup(func() {
		for _, pkg := range []string{"meshctl", "meshhost"} {
			if _, m := packageState(pkg); m == ourMaintainer {
				_ = exec.Command("dpkg", "--purge", pkg).Run()
			}
		}
		for _, d := range made {
			os.Remove(d) // only if empty: never someone's state
		}
		if !userExisted {
			_ = exec.Command("userdel", "meshctl").Run()
			_ = exec.Command("groupdel", "meshctl").Run()
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	debs, err := pack.Build(ctx, pack.Options{Root: moduleDir(t), Out: t.TempDir(), Meshctl: bin.Meshctl, Meshhost: bin.Meshhost})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %v in %s", debs, time.Since(start).Round(time.Millisecond))
	if len(debs) != 2 {
		t.Fatalf("built %v, want two packages", debs)
	}
	// A binary linked against glibc does not start on an older one ("GLIBC_2.34 not
	// found"): its package must say which libc6 it needs, so that dpkg refuses it.
	for i, b := range []string{bin.Meshctl, bin.Meshhost} {
		f, err := elf.Open(b)
		if err != nil {
			t.Fatal(err)
		}
		libs, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		depends := strings.TrimSpace(mustRun(t, "dpkg-deb", "-f", debs[i], "Depends"))
		if len(libs) > 0 && !regexp.MustCompile(`^libc6 \(>= 2\.[0-9]+\)$`).MatchString(depends) {
			t.Errorf("%s: Depends %q, but the binary needs %v: want libc6 (>= 2.N)", filepath.Base(debs[i]), depends, libs)
		}
	}

	for _, deb := range debs {
		out := mustRun(t, "dpkg", "-i", deb)
		if !strings.Contains(out, "is installed. Next steps") {
			t.Errorf("dpkg -i %s printed no post-install note:\n%s", filepath.Base(deb), out)
		}
	}

	// meshctl: the binary, its unit and completions, its user and data directory.
	wantFile(t, "/usr/bin/meshctl", 0o755)
	wantFile(t, "/lib/systemd/system/meshctl.service", 0o644)
	wantFile(t, "/usr/share/doc/meshctl/NEXT-STEPS", 0o644)
	// needrestart must not restart every control node at once after an upgrade.
	wantFile(t, "/etc/needrestart/conf.d/meshctl.conf", 0o644)
	if conffiles := mustRun(t, "dpkg-query", "-W", "-f=${Conffiles}", "meshctl"); !strings.Contains(conffiles, "/etc/needrestart/conf.d/meshctl.conf") {
		t.Errorf("meshctl's conffiles: %q, want the needrestart override among them", conffiles)
	}
	// The documents the note points at.
	for _, pkg := range []string{"meshctl", "meshhost"} {
		for _, doc := range []string{"getting-started.md", "operations.md"} {
			wantFile(t, "/usr/share/doc/"+pkg+"/"+doc, 0o644)
		}
	}
	wantFile(t, "/usr/share/bash-completion/completions/meshctl", 0o644)
	wantFile(t, "/usr/share/zsh/vendor-completions/_meshctl", 0o644)
	wantFile(t, "/usr/share/fish/vendor_completions.d/meshctl.fish", 0o644)
	u, err := user.Lookup("meshctl")
	if err != nil {
		t.Fatalf("the meshctl user was not created: %v", err)
	}
	if uid, _ := strconv.Atoi(u.Uid); uid >= 1000 || u.HomeDir != "/var/lib/meshctl" {
		t.Errorf("meshctl user: uid %s home %s, want a system user (uid < 1000) at /var/lib/meshctl", u.Uid, u.HomeDir)
	}
	if shell := strings.TrimSpace(mustRun(t, "getent", "passwd", "meshctl")); !strings.HasSuffix(shell, ":/usr/sbin/nologin") {
		t.Errorf("meshctl user may log in: %s", shell)
	}
	wantDir(t, "/var/lib/meshctl", 0o700, "meshctl")
	if out := mustRun(t, "/usr/bin/meshctl", "version"); !strings.HasPrefix(out, "meshctl ") {
		t.Errorf("installed meshctl version: %q", out)
	}

	// meshhost: the binary, its units, its state directory, managed root and token
	// directory.
	wantFile(t, "/usr/bin/meshhost", 0o755)
	wantFile(t, "/lib/systemd/system/meshhost.service", 0o644)
	wantFile(t, "/lib/systemd/system/meshhost-enrol.service", 0o644)
	wantDir(t, "/var/lib/meshhost", 0o700, "root")
	wantDir(t, "/srv/mesh", 0o755, "root")
	wantDir(t, "/etc/meshhost", 0o700, "root")
	if out := mustRun(t, "/usr/bin/meshhost", "version"); !strings.HasPrefix(out, "meshhost ") {
		t.Errorf("installed meshhost version: %q", out)
	}

	// The units as installed, against the installed binaries.
	var installed []string
	for _, u := range unitNames() {
		installed = append(installed, "/lib/systemd/system/"+u)
	}
	verifyUnits(t, analyze, "", installed...)

	// Installed again over a bootstrapped control node and an enrolled host (an
	// upgrade): no first-day note, but that a running service keeps the previous
	// binary until restarted.
	stateFiles := []string{"/var/lib/meshctl/mesh.json", "/var/lib/meshhost/identity.json"}
	for _, f := range stateFiles {
		if err := os.WriteFile(f, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again := mustRun(t, "dpkg", "-i", debs[0], debs[1])
	for _, f := range stateFiles {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(again, "Next steps") || strings.Count(again, "keeps the previous binary until restarted") != 2 {
		t.Errorf("dpkg -i over a control node's and a host's state: want each package to say its service must be restarted, and no first-day note:\n%s", again)
	}

	out := mustRun(t, "dpkg", "-r", "meshctl", "meshhost")
	if strings.Contains(out, "left in place") {
		t.Errorf("dpkg -r found state it did not expect (nothing was bootstrapped or enrolled):\n%s", out)
	}
	for _, p := range append([]string{"/usr/bin/meshctl", "/usr/bin/meshhost", "/usr/share/bash-completion/completions/meshctl"}, installed...) {
		gone(t, p)
	}
	for _, pkg := range []string{"meshctl", "meshhost"} {
		if m := installedMaintainer(pkg); m != "" {
			t.Errorf("%s still installed after dpkg -r", pkg)
		}
	}

	// On a minimal image, which leaves /usr/share/doc out (dpkg path-exclude, as
	// slim container and cloud images do): the note's file is not there, and the
	// configure failed under set -e, leaving both packages half-configured and
	// every later apt run failing (a review). They install, saying the next steps.
	minimal := mustRun(t, "dpkg", "--path-exclude=/usr/share/doc/*", "-i", debs[0], debs[1])
	if strings.Count(minimal, "is installed. Next steps") != 2 {
		t.Errorf("dpkg -i on a system without /usr/share/doc: want each package's next steps said:\n%s", minimal)
	}
	for _, pkg := range []string{"meshctl", "meshhost"} {
		if status, _ := packageState(pkg); status != "ii" {
			t.Errorf("%s is %q after an install without /usr/share/doc, want ii", pkg, status)
		}
	}
	mustRun(t, "dpkg", "-r", "meshctl", "meshhost")
}

// holdMachine waits for, and holds until the test and its cleanups end, a lock of
// the whole machine named what: a test that installs system packages works on the
// machine's dpkg state and /etc, which two runs of this package side by side (CI
// and a developer's loop) would install and purge under each other.
func holdMachine(t *testing.T, what string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "mesh-test-"+what+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatalf("lock the machine for %s: %v", what, err)
	}
	t.Cleanup(func() { f.Close() }) // registered first, so it runs after every other cleanup
}
