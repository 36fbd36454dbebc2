package volume

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/test/volumetest"
)

// A pod's user and its fsGroup, as the kubelet would run a pod with
// runAsUser 65534 and, where a test says so, fsGroup 4242.
const (
	podUID, podGID = 65534, 65534
	fsGroup        = 4242
)

// TestRootDirMode: a filesystem volume's root directory is made 0777 (so a
// pod running as any user can write, fsGroup or not) unless Create is
// given a stricter mode; with 0770 a pod's user can write only once the
// directory's group is the pod's fsGroup, which is what the kubelet sets
// for a pod that asks for one (fsGroupPolicy File). The mode is exact
// whatever the umask, the directory is root's, and a later Create does not
// touch it.
func TestRootDirMode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		m := newManagerOn(t, b)
		ctx := context.Background()
		old := syscall.Umask(0o077) // mkdir alone would give 0700
		t.Cleanup(func() { syscall.Umask(old) })
		for _, tc := range []struct {
			name string
			opts []CreateOption
			want fs.FileMode
			// Whether the pod's user can create a file without and with
			// the fsGroup applied.
			plain, withGroup bool
		}{
			{name: "default", want: 0o777, plain: true, withGroup: true},
			{name: "0770", opts: []CreateOption{WithRootDirMode(0o770)}, want: 0o770, plain: false, withGroup: true},
			{name: "0750", opts: []CreateOption{WithRootDirMode(0o750)}, want: 0o750, plain: false, withGroup: false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				id := "root-" + tc.name
				if _, err := m.Create(ctx, id, Filesystem, MiB, tc.opts...); err != nil {
					t.Fatal(err)
				}
				_, dir, err := m.Locate(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				var st unix.Stat_t
				if err := unix.Stat(dir, &st); err != nil {
					t.Fatal(err)
				}
				if got := fs.FileMode(st.Mode & 0o7777); got != tc.want || st.Uid != 0 || st.Gid != 0 {
					t.Errorf("root directory mode %04o owner %d:%d; want %04o, 0:0", got, st.Uid, st.Gid, tc.want)
				}
				err = volumetest.CreateFileAs(dir, "plain", podUID, podGID)
				if tc.plain != (err == nil) || (err != nil && !errors.Is(err, unix.EACCES)) {
					t.Errorf("pod user without fsGroup: %v; want writable=%v (or EACCES)", err, tc.plain)
				}
				// The kubelet's part of an fsGroup: the root's group becomes
				// the fsGroup (it adds group rwx and setgid too, which a
				// mode from the user already has or does not need here).
				if err := os.Chown(dir, -1, fsGroup); err != nil {
					t.Fatal(err)
				}
				err = volumetest.CreateFileAs(dir, "grouped", podUID, podGID, fsGroup)
				if tc.withGroup != (err == nil) || (err != nil && !errors.Is(err, unix.EACCES)) {
					t.Errorf("pod user with fsGroup: %v; want writable=%v (or EACCES)", err, tc.withGroup)
				}
				if err := volumetest.CreateFileAs(dir, "stranger", podUID, podGID); tc.want != 0o777 && err == nil {
					t.Error("a user outside the fsGroup can write to a volume of a stricter mode")
				}
				// Idempotent Create with another mode returns the volume and
				// leaves its mode alone.
				if _, err := m.Create(ctx, id, Filesystem, MiB, WithRootDirMode(0o700)); err != nil {
					t.Fatal(err)
				}
				if err := unix.Stat(dir, &st); err != nil || fs.FileMode(st.Mode&0o7777) != tc.want {
					t.Errorf("after a second Create: mode %04o, %v; want %04o", st.Mode&0o7777, err, tc.want)
				}
			})
		}
		// More than permission bits, or a mode for a block volume (which
		// has no directory), is refused and leaves nothing behind.
		for name, c := range map[string]struct {
			mode Mode
			perm fs.FileMode
		}{
			"setgid": {Filesystem, fs.ModeSetgid | 0o770},
			"sticky": {Filesystem, fs.ModeSticky | 0o777},
			"setuid": {Filesystem, fs.ModeSetuid | 0o700},
			"block":  {Block, 0o770},
		} {
			if _, err := m.Create(ctx, "bad", c.mode, MiB, WithRootDirMode(c.perm)); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: Create = %v, want ErrInvalid", name, err)
			}
			assertGone(t, m, "bad")
		}
	})
}

func TestParseRootDirMode(t *testing.T) {
	for in, want := range map[string]fs.FileMode{"0770": 0o770, "770": 0o770, "0777": 0o777, "0000": 0, "0705": 0o705} {
		got, err := ParseRootDirMode(in)
		if err != nil || got != want {
			t.Errorf("ParseRootDirMode(%q) = %04o, %v; want %04o", in, got, err, want)
		}
		if back, err := ParseRootDirMode(FormatRootDirMode(got)); err != nil || back != got {
			t.Errorf("FormatRootDirMode(%04o) = %q does not read back: %04o, %v", got, FormatRootDirMode(got), back, err)
		}
	}
	for _, in := range []string{"", "0o770", "0x1ff", "4770", "2770", "1777", "02770", "0778", "77", "07700", " 0770", "0770\n", "-770", "+770", "rwxrwx---", "0 770"} {
		if got, err := ParseRootDirMode(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseRootDirMode(%q) = %04o, %v; want ErrInvalid", in, got, err)
		}
	}
}
