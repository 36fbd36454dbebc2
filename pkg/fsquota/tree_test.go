package fsquota_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/test/ktest"
)

// TestRestoreTreeEndsAnEscape plays a volume's user who moves a
// subdirectory out of the volume's project and writes past the limit, then
// checks that RestoreTree finds every stray, charges them to the project
// again (so the next write fails), and touches nothing it must not: a
// link's target outside the tree, a FIFO (opening it would block), files
// that were right.
func TestRestoreTreeEndsAnEscape(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			ctx := context.Background()
			dir, id := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			other, otherID := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			victim := filepath.Join(other, "victim")
			if err := writeFile(victim, 4096); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(filepath.Join(dir, "right"), MiB); err != nil {
				t.Fatal(err)
			}
			// The escape: a directory moved to project 0, its PROJINHERIT
			// cleared, and 6 MiB written below it into a 4 MiB volume.
			escape := filepath.Join(dir, "escape")
			deep := filepath.Join(escape, "a", "b")
			if err := os.MkdirAll(deep, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{escape, filepath.Join(escape, "a"), deep} {
				if err := fsquota.SetProjectID(d, 0, false); err != nil {
					t.Fatal(err)
				}
			}
			if err := writeFile(filepath.Join(escape, "big"), 4*MiB); err != nil {
				t.Fatalf("the escape did not work (writing 4 MiB into a directory moved to project 0): %v", err)
			}
			if err := writeFile(filepath.Join(deep, "more"), 2*MiB); err != nil {
				t.Fatal(err)
			}
			// A directory with the right ID whose new files would take
			// project 0.
			noInherit := filepath.Join(dir, "no-inherit")
			if err := os.Mkdir(noInherit, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetProjectID(noInherit, id, false); err != nil {
				t.Fatal(err)
			}
			// What must be left alone.
			if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := getQuota(t, dir)
			if before.UsedBytes > 2*MiB {
				t.Fatalf("the volume's usage counts %d bytes before the walk; the escaped 6 MiB should not be in it", before.UsedBytes)
			}

			r, err := fsquota.RestoreTree(ctx, dir, id, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("RestoreTree: %+v", r)
			// Strays: escape, a, b (moved), big, more (created in them),
			// no-inherit (flag). Checked: those, the top and "right".
			if r.Strays != 6 || r.Checked != 8 || r.StrayBytes < 6*MiB || r.StrayBytes > 6*MiB+64<<10 ||
				r.FirstStray == "" || r.Failed != 0 || r.Unchecked != 0 {
				t.Errorf("RestoreTree = %+v, want 6 strays holding 6 MiB among 8 entries", r)
			}
			after := getQuota(t, dir)
			if after.UsedBytes < 7*MiB {
				t.Errorf("usage after the walk = %d bytes, want the 7 MiB the volume holds", after.UsedBytes)
			}
			if err := writeFile(filepath.Join(escape, "again"), 4096); !errors.Is(err, fs.overErr) && !errors.Is(err, unix.EDQUOT) {
				t.Errorf("writing into the repaired directory of a volume over its limit: %v, want %v", err, fs.overErr)
			}
			for _, p := range []string{escape, deep, filepath.Join(deep, "more"), noInherit} {
				got, inherit, err := fsquota.ProjectID(p)
				if err != nil || got != id || (inherit != (p != filepath.Join(deep, "more"))) {
					t.Errorf("%s after the walk: project %d, inherit %v, %v; want project %d", p, got, inherit, err, id)
				}
			}
			if got, _, err := fsquota.ProjectID(victim); err != nil || got != otherID {
				t.Errorf("the link's target outside the tree: project %d, %v; want %d, untouched", got, err, otherID)
			}
			os.Remove(filepath.Join(escape, "again")) // ext4 creates it before refusing its data
			again, err := fsquota.RestoreTree(ctx, dir, id, nil)
			if err != nil || again.Strays != 0 || again.Checked != r.Checked {
				t.Errorf("a second walk = %+v, %v; want no strays among %d entries", again, err, r.Checked)
			}
		})
	}
}

