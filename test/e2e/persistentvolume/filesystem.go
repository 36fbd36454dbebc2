package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// filesystemChecks are the init checks of the read-write filesystem claim.
func filesystemChecks(c config) []result {
	var rs []result
	rs = append(rs, fsSizeCheck("fs: statfs size", c.FS, c.Size, c.QuotaEnforced))
	if c.SkipMountFlags != "" {
		rs = append(rs, result{Name: "fs: mount flags nosuid,nodev,rw", Skip: c.SkipMountFlags})
	} else {
		rs = append(rs, result{Name: "fs: mount flags nosuid,nodev,rw", Err: statfsFlags(c.FS, mountFlagsOK)})
	}
	rs = append(rs, result{Name: "fs: write, fsync, read back", Err: writeReadBack(filepath.Join(c.FS, "probe"), 3*blockSize)})
	rs = append(rs, result{Name: fmt.Sprintf("fs: writable as non-root user in fsGroup %d", c.FSGroup), Err: nonRootWrite(c.FS, c.FSGroup)})
	if !c.QuotaEnforced {
		rs = append(rs, result{Name: "fs: write past the size", Skip: "quotas are not enforced on this node"})
	} else {
		rs = append(rs, result{Name: "fs: write past the size fails at exactly the limit, data before it intact", Err: fill(c.FS)})
	}
	return rs
}

// readOnlyFilesystemChecks are the init checks of the claim mounted with
// the claim's readOnly flag.
func readOnlyFilesystemChecks(c config) []result {
	return []result{
		fsSizeCheck("fs-ro: statfs size", c.FSReadOnly, c.Size, c.QuotaEnforced),
		{Name: "fs-ro: mount flags have ST_RDONLY", Err: statfsFlags(c.FSReadOnly, readOnlyFlagOK)},
		{Name: "fs-ro: creating a file fails with EROFS", Err: readOnlyCreate(c.FSReadOnly)},
	}
}

// fsSizeCheck compares the filesystem's size with want; without quotas the
// pod sees the whole data filesystem, so there is nothing to compare.
func fsSizeCheck(name, dir string, want int64, quotaEnforced bool) result {
	if !quotaEnforced {
		return result{Name: name, Skip: "quotas are not enforced on this node, statfs shows the data filesystem"}
	}
	got, err := fsSize(dir)
	if err == nil {
		err = sizeMatches("statfs size of "+dir, got, want)
	}
	return result{Name: name, Err: err}
}

func fsSize(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return statfsSize(&st), nil
}

func statfsFlags(dir string, rule func(flags int64) error) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	return rule(st.Flags)
}

// writeReadBack writes n bytes to a new file, fsyncs it and its directory,
// and reads them back through a second descriptor.
func writeReadBack(path string, n int) error {
	data := pattern(0x5a, 0, n)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return err
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("%s reads back %d bytes that differ from the %d written", path, len(got), len(data))
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// nonRootWrite checks that this process is the unprivileged user the pod
// runs as, with the pod's fsGroup among its groups, and that it can create
// a file on the claim that belongs to the fsGroup: the kubelet applied the
// fsGroup to the volume (setgid root directory), so the write does not
// rest on a world-writable directory alone.
func nonRootWrite(dir string, fsGroup int) error {
	if uid := os.Getuid(); uid == 0 {
		return errors.New("running as root; the pod must run as a non-root user for this check")
	}
	groups, err := os.Getgroups()
	if err != nil {
		return fmt.Errorf("reading supplementary groups: %w", err)
	}
	if !slices.Contains(groups, fsGroup) && os.Getgid() != fsGroup {
		return fmt.Errorf("fsGroup %d is not among the process's groups %v", fsGroup, groups)
	}
	path := filepath.Join(dir, "nonroot")
	if err := writeReadBack(path, blockSize); err != nil {
		return fmt.Errorf("as uid %d: %w", os.Getuid(), err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	if int(st.Gid) != fsGroup {
		return fmt.Errorf("new file %s has group %d, want the fsGroup %d (the kubelet did not apply it to the volume)", path, st.Gid, fsGroup)
	}
	return nil
}

// fill writes a file until the claim is full, checks that the writes
// stopped at exactly the free space statfs reported, that the file holds
// what was written before, and removes it again.
func fill(dir string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	unit := st.Frsize
	if unit == 0 {
		unit = st.Bsize
	}
	free := int64(st.Bavail) * unit
	path := filepath.Join(dir, "fill")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	defer f.Close()
	// Stop at twice the free space: past that the limit is clearly not
	// enforced, and the data filesystem is not filled for nothing.
	var written int64
	var werr error
	for written <= 2*free {
		n, err := f.Write(pattern(0xc3, written, blockSize))
		written += int64(n)
		if err == nil {
			continue
		}
		werr = err
		break
	}
	if werr == nil {
		// Delayed allocation may report the lack of room only here.
		werr = f.Sync()
	}
	if err := fillOK(free, written, werr); err != nil {
		return err
	}
	got := make([]byte, written)
	if _, err := f.ReadAt(got, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading back %s: %w", path, err)
	}
	if !bytes.Equal(got, pattern(0xc3, 0, int(written))) {
		return fmt.Errorf("%s does not hold the %d bytes written before the limit", path, written)
	}
	return nil
}

// readOnlyCreate tries to create a file on the read-only claim.
func readOnlyCreate(dir string) error {
	path := filepath.Join(dir, "must-not-exist")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err == nil {
		f.Close()
		return fmt.Errorf("created %s on a read-only claim", path)
	}
	if !errors.Is(err, unix.EROFS) {
		return fmt.Errorf("creating %s failed with %w, want EROFS", path, err)
	}
	return nil
}
