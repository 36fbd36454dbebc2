package volumetest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// SampleTree fills dir with what a copy of a filesystem volume must keep:
// nested directories of several modes (setgid, sticky) and owners, a
// regular file, an empty one, a sparse one (data at both ends of a 16 MiB
// hole), a setuid file, relative and dangling symbolic links, a link to
// outside the tree, two hard links of one file, a FIFO, user extended
// attributes on a file and a directory, and times set in the past. It
// returns the path of the sparse file, relative to dir.
func SampleTree(t testing.TB, dir string) (sparse string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, rel := range []string{"a", "a/b", "shared"} {
		must(os.Mkdir(filepath.Join(dir, rel), 0o700))
	}
	must(os.Chmod(filepath.Join(dir, "a"), 0o750))
	must(unix.Chmod(filepath.Join(dir, "a/b"), 0o2770))
	must(unix.Chmod(filepath.Join(dir, "shared"), 0o1777))
	must(os.Lchown(filepath.Join(dir, "a/b"), 1000, 2000))
	must(os.WriteFile(filepath.Join(dir, "a/b/data"), []byte(strings.Repeat("plinth ", 100000)), 0o640))
	must(os.Lchown(filepath.Join(dir, "a/b/data"), 1000, 2000))
	must(os.WriteFile(filepath.Join(dir, "empty"), nil, 0o600))
	must(os.WriteFile(filepath.Join(dir, "setuid"), []byte("#!/bin/true\n"), 0o755))
	must(unix.Chmod(filepath.Join(dir, "setuid"), 0o4755))
	f, err := os.Create(filepath.Join(dir, "shared/sparse"))
	must(err)
	_, err = f.WriteAt([]byte("start"), 0)
	must(err)
	_, err = f.WriteAt([]byte("end"), 16<<20)
	must(err)
	must(f.Close())
	must(os.Symlink("b/data", filepath.Join(dir, "a/rel-link")))
	must(os.Symlink("missing", filepath.Join(dir, "dangling")))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "outside")))
	must(os.Lchown(filepath.Join(dir, "outside"), 1000, 1000))
	must(os.WriteFile(filepath.Join(dir, "hard1"), []byte("linked"), 0o644))
	must(os.Link(filepath.Join(dir, "hard1"), filepath.Join(dir, "a/hard2")))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o620))
	must(unix.Lsetxattr(filepath.Join(dir, "a/b/data"), "user.color", []byte("blue"), 0))
	must(unix.Lsetxattr(filepath.Join(dir, "a"), "user.dir", []byte("yes"), 0))
	past := unix.NsecToTimespec(1_500_000_000_123_456_789)
	for _, rel := range []string{"a/b/data", "a/b", "a", "shared/sparse", "fifo"} {
		must(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, rel), []unix.Timespec{past, past}, unix.AT_SYMLINK_NOFOLLOW))
	}
	must(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, "outside"), []unix.Timespec{past, past}, unix.AT_SYMLINK_NOFOLLOW))
	return "shared/sparse"
}

// DescribeTree returns one line per entry below dir (dir itself as "."):
// its type, mode, owner, size, modification time, user extended
// attributes, content digest, link target, whether it is sparse, and
// which entries are hard links of one another. Two trees are equal copies
// when their descriptions are.
func DescribeTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		d := fmt.Sprintf("type=%o mode=%o owner=%d:%d mtime=%d.%09d", st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			d += fmt.Sprintf(" size=%d sha256=%x sparse=%v", st.Size, sha256.Sum256(b), st.Blocks*512 < st.Size)
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					d += " hardlink-of=" + first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			d += " target=" + target
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			d += " xattrs=" + userXattrs(t, p)
		}
		out[rel] = d
		return nil
	})
	if err != nil {
		t.Fatalf("describing %s: %v", dir, err)
	}
	return out
}

func userXattrs(t testing.TB, p string) string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatalf("listing xattrs of %s: %v", p, err)
	}
	var kv []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			t.Fatalf("reading xattr %s of %s: %v", name, p, err)
		}
		kv = append(kv, name+"="+string(v[:m]))
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// DiffTrees lists the differences between two DescribeTree results.
func DiffTrees(want, got map[string]string) []string {
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s missing (want %s)", k, w))
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s:\n\twant %s\n\tgot  %s", k, w, g))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s unexpected (%s)", k, g))
		}
	}
	sort.Strings(diffs)
	return diffs
}
