package loop_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/test/ktest"
)

// BenchmarkCreateRemove measures attaching and freeing a block volume's
// loop device with this package and, as the baseline, with the losetup
// program, while 0 or 200 other loop devices exist. Goal: the library is at
// least 10x faster than losetup and flat in the number of devices (make
// bench prints the ratio existing=200 / existing=0).
func BenchmarkCreateRemove(b *testing.B) {
	ktest.RequireRoot(b)
	for _, existing := range []int{0, 200} {
		b.Run(fmt.Sprintf("existing=%d", existing), func(b *testing.B) {
			occupy(b, existing)
			path := backing(b, "", 16*MiB)
			// Create+Detach does what losetup --find + --detach do;
			// Create+Remove also deletes the device node each time.
			for _, impl := range []struct {
				name string
				free func(*loop.Device) error
			}{
				{"library", (*loop.Device).Detach},
				{"library-remove", (*loop.Device).Remove},
			} {
				b.Run("impl="+impl.name, func(b *testing.B) {
					f, err := os.OpenFile(path, os.O_RDWR, 0)
					if err != nil {
						b.Fatal(err)
					}
					defer f.Close()
					for b.Loop() {
						d, err := loop.Create(f, loop.Options{DirectIO: true})
						if err != nil {
							b.Fatal(err)
						}
						if err := impl.free(d); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("impl=losetup", func(b *testing.B) {
				// The baseline is half the benchmark's claim: without
				// it the comparison would silently vanish from the
				// report, so a missing program fails (make bench
				// installs util-linux).
				if _, err := exec.LookPath("losetup"); err != nil {
					b.Fatalf("the baseline needs the losetup program (util-linux): %v", err)
				}
				for b.Loop() {
					out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", path).Output()
					if err != nil {
						b.Fatalf("losetup --find: %v", err)
					}
					dev := strings.TrimSpace(string(out))
					if err := exec.Command("losetup", "--detach", dev).Run(); err != nil {
						b.Fatalf("losetup --detach %s: %v", dev, err)
					}
				}
			})
		})
	}
}

// occupy creates n bound loop devices for the duration of the benchmark.
func occupy(b *testing.B, n int) {
	if n == 0 {
		return
	}
	dir := b.TempDir()
	devs := make([]*loop.Device, 0, n)
	b.Cleanup(func() {
		for _, d := range devs {
			if err := d.Remove(); err != nil {
				b.Error(err)
			}
		}
	})
	for i := range n {
		f, err := os.Create(fmt.Sprintf("%s/%d.img", dir, i))
		if err != nil {
			b.Fatal(err)
		}
		err = f.Truncate(MiB)
		if err == nil {
			var d *loop.Device
			d, err = loop.Create(f, loop.Options{})
			if d != nil {
				devs = append(devs, d)
			}
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
}
