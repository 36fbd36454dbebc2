package core

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ensureMounted mounts m at target unless something is mounted there
// already (a restarted datadir runnable, or a mount done by the boot
// environment). It reports whether it mounted.
func ensureMounted(m *DataMount, target string) (bool, error) {
	mounted, err := IsMountPoint(target)
	if err != nil {
		return false, fmt.Errorf("mounting data partition: %w", err)
	}
	if mounted {
		return false, nil
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return false, fmt.Errorf("mounting data partition: creating mount point: %w", err)
	}
	// nosuid,nodev: nothing on the data partition is a program or device
	// we mean to honour; volumes are exposed to pods through their own
	// bind mounts and loop devices.
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if err := unix.Mount(m.Source, target, m.FSType, flags, m.Options); err != nil {
		return false, fmt.Errorf("mounting data partition %s (%s, options %q) at %s: %w", m.Source, m.FSType, m.Options, target, err)
	}
	return true, nil
}

// IsMountPoint reports whether path is a mount point according to the
// kernel's mount table of this process (/proc/self/mountinfo). Comparing
// device numbers with the parent would miss bind mounts of the same
// filesystem; the mount table does not.
func IsMountPoint(path string) (bool, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false, err
	}
	// The table lists canonical paths; resolve links the way the kernel
	// did when the mount was made. A missing path is not a mount point.
	if resolved, err := filepath.EvalSymlinks(abs); err == nil {
		abs = resolved
	} else if os.IsNotExist(err) {
		return false, nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("reading mount table: %w", err)
	}
	defer f.Close()
	points, err := parseMountPoints(f)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == abs {
			return true, nil
		}
	}
	return false, nil
}

// parseMountPoints returns the mount points (field 5) of a mountinfo table,
// with the kernel's octal escapes (\040 for space, ...) decoded.
func parseMountPoints(r io.Reader) ([]string, error) {
	var points []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			return nil, fmt.Errorf("reading mount table: malformed line %q", sc.Text())
		}
		points = append(points, unescapeMountinfo(fields[4]))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mount table: %w", err)
	}
	return points, nil
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
