package fsquota_test

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

// TestProjectIDChangeIsNotNotified shows why a node cannot see a pod
// move its files to another project as it happens: on XFS,
// FS_IOC_FSSETXATTR raises no fanotify event (FAN_ATTRIB, the event of
// chmod and chown), as the kernel's fileattr path calls no fsnotify hook.
// A chmod of the same file, the control, does. So the node answers the
// writes that follow the move, not the move: the quota watch of node/core
// (TestQuotaWatchPutsMovedFileBack), the quota audit's walk, and on
// Plinth's own nodes the runc wrapper that refuses the ioctl
// (docs/security.md). If this test fails, a kernel now reports the
// change, and the watch could follow it too.
func TestProjectIDChangeIsNotNotified(t *testing.T) {
	// The inode mark on the directory, and the quota watch's own kind: a
	// filesystem mark in a group reporting directory handles and names
	// (pkg/fanotify). Both run the same fsnotify hooks; the second is
	// the one the watch would use.
	for _, tc := range []struct {
		name       string
		init, mark uint
		mask       uint64
	}{
		{"inode", unix.FAN_REPORT_FID, unix.FAN_MARK_ADD, unix.FAN_ATTRIB | unix.FAN_EVENT_ON_CHILD},
		{"filesystem", unix.FAN_REPORT_DFID_NAME, unix.FAN_MARK_ADD | unix.FAN_MARK_FILESYSTEM, unix.FAN_ATTRIB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := ktest.TempDir(t, "xfs")
			file := filepath.Join(dir, "file")
			if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			fan, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|tc.init|unix.FAN_NONBLOCK|unix.FAN_CLOEXEC, unix.O_RDONLY)
			if err != nil {
				t.Fatalf("fanotify_init: %v", err)
			}
			defer unix.Close(fan)
			if err := unix.FanotifyMark(fan, tc.mark, tc.mask, unix.AT_FDCWD, dir); err != nil {
				t.Fatalf("fanotify_mark: %v", err)
			}
			if err := fsquota.SetProjectID(file, 4243, false); err != nil {
				t.Fatal(err)
			}
			if id, _, err := fsquota.ProjectID(file); err != nil || id != 4243 {
				t.Fatalf("the file's project ID after the change: %d, %v; want 4243", id, err)
			}
			if n := attribEvents(t, fan); n != 0 {
				t.Errorf("FS_IOC_FSSETXATTR raised %d FAN_ATTRIB events: the kernel now reports project ID changes", n)
			}
			if err := os.Chmod(file, 0o600); err != nil {
				t.Fatal(err)
			}
			if n := attribEvents(t, fan); n == 0 {
				t.Fatal("chmod raised no FAN_ATTRIB event: the watch sees nothing, and the check above proves nothing")
			}
		})
	}
}

// attribEvents waits a moment and counts the FAN_ATTRIB events queued on
// the fanotify descriptor fan.
func attribEvents(t *testing.T, fan int) int {
	t.Helper()
	time.Sleep(200 * time.Millisecond)
	buf := make([]byte, 4096)
	n, err := unix.Read(fan, buf)
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil {
		t.Fatalf("reading fanotify events: %v", err)
	}
	count := 0
	// struct fanotify_event_metadata: event_len u32, vers u8, reserved
	// u8, metadata_len u16, mask u64, fd s32, pid s32.
	for off := 0; off+24 <= n; {
		length := int(binary.NativeEndian.Uint32(buf[off:]))
		if binary.NativeEndian.Uint64(buf[off+8:])&unix.FAN_ATTRIB != 0 {
			count++
		}
		if length < 24 {
			break
		}
		off += length
	}
	return count
}
