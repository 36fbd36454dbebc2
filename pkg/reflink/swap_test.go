package reflink

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopyTreeNeverFollowsASwappedEntry replays the race a writer of the
// source can run against CopyTree: an entry listed as a directory (or a
// file) is replaced by a symbolic link to outside the tree before it is
// opened. The copy must fail with ErrChanged and copy nothing from where
// the link points. It runs on any filesystem: the failure comes before
// any clone.
func TestCopyTreeNeverFollowsASwappedEntry(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"directory", "file"} {
		t.Run(kind, func(t *testing.T) {
			src, dst := t.TempDir(), t.TempDir()
			entry := filepath.Join(src, "entry")
			var err error
			if kind == "directory" {
				err = os.Mkdir(entry, 0o755)
			} else {
				err = os.WriteFile(entry, []byte("mine"), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(sfd)
			dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dfd)
			var st unix.Stat_t
			if err := unix.Fstatat(sfd, "entry", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.Fatal(err)
			}
			// The swap, between the listing's stat and the open.
			if err := os.RemoveAll(entry); err != nil {
				t.Fatal(err)
			}
			target := outside
			if kind == "file" {
				target = filepath.Join(outside, "secret")
			}
			if err := os.Symlink(target, entry); err != nil {
				t.Fatal(err)
			}
			c := copier{ctx: context.Background(), dev: st.Dev, dstRoot: dfd, links: map[uint64]string{}}
			if kind == "directory" {
				err = c.subdir(sfd, dfd, "entry", "entry", &st)
			} else {
				err = c.file(sfd, dfd, "entry", "entry", &st)
			}
			if !errors.Is(err, ErrChanged) {
				t.Errorf("copying a %s swapped for a link = %v, want ErrChanged", kind, err)
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "entry", "secret")); len(got) > 0 {
				t.Errorf("the copy reached outside the tree: %q", got)
			}
			if got, _ := os.ReadFile(filepath.Join(dst, "entry")); len(got) > 0 {
				t.Errorf("the copy reached outside the tree: %q", got)
			}
		})
	}
}
