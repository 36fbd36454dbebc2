package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// Markers of the escape mode (-escape-quota).
const (
	markEscaped      = "[ESCAPED]"
	markEscapeCut    = "[ESCAPE-CUT]"
	markEscapeFailed = "[ESCAPE-FAILED]"
	markEscapeEnded  = "[ESCAPE-ENDED]"
)

// escapeQuota does, from an ordinary pod in the host's user namespace,
// what any owner of a file may: it moves a new directory of the volume
// mounted at dir to project 0 and writes twice the volume's size into it,
// printing [ESCAPED] with the figures, [ESCAPE-CUT] when the files were
// out of the quota but a write into them failed over the volume's size
// (the node put them back while it wrote), or [ESCAPE-FAILED] <reason>
// (e.g. where the kernel refuses the change). Then it tries a small write every
// poll, and prints [ESCAPE-ENDED] once one fails over the volume's size,
// with the usage the pod sees then: what the node's audit should bring
// about. It returns when ctx ends.
func escapeQuota(ctx context.Context, dir string, out io.Writer, poll time.Duration) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		fmt.Fprintf(out, "%s statfs %s: %v\n", markEscapeFailed, dir, err)
		return
	}
	size := int64(sfs.Blocks) * sfs.Bsize
	moved := filepath.Join(dir, "moved-out")
	if err := os.Mkdir(moved, 0o755); err != nil {
		fmt.Fprintf(out, "%s %v\n", markEscapeFailed, err)
		return
	}
	if err := fsquota.SetProjectID(moved, 0, false); err != nil {
		fmt.Fprintf(out, "%s %v\n", markEscapeFailed, err)
		return
	}
	err := writeReadBack(filepath.Join(moved, "big"), int(2*size))
	switch {
	case errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT):
		fmt.Fprintf(out, "%s writing %d bytes into a volume of %d, out of its quota, failed: %v; it shows %d bytes used\n", markEscapeCut, 2*size, size, err, used(dir))
	case err != nil:
		fmt.Fprintf(out, "%s writing %d bytes into a volume of %d: %v\n", markEscapeFailed, 2*size, size, err)
		return
	default:
		fmt.Fprintf(out, "%s wrote %d bytes into a volume of %d bytes; it shows %d bytes used\n", markEscaped, 2*size, size, used(dir))
	}
	probe := filepath.Join(dir, "probe")
	for {
		err := writeReadBack(probe, 64<<10)
		os.Remove(probe)
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			fmt.Fprintf(out, "%s a 64 KiB write failed: %v; the volume shows %d of %d bytes used\n", markEscapeEnded, err, used(dir), size)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
	}
}

// used is the space statfs says is used in the volume at dir (what df in
// the pod shows), or -1.
func used(dir string) int64 {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return -1
	}
	return int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize
}
