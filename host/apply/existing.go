package apply

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"

	"mesh/host/atomicfile"
)

// readExisting returns what is at p now, p being declared (or, if not, a path
// managed before and to be removed): nil if nothing, its content, mode and owner
// if a regular file of at most MaxFileSize bytes, and a refusal if anything else,
// but for a path no longer declared a *leftInPlace if what is there is not a
// regular file.
func (r *run) readExisting(p string, declared bool) (*saved, error) {
	if err := r.hook("inspect", p); err != nil {
		return nil, err
	}
	return r.readExistingAt(r.dir(path.Dir(p)), p, path.Base(p), declared)
}

// readExistingByName is readExisting for a system where a file cannot be opened
// relative to its directory without following a link at its name (os.Root
// follows one that stays inside the root): name in root, the directory of p. It
// looks at the name first, and checks that the file it then opened is the one it
// looked at, so that a link swapped in between is refused all the same; the facts
// it keeps are those of the open file.
func (r *run) readExistingByName(root *os.Root, p, name string, declared bool) (*saved, error) {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, inspectError(p, err)
	}
	if err := checkExisting(p, fi.Mode(), fi.Size(), declared); err != nil {
		return nil, err
	}
	if err := r.hook("open", p); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(name, os.O_RDONLY|atomicfile.NoPoll, 0)
	if err != nil {
		return nil, inspectError(p, err)
	}
	defer f.Close()
	ofi, err := f.Stat()
	if err != nil {
		return nil, inspectError(p, err)
	}
	if !os.SameFile(fi, ofi) {
		return nil, &PathError{Path: p, Err: ErrEscapesRoot,
			Reason: "it was replaced while the applier looked at it, perhaps by a symbolic link; the applier neither writes through nor removes links"}
	}
	if err := checkExisting(p, ofi.Mode(), ofi.Size(), declared); err != nil {
		return nil, err
	}
	uid, gid := owner(ofi)
	if r.skipRead(p, declared, ofi.Size()) {
		return &saved{mode: ofi.Mode() & modeBits, uid: uid, gid: gid, unread: true}, nil
	}
	data, err := readCapped(f.Read, ofi.Size())
	if err != nil {
		return nil, readError(p, err, declared)
	}
	return &saved{data: data, mode: ofi.Mode() & modeBits, uid: uid, gid: gid}, nil
}

// checkExisting refuses what the applier will not read: a symbolic link, what
// is not a regular file, a file larger than MaxFileSize. At a path no longer
// declared, a link or what is not a regular file is a *leftInPlace instead.
func checkExisting(p string, mode fs.FileMode, size int64, declared bool) error {
	switch {
	case !declared && (mode&fs.ModeSymlink != 0 || !mode.IsRegular()):
		return leftAt(mode)
	case mode&fs.ModeSymlink != 0:
		return symlinkRefusal(p)
	case mode.IsDir() && declared:
		// Never removed by the agent, even when the files it held were managed
		// ones this declaration drops: what else is in it is not the agent's.
		return &PathError{Path: p, Err: ErrInvalidPath,
			Reason: "a directory is in its place, and the applier never replaces a directory by a file (even one that held only files an earlier declaration managed); remove the directory, and the agent applies the declaration at its next attempt"}
	case !mode.IsRegular():
		return &PathError{Path: p, Err: ErrInvalidPath,
			Reason: fmt.Sprintf("a %s is in its place; the applier only manages regular files", kind(mode))}
	case size > MaxFileSize:
		return tooLarge(p, sizeText(size), declared)
	}
	return nil
}

// leftInPlace is what stands at a path no longer declared, or on its way, that
// the applier neither removes nor refuses: not a regular file (see Result.Left).
// It never leaves Apply: inspect takes it for a LeftPath.
type leftInPlace struct{ reason string }

func (e *leftInPlace) Error() string { return e.reason }

// leftSaid ends each LeftPath's Reason: what it means, and what a person may do.
const leftSaid = "; no longer declared, the path was left as it is and is no longer managed: remove it by hand if nothing needs it"

