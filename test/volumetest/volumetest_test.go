package volumetest

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"source.plinth.dev/pkg/fsquota"
)

func TestDataDir(t *testing.T) {
	dir := t.TempDir()
	d, qerr := DataDir(t, dir)
	if d.FullPath() != dir || d.Volumes.FullPath() != filepath.Join(dir, "volumes") {
		t.Errorf("data tree placed at %s, volumes at %s", d.FullPath(), d.Volumes.FullPath())
	}
	for _, p := range []string{d.Volumes.FullPath(), d.State.FullPath()} {
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", p, err)
		}
	}
	if want := fsquota.Probe(d.Volumes.FullPath()); (qerr == nil) != (want == nil) {
		t.Errorf("quota verdict %v, probe says %v", qerr, want)
	}
}

// TestCreateFileAs: the helper really writes as the user it is given (a
// directory only root may write to refuses it, one open to all does not),
// and leaves no thread behind with that user's credentials.
func TestCreateFileAs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	closed, open := filepath.Join(dir, "closed"), filepath.Join(dir, "open")
	for p, mode := range map[string]os.FileMode{closed: 0o755, open: 0o777} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		if err := CreateFileAs(closed, "f", 65534, 65534); !errors.Is(err, unix.EACCES) {
			t.Fatalf("CreateFileAs in a 0755 root directory: %v, want EACCES", err)
		}
		if err := CreateFileAs(open, "f", 65534, 65534); err != nil {
			t.Fatalf("CreateFileAs in a 0777 directory: %v", err)
		}
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Errorf("files left behind: %v", ents)
	}
	// Every thread the runtime hands out is still root's.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if uid, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0); uid != 0 {
				t.Errorf("a thread runs as uid %d after CreateFileAs", uid)
			}
			time.Sleep(time.Millisecond)
		})
	}
	wg.Wait()
}
