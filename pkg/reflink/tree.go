package reflink

import (
	"context"
	"errors"
	"fmt"
	"path"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Copied is what CopyTree copied.
type Copied struct {
	// Files, Dirs and Others (symlinks, device nodes, FIFOs, sockets)
	// count the entries made, the root not included; Links the hard
	// links made to files already copied.
	Files, Dirs, Others, Links int64
	// AllocatedBytes is what the copied regular files hold on the
	// filesystem (their blocks, shared with the originals; each hard
	// linked file once): what the copy will need in new blocks if every
	// file of either side is overwritten.
	AllocatedBytes int64
}

// ErrChanged is matched by CopyTree's error when an entry changed type
// between being listed and being opened (a writer replaced it): the copy
// is abandoned, and a retry copies the tree as it is then.
var ErrChanged = errors.New("the tree changed while it was copied")

// TreeOptions adjusts CopyTree.
type TreeOptions struct {
	// SkipXattr, when set, names extended attributes not to copy (the
	// caller's own bookkeeping on the root, say).
	SkipXattr func(name string) bool
}

// CopyTree makes the empty directory dst a copy of the tree below src:
// every regular file cloned with one FICLONE (so a copy of a sparse file
// is sparse, and the copy takes no new data blocks), directories,
// symbolic links, device nodes, FIFOs and sockets recreated, hard links
// within the tree kept as hard links, and on every entry (src's root
// included, onto dst) owner, group, mode (setuid, setgid and sticky bits
// too), extended attributes (ACLs are among them; not on symbolic links
// and special files) and access and modification times. Project IDs and
// inode flags are not copied: new entries take dst's (an inherited
// project ID, say). Change times cannot be set and are the copy's.
//
// Each file is copied at one instant (Clone), but the files at different
// instants: a writer changing several files during the copy may leave
// the copy with some of its changes and not others.
//
// src may be written by others while it is copied, so it is walked only
// through file descriptors opened without following symbolic links: a
// writer that swaps a directory for a link can make the copy fail
// (ErrChanged) but never reach outside src. A mount point below src is
// an error. dst must be on src's filesystem and nobody else's to write.
func CopyTree(ctx context.Context, src, dst string, opts TreeOptions) (Copied, error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Copied{}, fmt.Errorf("copying tree %s: %w", src, err)
	}
	defer unix.Close(sfd)
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Copied{}, fmt.Errorf("copying tree %s: %w", src, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return Copied{}, fmt.Errorf("copying tree %s: %w", src, err)
	}
	c := copier{ctx: ctx, opts: opts, dev: st.Dev, dstRoot: dfd, links: map[uint64]string{}}
	if err := c.dir(sfd, dfd, ""); err != nil {
		return c.done, fmt.Errorf("copying tree %s to %s: %w", src, dst, err)
	}
	if err := c.attrs(sfd, dfd, &st, true); err != nil {
		return c.done, fmt.Errorf("copying tree %s to %s: root: %w", src, dst, err)
	}
	return c.done, nil
}

type copier struct {
	ctx     context.Context
	opts    TreeOptions
	dev     uint64
	dstRoot int
	// links maps the inode of a source file with more than one link to
	// its copy's path below the destination root.
	links map[uint64]string
	done  Copied
}

// dir copies the entries of the source directory sfd into the destination
// directory dfd; rel is their path below the roots.
func (c *copier) dir(sfd, dfd int, rel string) error {
	names, err := readNames(sfd)
	if err != nil {
		return fmt.Errorf("%s: %w", show(rel), err)
	}
	for _, name := range names {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if err := c.entry(sfd, dfd, name, path.Join(rel, name)); err != nil {
			return err
		}
	}
	return nil
}

func (c *copier) entry(sfd, dfd int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // removed since listed: not in the copy
		}
		return fmt.Errorf("%s: %w", rel, err)
	}
	if st.Dev != c.dev {
		return fmt.Errorf("%s: is on another filesystem (a mount point inside the tree); unmount it first", rel)
	}
	var err error
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err = c.subdir(sfd, dfd, name, rel, &st)
	case unix.S_IFREG:
		err = c.file(sfd, dfd, name, rel, &st)
	case unix.S_IFLNK:
		err = c.symlink(sfd, dfd, name, &st)
	default:
		err = c.special(sfd, dfd, name, &st)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

func (c *copier) subdir(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	child, err := openChild(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY, st)
	if err != nil {
		return err
	}
	defer unix.Close(child)
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return err
	}
	dchild, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dchild)
	c.done.Dirs++
	if err := c.dir(child, dchild, rel); err != nil {
		return err
	}
	// After the entries: making them changed the directory's times.
	return c.attrs(child, dchild, st, false)
}

