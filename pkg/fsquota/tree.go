package fsquota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"

	"golang.org/x/sys/unix"
)

// MaxTreeDepth is how deep RestoreTree descends. Each level holds one open
// directory; a tree deeper than this (which only a program builds) is
// reported in Restored.Unchecked rather than followed.
const MaxTreeDepth = 1000

// Restored is what RestoreTree found and repaired below a directory.
type Restored struct {
	// Checked counts the regular files and directories examined,
	// the top directory included.
	Checked int64
	// Strays counts those that carried another project ID, or were
	// directories without PROJINHERIT (whose new files would take
	// project 0). They carry the right ID and flag now.
	Strays int64
	// StrayBytes is the space the stray regular files hold (allocated
	// blocks, what quota charges). The project's usage did not include
	// it before; it does now.
	StrayBytes int64
	// FirstStray is the path of one stray, relative to the top
	// directory ("." for the top itself); empty when there were none.
	FirstStray string
	// Unchecked counts directories deeper than MaxTreeDepth, whose
	// contents were not examined.
	Unchecked int64
	// Mounts counts the mount points found below the top directory: the
	// roots of other mounts (a bind mount of another directory of the
	// same filesystem too), which the walk does not enter.
	Mounts int64
	// Failed counts entries that could not be examined or repaired;
	// FirstFailure says why for one of them. The walk goes on past
	// them, so that one entry the tree's owner made unreadable cannot
	// hide the rest.
	Failed       int64
	FirstFailure string
	// From says, for the strays that carried another nonzero project
	// ID, which project each came from and what that project's quota
	// was charged for them (by the ID they carried): room the walk gave
	// back to that project. A project's owner lost that room while the
	// entries carried its ID, so the caller can tell it; a repair of a
	// flag alone is not in it. Nil when there were none.
	From map[uint32]Charge
}

// Charge is what a project's quota was charged for entries that were
// not its own: how many, the bytes they held (allocated blocks; none for
// directories), and the path of one, relative to the walk's top
// directory.
type Charge struct {
	Entries, Bytes int64
	First          string
}

// Add adds o's counts to r's, and each of o's charges to r's for the
// same project; the first stray and failure of r stay, or are o's when
// r had none.
func (r *Restored) Add(o Restored) {
	r.Checked += o.Checked
	r.Strays += o.Strays
	r.StrayBytes += o.StrayBytes
	r.Unchecked += o.Unchecked
	r.Mounts += o.Mounts
	r.Failed += o.Failed
	if r.FirstStray == "" {
		r.FirstStray = o.FirstStray
	}
	if r.FirstFailure == "" {
		r.FirstFailure = o.FirstFailure
	}
	for id, c := range o.From {
		r.charge(id, c)
	}
}

// Rebase joins the paths of r's strays (FirstStray and each charge's
// First), relative to a walk's top directory, to top: a caller that walked
// several tops reports them where they are. "" stays "".
func (r *Restored) Rebase(top string) {
	join := func(rel string) string {
		if rel == "" {
			return ""
		}
		return path.Join(top, rel)
	}
	r.FirstStray = join(r.FirstStray)
	for id, c := range r.From {
		c.First = join(c.First)
		r.From[id] = c
	}
}

// charge adds c to what project id was charged.
func (r *Restored) charge(id uint32, c Charge) {
	if r.From == nil {
		r.From = map[uint32]Charge{}
	}
	sum := r.From[id]
	sum.Entries += c.Entries
	sum.Bytes += c.Bytes
	if sum.First == "" {
		sum.First = c.First
	}
	r.From[id] = sum
}

