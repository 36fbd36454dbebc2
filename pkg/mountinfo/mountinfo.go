// Package mountinfo reads the kernel's mount table of a process
// (/proc/<pid>/mountinfo, described in proc_pid_mountinfo(5)).
//
// It is the one place that knows the table's format. Paths in the table
// (root, mount point, source) and the filesystem type are written by the
// kernel with space, tab, newline and backslash as octal escapes (\040,
// \011, \012, \134), so splitting a line at spaces is only right once
// those are decoded; Parse decodes them, and code comparing paths with the
// table must use the decoded fields.
//
// Why our own parser rather than github.com/moby/sys/mountinfo (what runc
// and containerd use): the format is a stable kernel interface that fits in
// a page of code, and the packages under pkg/ depend on nothing but the
// standard library and golang.org/x/sys, which keeps the node's PID 1 and
// storage path free of further modules. We also need the whole line,
// including the device numbers and the mount's root within its filesystem
// (to find bind mounts of a directory), and other processes' tables (to
// find mounts held in another mount namespace), both plain calls here.
//
// Contract: the package keeps no state; every call reads the table afresh,
// so the answer is the kernel's at the moment of the read. A line that does
// not have the format of the man page is an error, never skipped, so a
// caller never acts on a partial table.
package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Mount is one line of a mount table. The path fields are decoded.
type Mount struct {
	// ID identifies the mount (the kernel may reuse it after unmount);
	// Parent is the ID of the mount it sits on.
	ID, Parent int
	// Major and Minor are the device number of the filesystem (st_dev of
	// its files). Bind mounts of one filesystem share it.
	Major, Minor uint32
	// Root is the directory of the filesystem that appears at MountPoint:
	// "/" for a whole filesystem, the source directory for a bind mount.
	Root string
	// MountPoint is where the mount is, relative to the process's root.
	MountPoint string
	// Options are the per-mount options (rw, nosuid, relatime...).
	Options string
	// Optional are the optional fields (shared:N, master:N...), if any.
	Optional []string
	// FSType is the filesystem type ("type" or "type.subtype").
	FSType string
	// Source is the filesystem-specific source ("/dev/sda1", "tmpfs").
	Source string
	// SuperOptions are the options of the filesystem (superblock).
	SuperOptions string
}

// Read returns the mount table of the calling process.
func Read() ([]Mount, error) {
	return readFile("/proc/self/mountinfo")
}

// ReadPID returns the mount table of process pid, which shows the mounts
// of that process's mount namespace.
func ReadPID(pid int) ([]Mount, error) {
	return readFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
}

func readFile(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	defer f.Close()
	mounts, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return mounts, nil
}

// maxLine bounds one line of the table. Paths are at most PATH_MAX (4096)
// before escaping, but filesystem options (an overlay's layer list) can be
// longer; bufio's default of 64 KiB is too tight for those.
const maxLine = 1 << 20

// Parse reads a mount table in the format of /proc/<pid>/mountinfo.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), maxLine)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("reading mount table: %w", err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	return out, nil
}

// parseLine parses one line:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// six fields, zero or more optional fields, a "-", then three fields.
// Escaped fields never contain a space, so splitting at spaces is safe.
func parseLine(line string) (Mount, error) {
	f := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || len(f) != sep+4 {
		return Mount{}, fmt.Errorf("malformed line %q", line)
	}
	var m Mount
	var err1, err2 error
	m.ID, err1 = strconv.Atoi(f[0])
	m.Parent, err2 = strconv.Atoi(f[1])
	major, minor, ok := strings.Cut(f[2], ":")
	if !ok {
		return Mount{}, fmt.Errorf("malformed line %q: no major:minor", line)
	}
	maj, err3 := strconv.ParseUint(major, 10, 32)
	mnr, err4 := strconv.ParseUint(minor, 10, 32)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return Mount{}, fmt.Errorf("malformed line %q: %w", line, err)
	}
	m.Major, m.Minor = uint32(maj), uint32(mnr)
	m.Root = Unescape(f[3])
	m.MountPoint = Unescape(f[4])
	m.Options = f[5]
	if sep > 6 {
		m.Optional = f[6:sep]
	}
	m.FSType = Unescape(f[sep+1])
	m.Source = Unescape(f[sep+2])
	m.SuperOptions = f[sep+3]
	return m, nil
}

// Unescape decodes the kernel's octal escapes: a backslash followed by
// three octal digits stands for that byte (\040 space, \011 tab, \012
// newline, \134 backslash). Anything else is kept as it is; the kernel
// escapes every backslash it writes, so a bare one cannot be meant.
func Unescape(s string) string {
	i := strings.IndexByte(s, '\\')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	b.WriteString(s[:i])
	for ; i < len(s); i++ {
		if v, ok := octalEscape(s[i:]); ok {
			b.WriteByte(v)
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// octalEscape decodes a `\ooo` escape at the start of s.
func octalEscape(s string) (byte, bool) {
	if len(s) < 4 || s[0] != '\\' {
		return 0, false
	}
	v := 0
	for _, c := range []byte(s[1:4]) {
		if c < '0' || c > '7' {
			return 0, false
		}
		v = v<<3 | int(c-'0')
	}
	if v > 0xff {
		return 0, false
	}
	return byte(v), true
}

// At returns the mounts whose mount point is path, in table order (the
// last one is on top when several are stacked there).
func At(mounts []Mount, path string) []Mount {
	var out []Mount
	for _, m := range mounts {
		if m.MountPoint == path {
			out = append(out, m)
		}
	}
	return out
}

// Under returns the mounts whose mount point lies strictly below dir, in
// table order.
func Under(mounts []Mount, dir string) []Mount {
	dir = filepath.Clean(dir)
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []Mount
	for _, m := range mounts {
		if m.MountPoint != dir && strings.HasPrefix(m.MountPoint, prefix) {
			out = append(out, m)
		}
	}
	return out
}