func (c *copier) file(sfd, dfd int, name, rel string, st *unix.Stat_t) error {
	if st.Nlink > 1 {
		if first, ok := c.links[st.Ino]; ok {
			if err := unix.Linkat(c.dstRoot, first, dfd, name, 0); err != nil {
				return fmt.Errorf("linking to %s: %w", first, err)
			}
			c.done.Links++
			return nil
		}
	}
	// O_NONBLOCK: should the name be swapped for a FIFO after the stat,
	// opening it must not hang (openChild then finds the change).
	in, err := openChild(sfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOATIME, st)
	if err != nil {
		return err
	}
	defer unix.Close(in)
	out, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(out)
	if err := unix.IoctlFileClone(out, in); err != nil {
		return fmt.Errorf("cloning: %w", classify(err))
	}
	// The blocks the copy holds now, which may differ from st's.
	var now unix.Stat_t
	if err := unix.Fstat(out, &now); err != nil {
		return err
	}
	c.done.Files++
	c.done.AllocatedBytes += now.Blocks * 512
	if st.Nlink > 1 {
		c.links[st.Ino] = rel
	}
	return c.attrs(in, out, st, false)
}

func (c *copier) symlink(sfd, dfd int, name string, st *unix.Stat_t) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(sfd, name, buf)
	if err != nil {
		return err
	}
	if err := unix.Symlinkat(string(buf[:n]), dfd, name); err != nil {
		return err
	}
	c.done.Others++
	return c.pathAttrs(dfd, name, st, false)
}

func (c *copier) special(sfd, dfd int, name string, st *unix.Stat_t) error {
	if err := unix.Mknodat(dfd, name, st.Mode, int(st.Rdev)); err != nil {
		return err
	}
	c.done.Others++
	return c.pathAttrs(dfd, name, st, true)
}

// attrs gives the destination out (an open file or directory) the owner,
// mode, extended attributes and times of the source in, whose stat is st.
// The owner goes first (chown clears setuid and setgid), the times last.
func (c *copier) attrs(in, out int, st *unix.Stat_t, root bool) error {
	if err := unix.Fchown(out, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("setting owner: %w", err)
	}
	if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
		return fmt.Errorf("setting mode: %w", err)
	}
	if err := c.xattrs(in, out); err != nil {
		return err
	}
	if err := futimens(out, st.Atim, st.Mtim); err != nil {
		return fmt.Errorf("setting times: %w", err)
	}
	return nil
}

// futimens sets the access and modification times of the open file fd:
// utimensat with a NULL path, which x/sys/unix does not offer.
func futimens(fd int, atime, mtime unix.Timespec) error {
	ts := [2]unix.Timespec{atime, mtime}
	_, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// pathAttrs is attrs for an entry that cannot be opened (a symbolic link,
// a device node), by name in its directory: no extended attributes, and
// no mode on a symbolic link, whose mode means nothing.
func (c *copier) pathAttrs(dfd int, name string, st *unix.Stat_t, mode bool) error {
	if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting owner: %w", err)
	}
	if mode {
		if err := unix.Fchmodat(dfd, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("setting mode: %w", err)
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	if err := unix.UtimesNanoAt(dfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times: %w", err)
	}
	return nil
}

func (c *copier) xattrs(in, out int) error {
	names, err := listXattrs(in)
	if err != nil {
		return err
	}
	for _, name := range names {
		if c.opts.SkipXattr != nil && c.opts.SkipXattr(name) {
			continue
		}
		val, err := getXattr(in, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since listed
		}
		if err != nil {
			return fmt.Errorf("reading extended attribute %s: %w", name, err)
		}
		if err := unix.Fsetxattr(out, name, val, 0); err != nil {
			return fmt.Errorf("setting extended attribute %s: %w", name, err)
		}
	}
	return nil
}

// openChild opens name in directory dfd without following a symbolic
// link and checks that it is still the entry st described.
func openChild(dfd int, name string, flags int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dfd, name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: %w", ErrChanged, err)
		}
		return -1, err
	}
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		unix.Close(fd)
		return -1, ErrChanged
	}
	return fd, nil
}

// readNames lists the directory fd (without "." and "..").
func readNames(fd int) ([]string, error) {
	// Reading through a duplicate leaves fd's offset alone.
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dup)
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(dup, buf)
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

func listXattrs(fd int) ([]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing extended attributes: %w", err)
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("listing extended attributes: %w", err)
	}
	var names []string
	start := 0
	for i, b := range buf[:n] {
		if b == 0 {
			if i > start {
				names = append(names, string(buf[start:i]))
			}
			start = i + 1
		}
	}
	return names, nil
}

func getXattr(fd int, name string) ([]byte, error) {
	size, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	n, err := unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

func show(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
