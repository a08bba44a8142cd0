package backup

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"mesh/controlplane/datadir"
	"mesh/controlplane/internal/ctxio"
	"mesh/host/atomicfile"
)

// copyFiles copies every file of the data directory data into dir, each with its
// mode, and returns the bytes copied: the keys, certificates, credentials,
// mesh.json, and whatever else is there. Left out are the lock (a backup is no
// process's directory), raft/ (the caller writes its own, through Raft), hidden
// names (the temporary files of writes under way: datadir's and atomicfile's
// begin with a dot), join-pending.json (a serving node's join is done: the file
// is a leftover of a join stopped at its last step, the node's private keys a
// second time, which serve removes at start), and what is not a regular file.
func copyFiles(ctx context.Context, data datadir.Dir, dir string) (int64, error) {
	entries, err := os.ReadDir(string(data))
	if err != nil {
		return 0, fmt.Errorf("list the data directory: %w", err)
	}
	var total int64
	for _, e := range entries {
		name := e.Name()
		if name == datadir.LockFile || name == datadir.RaftDir || name == datadir.JoinPendingFile ||
			strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		n, err := copyFile(ctx, data.Path(name), filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// copyFile copies the regular file src to dst, which must not exist, with src's
// permission bits: through a temporary file in dst's directory (mode 0600 while
// it is written), flushed, then renamed. The directory is the caller's to flush.
func copyFile(ctx context.Context, src, dst string) (n int64, err error) {
	named, err := os.Lstat(src)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if !named.Mode().IsRegular() {
		return 0, fmt.Errorf("copy %s: %w", src, datadir.ErrNotAFile)
	}
	in, err := os.OpenFile(src, os.O_RDONLY|atomicfile.NoPoll, 0)
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	// What was opened is the file the name held a moment before: a link put in
	// its place meanwhile is not followed (only serve's own user could).
	if !fi.Mode().IsRegular() || !os.SameFile(named, fi) {
		return 0, fmt.Errorf("copy %s: it was replaced while the backup was taken: %w", src, datadir.ErrNotAFile)
	}
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	tmp := out.Name()
	defer func() {
		if err != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	if n, err = io.Copy(out, ctxio.Reader(ctx, in)); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err = out.Sync(); err != nil {
		return 0, fmt.Errorf("copy %s: flush %s: %w", src, tmp, err)
	}
	if err = out.Chmod(fi.Mode().Perm()); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err = out.Close(); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	if err = os.Rename(tmp, dst); err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	return n, nil
}
