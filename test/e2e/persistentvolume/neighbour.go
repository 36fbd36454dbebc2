package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

// Markers of the neighbour modes (-project-writes, -show-project,
// -move-into, -move-quietly).
const (
	markProject     = "[PROJECT]"
	markMovedQuiet  = "[MOVED-QUIETLY]"
	markWriteOK     = "[WRITE-OK]"
	markWriteFailed = "[WRITE-FAILED]"
	markMoved       = "[MOVED]"
	markMoveRefused = "[MOVE-REFUSED]"
)

// projectWrites is the neighbour a pod attacks: it prints the project ID
// of the volume mounted at dir ([PROJECT] <id>), then every poll writes
// half the volume's size to a new file, syncs it and removes it, and
// prints [WRITE-OK] round <n> or [WRITE-FAILED] round <n>: <error>. Writes
// within its size must never fail. It returns when ctx ends.
func projectWrites(ctx context.Context, dir string, out io.Writer, poll time.Duration) {
	id, _, err := fsquota.ProjectID(dir)
	if err != nil {
		fmt.Fprintf(out, "%s round 0: %v\n", markWriteFailed, err)
		return
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		fmt.Fprintf(out, "%s round 0: statfs %s: %v\n", markWriteFailed, dir, err)
		return
	}
	half := int(int64(sfs.Blocks) * sfs.Bsize / 2)
	fmt.Fprintf(out, "%s %d\n", markProject, id)
	file := filepath.Join(dir, "neighbour")
	for round := 1; ; round++ {
		err := writeReadBack(file, half)
		os.Remove(file)
		if err != nil {
			fmt.Fprintf(out, "%s round %d: %d bytes: %v\n", markWriteFailed, round, half, err)
		} else {
			fmt.Fprintf(out, "%s round %d: %d bytes\n", markWriteOK, round, half)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(poll):
		}
	}
}

// moveInto attacks a neighbour from the volume mounted at dir, as the
// owner of a file may in the host's user namespace: spec is
// "<project ID>:<dir>". It gives a new directory of its volume that
// project ID (FS_IOC_FSSETXATTR, as chattr -p) and writes into it until
// the neighbour's project is full, and again for five seconds, taking
// whatever the neighbour frees (at most 64 MiB in all); then it prints
// [MOVED] with what it wrote, or [MOVE-REFUSED] <error> if the change was
// refused.
func moveInto(spec string, out io.Writer) {
	idText, dir, ok := strings.Cut(spec, ":")
	id, err := strconv.ParseUint(idText, 10, 32)
	if !ok || err != nil {
		fmt.Fprintf(out, "%s bad argument %q, want <project ID>:<dir>\n", markMoveRefused, spec)
		return
	}
	moved := filepath.Join(dir, "moved-in")
	if err := os.Mkdir(moved, 0o755); err != nil {
		fmt.Fprintf(out, "%s %v\n", markMoveRefused, err)
		return
	}
	if err := fsquota.SetProjectID(moved, uint32(id), true); err != nil {
		fmt.Fprintf(out, "%s %v\n", markMoveRefused, err)
		return
	}
	total, last := 0, error(nil)
	for i, end := 0, time.Now().Add(5*time.Second); time.Now().Before(end) && total < 64<<20; i++ {
		n, err := fillUpTo(filepath.Join(moved, fmt.Sprint("big", i)), 64<<20-total)
		total, last = total+n, err
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprintf(out, "%s into project %d: wrote %d bytes, the last write ending with: %v\n", markMoved, id, total, last)
}

// showProject prints the project ID of the volume mounted at dir
// ([PROJECT] <id>), and writes nothing: a neighbour whose usage changes
// only by what others move into its project.
func showProject(dir string, out io.Writer) {
	id, _, err := fsquota.ProjectID(dir)
	if err != nil {
		fmt.Fprintf(out, "%s round 0: %v\n", markWriteFailed, err)
		return
	}
	fmt.Fprintf(out, "%s %d\n", markProject, id)
}

// moveQuietly attacks a neighbour without a write the node could follow:
// spec is "<project ID>:<dir>". It writes a 4 MiB file in dir (its volume,
// or an emptyDir), syncs and closes it, waits two seconds, and only then
// gives it the project ID (FS_IOC_FSSETXATTR, as chattr -p), which raises
// no event; it prints [MOVED-QUIETLY] with the file, or [MOVE-REFUSED]
// <error>.
func moveQuietly(spec string, out io.Writer) {
	idText, dir, ok := strings.Cut(spec, ":")
	id, err := strconv.ParseUint(idText, 10, 32)
	if !ok || err != nil {
		fmt.Fprintf(out, "%s bad argument %q, want <project ID>:<dir>\n", markMoveRefused, spec)
		return
	}
	file := filepath.Join(dir, "quiet")
	if n, err := fillUpTo(file, 4<<20); err != nil {
		fmt.Fprintf(out, "%s writing %s: %d bytes: %v\n", markMoveRefused, file, n, err)
		return
	}
	time.Sleep(2 * time.Second)
	if err := fsquota.SetProjectID(file, uint32(id), false); err != nil {
		fmt.Fprintf(out, "%s %v\n", markMoveRefused, err)
		return
	}
	fmt.Fprintf(out, "%s %s into project %d\n", markMovedQuiet, file, id)
}

// fillUpTo writes up to max bytes to a new file at path, synced, and returns
// how many it wrote and why it stopped (nil at max).
func fillUpTo(path string, max int) (int, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	n := 0
	for n < max {
		w, err := f.Write(chunk)
		n += w
		if err != nil {
			return n, err
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		return n, err
	}
	return n, nil
}
