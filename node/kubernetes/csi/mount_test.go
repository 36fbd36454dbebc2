package csi

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBindFlagsReachPropagatedCopies: a plugin in a container mounts into
// the kubelet's directory through Bidirectional propagation, and the host
// and the pod see copies of its mounts. Those copies must be nosuid and
// nodev (and read-only when asked) as much as the plugin's own mount. Here
// the propagation is two peers of one shared tmpfs: the plugin mounts at
// one, the copy appears at the other.
func TestBindFlagsReachPropagatedCopies(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root")
		}
		t.Skip("needs root (mounts)")
	}
	dir := t.TempDir()
	plugin, host, source := filepath.Join(dir, "plugin"), filepath.Join(dir, "host"), filepath.Join(dir, "source")
	for _, d := range []string{plugin, host, source} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", plugin, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(plugin, unix.MNT_DETACH) })
	if err := unix.Mount("", plugin, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(plugin, host, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(host, unix.MNT_DETACH) })

	for _, c := range []struct {
		name     string
		readOnly bool
	}{{"rw", false}, {"ro", true}} {
		target := filepath.Join(plugin, c.name)
		if err := os.Mkdir(target, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := bindMount(source, target, bindFlags(nil, c.readOnly)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
		for _, p := range []string{target, filepath.Join(host, c.name)} {
			var st unix.Statfs_t
			if err := unix.Statfs(p, &st); err != nil {
				t.Fatal(err)
			}
			want := int64(unix.ST_NOSUID | unix.ST_NODEV)
			if c.readOnly {
				want |= unix.ST_RDONLY
			}
			if st.Flags&want != want {
				t.Errorf("%s: mount flags %#x, want %#x set", p, st.Flags, want)
			}
			if !c.readOnly && st.Flags&unix.ST_RDONLY != 0 {
				t.Errorf("%s: read-only, want read-write", p)
			}
		}
	}
}