// TestRestoreTreeStopsWhenPaced checks that pace's error ends the walk.
func TestRestoreTreeStopsWhenPaced(t *testing.T) {
	dir, id := volume(t, "xfs", fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
	for _, n := range []string{"a", "b", "c", "d"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	stop := errors.New("enough")
	r, err := fsquota.RestoreTree(context.Background(), dir, id, func(context.Context) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || r.Checked != 3 {
		t.Errorf("RestoreTree paced to stop at the third entry = %+v, %v; want 3 checked (the top and two files) and the pace's error", r, err)
	}
}

// TestRestoreTreeStaysOutOfMounts bind-mounts another volume of the same
// filesystem inside a tree, as the kubelet mounts pods' volumes below its
// root, and checks that RestoreTree leaves the mounted volume's files in
// their own project and counts the mount point.
func TestRestoreTreeStaysOutOfMounts(t *testing.T) {
	dir, id := volume(t, "xfs", fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
	other, otherID := volume(t, "xfs", fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
	if err := writeFile(filepath.Join(other, "theirs"), 4096); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "pods", "volume")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(other, target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(target, unix.MNT_DETACH)
	r, err := fsquota.RestoreTree(context.Background(), dir, id, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mounts != 1 || r.Failed != 0 {
		t.Errorf("RestoreTree = %+v, want one mount point skipped and no failure", r)
	}
	for _, p := range []string{other, filepath.Join(other, "theirs")} {
		if got, _, err := fsquota.ProjectID(p); err != nil || got != otherID {
			t.Errorf("%s, reached through a bind mount inside the tree: project %d, %v; want %d, untouched", p, got, err, otherID)
		}
	}
}

// TestRestoreAtPutsOneEntryBack moves a file of a volume into a
// neighbour's project, and checks that RestoreAt on its name puts it back
// (the bytes counting against its own project again), leaves the right
// ones alone, and neither follows a symbolic link nor opens a FIFO.
func TestRestoreAtPutsOneEntryBack(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			ctx := context.Background()
			dir, id := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			other, otherID := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			moved := filepath.Join(dir, "moved")
			if err := writeFile(moved, MiB); err != nil {
				t.Fatal(err)
			}
			if err := fsquota.SetProjectID(moved, otherID, false); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(other, "x"), filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			if err := writeFile(filepath.Join(other, "x"), 4096); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
				t.Fatal(err)
			}
			dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dfd)

			r, err := fsquota.RestoreAt(ctx, dfd, "moved", id)
			if err != nil || r.Strays != 1 || r.StrayBytes < MiB || r.FirstStray != "moved" {
				t.Errorf("RestoreAt of the moved file = %+v, %v; want it put back, 1 MiB", r, err)
			}
			if got, _, err := fsquota.ProjectID(moved); err != nil || got != id {
				t.Errorf("the moved file's project after RestoreAt: %d, %v; want %d", got, err, id)
			}
			for _, name := range []string{"moved", "link", "fifo"} {
				if r, err := fsquota.RestoreAt(ctx, dfd, name, id); err != nil || r.Strays != 0 {
					t.Errorf("RestoreAt of %s = %+v, %v; want nothing to do", name, r, err)
				}
			}
			if got, _, err := fsquota.ProjectID(filepath.Join(other, "x")); err != nil || got != otherID {
				t.Errorf("the link's target is in project %d (%v); RestoreAt followed the link", got, err)
			}
			if _, err := fsquota.RestoreAt(ctx, dfd, "gone", id); !errors.Is(err, unix.ENOENT) {
				t.Errorf("RestoreAt of a missing entry: %v, want ENOENT", err)
			}
		})
	}
}

// TestReleaseAtTakesOnlyTheRange plays a directory outside every volume
// (an emptyDir) whose process moved a file, and the directory itself
// with PROJINHERIT, into a volume's project: ReleaseAt gives both the ID
// asked for (0 here, without PROJINHERIT), counts the file's bytes, and
// leaves alone a file of a project outside the range (an operator's).
func TestReleaseAtTakesOnlyTheRange(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			ctx := context.Background()
			_, id := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			dir := ktest.TempDir(t, fs.disk)
			moved, theirs := filepath.Join(dir, "moved"), filepath.Join(dir, "theirs")
			for _, f := range []struct {
				path string
				id   uint32
			}{{moved, id}, {theirs, 7}} {
				if err := writeFile(f.path, MiB); err != nil {
					t.Fatal(err)
				}
				if err := fsquota.SetProjectID(f.path, f.id, false); err != nil {
					t.Fatal(err)
				}
			}
			if err := fsquota.SetProjectID(dir, id, true); err != nil {
				t.Fatal(err)
			}
			dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(dfd)

			if _, err := fsquota.ReleaseAt(ctx, dfd, "moved", id, id, id); err == nil {
				t.Error("ReleaseAt to an ID within the range it takes away: no error")
			}
			r, err := fsquota.ReleaseAt(ctx, dfd, "moved", id, id+100, 0)
			if err != nil || r.Strays != 1 || r.StrayBytes < MiB {
				t.Errorf("ReleaseAt of the moved file = %+v, %v; want it released, 1 MiB", r, err)
			}
			if r, err := fsquota.ReleaseAt(ctx, dfd, ".", id, id+100, 0); err != nil || r.Strays != 1 {
				t.Errorf("ReleaseAt of the directory = %+v, %v; want it released", r, err)
			}
			if r, err := fsquota.ReleaseAt(ctx, dfd, "theirs", id, id+100, 0); err != nil || r.Strays != 0 {
				t.Errorf("ReleaseAt of a file of project 7 = %+v, %v; want nothing to do", r, err)
			}
			for _, c := range []struct {
				path    string
				id      uint32
				inherit bool
			}{{moved, 0, false}, {dir, 0, false}, {theirs, 7, false}} {
				got, inherit, err := fsquota.ProjectID(c.path)
				if err != nil || got != c.id || inherit != c.inherit {
					t.Errorf("%s after ReleaseAt: project %d, PROJINHERIT %v, %v; want %d, %v", c.path, got, inherit, err, c.id, c.inherit)
				}
			}
		})
	}
}

