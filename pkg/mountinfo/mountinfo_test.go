package mountinfo_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/mountinfo"
	"source.plinth.dev/pkg/mountinfo/mounttest"
	"source.plinth.dev/test/ktest"
)

// The real-mount test also runs in the kernel test VM.
func TestMain(m *testing.M) { ktest.Main(m) }

// fixture is a table as the kernel writes it, with every escape it uses
// in the fields that carry paths.
const fixture = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
23 22 0:5 / /dev rw,nosuid shared:2 master:7 - devtmpfs devtmpfs rw,size=4096k
24 22 0:40 / /mnt/with\040space rw - tmpfs tmpfs rw
25 22 8:1 /srv/back\134slash /mnt/tab\011and\012newline rw,nodev - ext4 /dev/disk\040one rw

26 22 0:41 / /mnt/plain ro - fuse.sshfs host:/a\040b rw,user_id=0
`

func TestParseFixture(t *testing.T) {
	got, err := mountinfo.Parse(strings.NewReader(fixture))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountinfo.Mount{
		{ID: 22, Parent: 1, Major: 8, Minor: 1, Root: "/", MountPoint: "/", Options: "rw,relatime", Optional: []string{"shared:1"}, FSType: "ext4", Source: "/dev/sda1", SuperOptions: "rw,errors=remount-ro"},
		{ID: 23, Parent: 22, Major: 0, Minor: 5, Root: "/", MountPoint: "/dev", Options: "rw,nosuid", Optional: []string{"shared:2", "master:7"}, FSType: "devtmpfs", Source: "devtmpfs", SuperOptions: "rw,size=4096k"},
		{ID: 24, Parent: 22, Major: 0, Minor: 40, Root: "/", MountPoint: "/mnt/with space", Options: "rw", FSType: "tmpfs", Source: "tmpfs", SuperOptions: "rw"},
		{ID: 25, Parent: 22, Major: 8, Minor: 1, Root: `/srv/back\slash`, MountPoint: "/mnt/tab\tand\nnewline", Options: "rw,nodev", FSType: "ext4", Source: "/dev/disk one", SuperOptions: "rw"},
		{ID: 26, Parent: 22, Major: 0, Minor: 41, Root: "/", MountPoint: "/mnt/plain", Options: "ro", FSType: "fuse.sshfs", Source: "host:/a b", SuperOptions: "rw,user_id=0"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse:\n got %+v\nwant %+v", got, want)
	}
	if at := mountinfo.At(got, "/mnt/with space"); len(at) != 1 || at[0].ID != 24 {
		t.Errorf("At(/mnt/with space) = %+v, want mount 24", at)
	}
	var under []int
	for _, m := range mountinfo.Under(got, "/mnt/") {
		under = append(under, m.ID)
	}
	if !reflect.DeepEqual(under, []int{24, 25, 26}) {
		t.Errorf("Under(/mnt/) = %v, want [24 25 26]", under)
	}
	if n := len(mountinfo.Under(got, "/")); n != 4 {
		t.Errorf("Under(/) = %d mounts, want 4 (all but / itself)", n)
	}
}

func TestParseRejectsMalformedLines(t *testing.T) {
	for _, line := range []string{
		"short line",
		"22 1 8:1 / / rw shared:1 ext4 /dev/sda1 rw",    // no separator
		"22 1 8:1 / / rw - ext4 /dev/sda1",              // too few after it
		"22 1 8:1 / / rw - ext4 /dev/sda1 rw extra",     // too many
		"x 1 8:1 / / rw - ext4 /dev/sda1 rw",            // ID
		"22 1 8-1 / / rw - ext4 /dev/sda1 rw",           // device
		"22 1 8:1 / / rw shared:1 - ext4 /dev/sda1\trw", // not space-separated
	} {
		if m, err := mountinfo.Parse(strings.NewReader(fixture + line + "\n")); err == nil {
			t.Errorf("Parse accepted %q: %+v", line, m[len(m)-1])
		}
	}
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/plain`:            "/tmp/plain",
		`/tmp/with\040space`:    "/tmp/with space",
		`/tmp/tab\011x`:         "/tmp/tab\tx",
		`/tmp/new\012line`:      "/tmp/new\nline",
		`/tmp/back\134slash`:    `/tmp/back\slash`,
		`\040lead\040`:          " lead ",
		`/tmp/back\134040`:      `/tmp/back\040`, // decoded once, not twice
		`/tmp/trailing\04`:      `/tmp/trailing\04`,
		`/tmp/not\089octal`:     `/tmp/not\089octal`,
		`/tmp/too\777big`:       `/tmp/too\777big`,
		`/tmp/bare\x`:           `/tmp/bare\x`,
		"/tmp/utf8-\u00e9\\040": "/tmp/utf8-\u00e9 ",
	} {
		if got := mountinfo.Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestReadDecodesRealMount bind-mounts a directory at a path with every
// character the kernel escapes and finds it in the process's table.
func TestReadDecodesRealMount(t *testing.T) {
	ktest.RequireRoot(t)
	dir := t.TempDir()
	src := filepath.Join(dir, `source dir\x`)
	target := filepath.Join(dir, "with space\ttab\nnewline\\backslash")
	for _, d := range []string{src, target} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			if err := unix.Unmount(target, 0); err != nil {
				t.Errorf("unmounting %q: %v", target, err)
			}
			mounted = false
		}
	}
	defer unmount()

	mounts, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	at := mountinfo.At(mounts, target)
	if len(at) != 1 {
		t.Fatalf("At(%q) found %d mounts, want 1", target, len(at))
	}
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil {
		t.Fatal(err)
	}
	m := at[0]
	if m.Major != unix.Major(st.Dev) || m.Minor != unix.Minor(st.Dev) {
		t.Errorf("device %d:%d, want %d:%d (st_dev of the target)", m.Major, m.Minor, unix.Major(st.Dev), unix.Minor(st.Dev))
	}
	// The root is the source's path within its filesystem, which is where
	// the temporary directory lives: its tail is the source's name.
	if !strings.HasSuffix(m.Root, `/source dir\x`) {
		t.Errorf("root %q, want the bind source %q", m.Root, src)
	}
	if under := mountinfo.Under(mounts, dir); len(under) != 1 || under[0].MountPoint != target {
		t.Errorf("Under(%q) = %+v, want the one bind mount", dir, under)
	}
	byPID, err := mountinfo.ReadPID(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(mountinfo.At(byPID, target)) != 1 {
		t.Errorf("ReadPID(self) does not list %q", target)
	}
	if n := mounttest.Count(t, target); n != 1 {
		t.Errorf("mounttest.Count = %d, want 1", n)
	}
	if n := mounttest.Mentions(t, target); n != 1 {
		t.Errorf("mounttest.Mentions(target) = %d, want 1", n)
	}

	unmount()
	if n := mounttest.Count(t, target); n != 0 {
		t.Errorf("mounttest.Count after unmount = %d, want 0", n)
	}
	if n := mounttest.Mentions(t, dir+"/"); n != 0 {
		t.Errorf("mounttest.Mentions(dir) after unmount = %d, want 0", n)
	}
}