// RestoreTree gives every regular file and directory below dir, and dir
// itself, the project ID id (and directories PROJINHERIT), and reports
// those that had something else.
//
// A project quota only charges files that carry its ID, and the owner of
// a file may change the ID (FS_IOC_FSSETXATTR) from the initial user
// namespace, which is where pods without hostUsers: false run. A process
// can thus move a subdirectory of its volume to project 0 and write past
// the volume's size, unseen by its usage. xfs_quota's "project -c" and
// "project -s" check and set a tree the same way; this is that walk,
// safe to run over a tree whose owner is hostile:
//
//   - it never follows a symbolic link: every step opens a name relative
//     to its parent's descriptor, with O_NOFOLLOW, so a link swapped in
//     mid-walk cannot lead outside dir;
//   - it never opens a device, FIFO or socket: an entry is opened with
//     O_PATH first, and reopened for the ioctl only once statx says it is
//     a regular file or a directory (opening some devices has effects);
//   - it never enters another mount (statx's STATX_ATTR_MOUNT_ROOT): a
//     directory below dir may be the mount point of a bind mount of some
//     other directory of the same filesystem (the kubelet mounts pods'
//     volumes below its root), whose files are that directory's, and
//     another filesystem's files are no business of this one's quotas;
//   - entries that vanish mid-walk are skipped.
//
// Other file types hold no data blocks and are left alone. pace, when not
// nil, is called before each entry, so that a caller can bound the walk's
// rate; its error, like ctx's, ends the walk with what was done so far.
func RestoreTree(ctx context.Context, dir string, id uint32, pace func(context.Context) error) (Restored, error) {
	var r Restored
	if id == 0 {
		return r, fmt.Errorf("restoring project IDs below %s: project ID 0 is the default project of every file", dir)
	}
	top, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("restoring project IDs below %s: %w", dir, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	w := &treeWalk{ctx: ctx, id: id, pace: pace, r: &r}
	if err := w.entry(top, ".", 0); err != nil {
		return r, fmt.Errorf("restoring project IDs below %s: %w", dir, err)
	}
	if r.Checked == 0 {
		// The top directory itself failed: nothing was examined.
		return r, fmt.Errorf("restoring project IDs below %s: %s", dir, r.FirstFailure)
	}
	return r, nil
}

// RestoreAt is RestoreTree for the one entry name of the directory open
// as dirfd (O_PATH will do), without descending into it: it gives the
// entry project ID id (and a directory PROJINHERIT) when it lacks them,
// and reports whether it did. It is the check of a file just written,
// cheap enough to make for every change a watch reports (a handful of
// system calls); RestoreTree is the walk that finds the rest.
//
// It follows no symbolic link (name included), opens no device, FIFO or
// socket, and leaves a mount point alone, as RestoreTree does.
func RestoreAt(ctx context.Context, dirfd int, name string, id uint32) (Restored, error) {
	if id == 0 {
		return Restored{}, fmt.Errorf("restoring the project ID of %s: project ID 0 is the default project of every file", name)
	}
	return restoreAt(&treeWalk{ctx: ctx, id: id}, dirfd, name)
}

// ReleaseAt is RestoreAt for an entry that must carry no ID of the range
// [lo, hi] (the IDs of quotas it is not part of): when the entry carries
// one, it gives it id instead (0, the default project, will do), and a
// directory PROJINHERIT, or with 0 takes a directory's PROJINHERIT away.
// An entry carrying any other ID is left as it is. name "." checks the
// directory dirfd itself.
func ReleaseAt(ctx context.Context, dirfd int, name string, lo, hi, id uint32) (Restored, error) {
	if lo == 0 || lo > hi || (id >= lo && id <= hi) {
		return Restored{}, fmt.Errorf("releasing the project ID of %s: invalid range [%d, %d] or ID %d", name, lo, hi, id)
	}
	return restoreAt(&treeWalk{ctx: ctx, id: id, only: [2]uint32{lo, hi}}, dirfd, name)
}

// ReleaseTree is ReleaseAt for dir and everything below it, except the
// directories in except and what lies below them: it gives every entry
// carrying an ID of [lo, hi] the ID id instead, leaves entries carrying
// any other ID alone, and reports those it changed. It is the search for
// files a process moved into a quota they are not part of, over a tree
// that also holds the quotas' own trees (except, whose entries carry
// those IDs rightly). An except entry that does not exist is ignored.
// The walk is RestoreTree's: no symbolic link, device or other mount is
// followed or opened, and pace bounds its rate.
func ReleaseTree(ctx context.Context, dir string, lo, hi, id uint32, except []string, pace func(context.Context) error) (Restored, error) {
	var r Restored
	if lo == 0 || lo > hi || (id >= lo && id <= hi) {
		return r, fmt.Errorf("releasing project IDs below %s: invalid range [%d, %d] or ID %d", dir, lo, hi, id)
	}
	w := &treeWalk{ctx: ctx, id: id, pace: pace, r: &r, only: [2]uint32{lo, hi}, except: map[inode]bool{}}
	for _, e := range except {
		var st unix.Statx_t
		err := unix.Statx(unix.AT_FDCWD, e, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_INO, &st)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return r, fmt.Errorf("releasing project IDs below %s: stat of %s: %w", dir, e, err)
		}
		w.except[inodeOf(&st)] = true
	}
	top, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("releasing project IDs below %s: %w", dir, &os.PathError{Op: "open", Path: dir, Err: err})
	}
	if err := w.entry(top, ".", 0); err != nil {
		return r, fmt.Errorf("releasing project IDs below %s: %w", dir, err)
	}
	if r.Checked == 0 && r.Failed > 0 {
		return r, fmt.Errorf("releasing project IDs below %s: %s", dir, r.FirstFailure)
	}
	return r, nil
}