// TestReleaseTreeLeavesExceptAlone: ReleaseTree releases every entry
// below its top that carries an ID of its range (a file moved into a
// quota, deep down, and a directory), leaves entries of other IDs as
// they are, and does not enter the directories it is told to leave
// (standing for the volumes' own trees, whose entries carry the range's
// IDs rightly).
func TestReleaseTreeLeavesExceptAlone(t *testing.T) {
	for _, fs := range quotaFS {
		t.Run(fs.disk, func(t *testing.T) {
			ctx := context.Background()
			_, id := volume(t, fs.disk, fsquota.Limits{Bytes: 4 * MiB, Inodes: 1000})
			top := ktest.TempDir(t, fs.disk)
			deep, kept := filepath.Join(top, "a", "b"), filepath.Join(top, "volumes")
			for _, d := range []string{deep, kept} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			moved, theirs, own := filepath.Join(deep, "moved"), filepath.Join(deep, "theirs"), filepath.Join(kept, "own")
			for _, f := range []struct {
				path string
				id   uint32
			}{{moved, id}, {theirs, 7}, {own, id}, {kept, id}, {filepath.Join(top, "a"), id}} {
				if _, err := os.Stat(f.path); os.IsNotExist(err) {
					if err := writeFile(f.path, MiB); err != nil {
						t.Fatal(err)
					}
				}
				if err := fsquota.SetProjectID(f.path, f.id, false); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := fsquota.ReleaseTree(ctx, top, id, id, id, nil, nil); err == nil {
				t.Error("ReleaseTree to an ID within the range it takes away: no error")
			}
			r, err := fsquota.ReleaseTree(ctx, top, id, id+100, 0, []string{kept, filepath.Join(top, "absent")}, nil)
			if err != nil || r.Strays != 2 || r.StrayBytes < MiB {
				t.Errorf("ReleaseTree = %+v, %v; want the moved file and directory a released, 1 MiB", r, err)
			}
			for _, c := range []struct {
				path string
				id   uint32
			}{{moved, 0}, {filepath.Join(top, "a"), 0}, {theirs, 7}, {own, id}, {kept, id}} {
				if got, _, err := fsquota.ProjectID(c.path); err != nil || got != c.id {
					t.Errorf("%s after ReleaseTree: project %d, %v; want %d", c.path, got, err, c.id)
				}
			}
		})
	}
}
