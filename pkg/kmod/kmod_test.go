package kmod

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestReadList(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "modules.list")
	if err := os.WriteFile(list, []byte("# dependencies first\n\n/lib/modules/virtio_mmio.ko\n  /lib/modules/xfs.ko  \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadList(list)
	if want := []string{"/lib/modules/virtio_mmio.ko", "/lib/modules/xfs.ko"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ReadList = %q, %v; want %q", got, err, want)
	}
	if got, err := ReadList(filepath.Join(dir, "absent.list")); err != nil || got != nil {
		t.Errorf("ReadList of a missing list = %q, %v; want nothing", got, err)
	}
	if _, err := ReadList(dir); err == nil || !strings.Contains(err.Error(), "reading module list") {
		t.Errorf("ReadList of a directory = %v, want an error", err)
	}
}

func TestFormatListRoundTrip(t *testing.T) {
	paths := []string{"/ktest/modules/virtio_blk.ko", "/ktest/modules/xfs.ko"}
	list := filepath.Join(t.TempDir(), "modules.list")
	if err := os.WriteFile(list, FormatList(paths), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadList(list); err != nil || !slices.Equal(got, paths) {
		t.Errorf("ReadList(FormatList(%q)) = %q, %v", paths, got, err)
	}
}

func TestLoadReportsFailures(t *testing.T) {
	// Only failures can be tested on a host (loading would change its
	// kernel); plinth-node's boot test and the kernel tests load real
	// modules.
	p := "/nonexistent/xfs.ko"
	err := Load(p)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "loading module "+p) {
		t.Errorf("Load(%s) = %v, want ErrNotExist naming the module", p, err)
	}
}