// inode is an inode's identity: its device and number.
type inode struct {
	dev [2]uint32
	ino uint64
}

func inodeOf(st *unix.Statx_t) inode {
	return inode{dev: [2]uint32{st.Dev_major, st.Dev_minor}, ino: st.Ino}
}

// restoreAt examines the one entry name of dirfd with w.
func restoreAt(w *treeWalk, dirfd int, name string) (Restored, error) {
	var r Restored
	var st unix.Statx_t
	if err := unix.Statx(dirfd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &st); err != nil {
		return r, fmt.Errorf("restoring the project ID of %s: stat of its directory: %w", name, err)
	}
	pfd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return r, fmt.Errorf("restoring the project ID of %s: %w", name, &os.PathError{Op: "open", Path: name, Err: err})
	}
	w.r, w.shallow, w.dev = &r, true, [2]uint32{st.Dev_major, st.Dev_minor}
	if err := w.entry(pfd, name, 1); err != nil {
		return r, fmt.Errorf("restoring the project ID of %s: %w", name, err)
	}
	if r.Failed > 0 {
		return r, fmt.Errorf("restoring the project ID: %s", r.FirstFailure)
	}
	return r, nil
}

type treeWalk struct {
	ctx  context.Context
	id   uint32
	pace func(context.Context) error
	r    *Restored
	// dev is the top directory's device.
	dev [2]uint32
	// shallow: examine the first entry only (RestoreAt).
	shallow bool
	// only, when set, is the range of IDs the walk takes away: entries
	// carrying another keep it (ReleaseAt).
	only [2]uint32
	// except are the directories the walk leaves alone, with what lies
	// below them (ReleaseTree).
	except map[inode]bool
}

// entry examines the object open (O_PATH) as pfd at rel, repairs its
// project ID, and descends into it when it is a directory. It closes pfd.
// It returns only the errors that end the walk (ctx's and pace's); those
// of the entry are counted in Failed.
func (w *treeWalk) entry(pfd int, rel string, depth int) error {
	defer unix.Close(pfd)
	var st unix.Statx_t
	if err := unix.Statx(pfd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_BLOCKS|unix.STATX_INO, &st); err != nil {
		w.fail(fmt.Errorf("stat %s: %w", rel, err))
		return nil
	}
	if w.except[inodeOf(&st)] {
		return nil
	}
	if depth > 0 && mountRoot(&st, w.dev) {
		w.r.Mounts++
		return nil
	}
	if depth == 0 {
		w.dev = [2]uint32{st.Dev_major, st.Dev_minor}
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if !isDir && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	fd, err := reopen(pfd, isDir)
	if err != nil {
		w.fail(fmt.Errorf("opening %s: %w", rel, err))
		return nil
	}
	defer unix.Close(fd)
	w.r.Checked++
	if err := w.repair(fd, rel, isDir, int64(st.Blocks)*512); err != nil {
		w.fail(err)
	}
	if !isDir || w.shallow {
		return nil
	}
	if depth >= MaxTreeDepth {
		w.r.Unchecked++
		return nil
	}
	return w.children(fd, rel, depth)
}

// mountRoot reports whether st is the root of a mount, by the attribute
// the kernel sets since Linux 5.8, or by a device other than the top
// directory's (dev) where the kernel does not report it.
func mountRoot(st *unix.Statx_t, dev [2]uint32) bool {
	if st.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return st.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0
	}
	return [2]uint32{st.Dev_major, st.Dev_minor} != dev
}

func (w *treeWalk) fail(err error) {
	w.r.Failed++
	if w.r.FirstFailure == "" {
		w.r.FirstFailure = err.Error()
	}
}

