package fanotify_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fanotify"
	"source.plinth.dev/test/ktest"
)

// TestMain lets `make test-kernel` run this package in the kernel VM,
// whose XFS reports file handles.
func TestMain(m *testing.M) { ktest.Main(m) }

// TestWritesMergeIntoOneEvent writes to a file a thousand times and a
// second file once, and checks what the package promises a reader that
// reads in intervals: one event per changed entry, naming it and a
// directory handle that opens as the entry's directory.
func TestWritesMergeIntoOneEvent(t *testing.T) {
	ktest.RequireVM(t)
	top := ktest.TempDir(t, "xfs")
	dir := filepath.Join(top, "d")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := fanotify.Open(top, fanotify.Modify)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := os.Create(filepath.Join(dir, "busy"))
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "quiet"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	events, err := w.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, e := range events {
		names[e.Name]++
		fd, err := w.OpenDir(e.Dir)
		if err != nil {
			t.Fatalf("opening the directory of %q: %v", e.Name, err)
		}
		p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		unix.Close(fd)
		if err != nil || p != dir {
			t.Errorf("the directory of %q opens as %q (%v), want %s", e.Name, p, err, dir)
		}
	}
	if len(events) != 2 || names["busy"] != 1 || names["quiet"] != 1 {
		t.Errorf("1000 writes to busy and 1 to quiet gave %d events %v; want one each", len(events), names)
	}
}

// TestReadEndsWithContext checks that a Read waiting for events returns
// when its context ends.
func TestReadEndsWithContext(t *testing.T) {
	ktest.RequireVM(t)
	w, err := fanotify.Open(ktest.TempDir(t, "xfs"), fanotify.Modify)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := w.Read(ctx); err != context.Canceled {
		t.Errorf("Read with an ended context: %v, want context.Canceled", err)
	}
}