// leftAt is the leftInPlace of a path no longer declared where a file of mode is.
func leftAt(mode fs.FileMode) error {
	what := fmt.Sprintf("a %s is in its place, and the applier removes only regular files", kind(mode))
	switch {
	case mode&fs.ModeSymlink != 0:
		what = "a symbolic link is in its place, and the applier neither writes through nor removes links"
	case mode.IsDir():
		what = "a directory is in its place, and the applier never removes a directory"
	}
	return &leftInPlace{reason: what + leftSaid}
}

// leftOnTheWay is the leftInPlace of a path no longer declared below dir, where
// a file of mode is instead of a directory.
func leftOnTheWay(dir string, mode fs.FileMode) error {
	what := fmt.Sprintf("%q on its way is a %s, not a directory", dir, kind(mode))
	if mode&fs.ModeSymlink != 0 {
		what = fmt.Sprintf("%q on its way is a symbolic link, and the applier never removes through links", dir)
	}
	return &leftInPlace{reason: what + leftSaid}
}

// linkFound is what readExisting says of a symbolic link found at p.
func linkFound(p string, declared bool) error {
	if !declared {
		return leftAt(fs.ModeSymlink)
	}
	return symlinkRefusal(p)
}

func symlinkRefusal(p string) error {
	return &PathError{Path: p, Err: ErrEscapesRoot,
		Reason: "it is a symbolic link; the applier neither writes through nor removes links" + linkRemedy}
}

// linkRemedy is what to do of a link that stands where a declared file goes: said,
// as a directory's refusal says it (a walkthrough: the link held back every
// apply and put-back, and the refusal named no way out).
const linkRemedy = "; remove the link on the host (or declare the path it points to instead), and the agent applies the declaration at its next attempt"

// tooLarge is the refusal of a file found larger than MaxFileSize, size being
// what is known of its size. What a person can do differs for a file still
// declared and one the applier would remove.
func tooLarge(p, size string, declared bool) error {
	todo := "move it out of the managed root, or stop declaring it, and the next attempt applies"
	if !declared {
		todo = "it is no longer declared, and the applier keeps what it removes until the apply succeeds: remove or move it yourself, and the next attempt applies"
	}
	return &PathError{Path: p, Err: ErrTooLarge,
		Reason: fmt.Sprintf("it is %s, more than the %s a managed file may hold, so it was not read; %s",
			size, sizeText(MaxFileSize), todo)}
}

func inspectError(p string, err error) error {
	return fmt.Errorf("apply: inspecting %q: %w", p, err)
}

// readError is the error of reading the file found at p.
func readError(p string, err error, declared bool) error {
	if errors.Is(err, errGrew) {
		return tooLarge(p, "more than "+sizeText(MaxFileSize)+" (it grew while it was read)", declared)
	}
	return fmt.Errorf("apply: reading the current %q: %w", p, err)
}

// errGrew is readCapped's error for a file that grew past MaxFileSize while it
// was read.
var errGrew = errors.New("the file grew past the limit while it was read")

// readCapped reads through read until the end of the file: size bytes as its
// descriptor said, or another number if it changes meanwhile, but never more
// than MaxFileSize+1 (errGrew). The end is io.EOF, or a read of nothing, as
// read(2) says it.
func readCapped(read func([]byte) (int, error), size int64) ([]byte, error) {
	const limit = MaxFileSize + 1 // one more than a file may hold: the read that finds the end
	data := make([]byte, 0, min(max(size, 0)+1, limit))
	for {
		n, err := read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		switch {
		case len(data) > MaxFileSize:
			return nil, errGrew
		case errors.Is(err, io.EOF), err == nil && n == 0:
			return data, nil
		case err != nil:
			return nil, err
		}
		if len(data) == cap(data) { // it grew since its size was taken
			grown := make([]byte, len(data), min(2*cap(data), limit))
			copy(grown, data)
			data = grown
		}
	}
}

// sizeText says a size in bytes, and in binary units when it is large.
func sizeText(n int64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d bytes", n)
	}
	f, unit := float64(n)/(1<<10), 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	for f >= 1<<10 && unit < len(units)-1 {
		f /= 1 << 10
		unit++
	}
	return fmt.Sprintf("%d bytes (%.1f %s)", n, f, units[unit])
}