// repair gives the object open as fd the walk's project ID (and a
// directory PROJINHERIT) when it lacks them, and counts it as a stray
// holding allocated bytes.
func (w *treeWalk) repair(fd int, rel string, isDir bool, allocated int64) error {
	x, err := getXattr(uintptr(fd))
	if err != nil {
		return fmt.Errorf("%s: FS_IOC_FSGETXATTR: %w", rel, err)
	}
	inherit := isDir && w.id != 0
	if w.only[0] != 0 && (x.Projid < w.only[0] || x.Projid > w.only[1]) {
		return nil
	}
	if x.Projid == w.id && (!inherit || x.Xflags&xflagProjInherit != 0) {
		return nil
	}
	w.r.Strays++
	if isDir {
		allocated = 0
	}
	w.r.StrayBytes += allocated
	if w.r.FirstStray == "" {
		w.r.FirstStray = rel
	}
	if x.Projid != 0 && x.Projid != w.id {
		w.r.charge(x.Projid, Charge{Entries: 1, Bytes: allocated, First: rel})
	}
	x.Projid = w.id
	if inherit {
		x.Xflags |= xflagProjInherit
	} else if w.id == 0 {
		// Project 0 passes nothing on (ReleaseAt).
		x.Xflags &^= xflagProjInherit
	}
	if err := setXattr(uintptr(fd), &x); err != nil {
		return fmt.Errorf("%s: giving it project ID %d: FS_IOC_FSSETXATTR: %w", rel, w.id, err)
	}
	return nil
}

// children examines every entry of the directory open as fd.
func (w *treeWalk) children(fd int, rel string, depth int) error {
	// The directory is read through a duplicate, which the os.File owns
	// and closes; fd stays the caller's.
	dup, err := unix.Dup(fd)
	if err != nil {
		w.fail(fmt.Errorf("reading %s: %w", rel, err))
		return nil
	}
	unix.CloseOnExec(dup)
	d := os.NewFile(uintptr(dup), rel)
	defer d.Close()
	for {
		names, err := d.Readdirnames(256)
		for _, name := range names {
			if err := w.ctx.Err(); err != nil {
				return err
			}
			if w.pace != nil {
				if err := w.pace(w.ctx); err != nil {
					return err
				}
			}
			pfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				continue // removed since it was listed
			} else if err != nil {
				w.fail(fmt.Errorf("opening %s: %w", path.Join(rel, name), err))
				continue
			}
			if err := w.entry(pfd, path.Join(rel, name), depth+1); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			w.fail(fmt.Errorf("reading %s: %w", rel, err))
			return nil
		}
	}
}

// reopen opens the regular file or directory that pfd (O_PATH) names for
// reading, through its /proc/self/fd link: the same inode, whatever has
// been renamed over its name since. Access times stay as they are when
// the caller may (it owns the file or has CAP_FOWNER).
func reopen(pfd int, isDir bool) (int, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY
	if isDir {
		flags |= unix.O_DIRECTORY
	}
	p := "/proc/self/fd/" + strconv.Itoa(pfd)
	fd, err := unix.Open(p, flags|unix.O_NOATIME, 0)
	if errors.Is(err, unix.EPERM) {
		fd, err = unix.Open(p, flags, 0)
	}
	return fd, err
}

// SetProjectID gives the regular file or directory at path the project
// ID id, and sets or clears PROJINHERIT on a directory, as chattr -p and
// chattr +P/-P do. It is what the owner of a file can do to it from the
// initial user namespace, so tests use it to play a volume's user moving
// files out of the volume's project; volumes themselves get their ID from
// SetQuota.
func SetProjectID(path string, id uint32, inherit bool) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("setting the project ID of %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	x, err := getXattr(uintptr(fd))
	if err != nil {
		return fmt.Errorf("setting the project ID of %s: FS_IOC_FSGETXATTR: %w", path, err)
	}
	x.Projid = id
	if inherit {
		x.Xflags |= xflagProjInherit
	} else {
		x.Xflags &^= xflagProjInherit
	}
	if err := setXattr(uintptr(fd), &x); err != nil {
		return fmt.Errorf("setting the project ID of %s to %d: FS_IOC_FSSETXATTR: %w", path, id, err)
	}
	return nil
}

// ProjectID returns the project ID of the regular file or directory at
// path and whether it has PROJINHERIT.
func ProjectID(path string) (id uint32, inherit bool, err error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return 0, false, fmt.Errorf("reading the project ID of %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	defer unix.Close(fd)
	x, err := getXattr(uintptr(fd))
	if err != nil {
		return 0, false, fmt.Errorf("reading the project ID of %s: FS_IOC_FSGETXATTR: %w", path, err)
	}
	return x.Projid, x.Xflags&xflagProjInherit != 0, nil
}
