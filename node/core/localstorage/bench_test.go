package localstorage

import (
	"os"
	"testing"
)

// BenchmarkWrite measures what safety costs a state record (a CSI
// publication, an intent): WriteAtomic and WriteAtomicNoSync against the
// plain write with fsync they improve on (baseline "fsync": durable
// content, but a crash mid-write leaves a torn or empty file) and against
// a plain write with no fsync (the floor).
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	var d Directory
	if err := Place(&d, dir); err != nil {
		b.Fatal(err)
	}
	f, err := d.ChildFile("record")
	if err != nil {
		b.Fatal(err)
	}
	data := []byte(`{"volume":"pvc-0f6c6e1e-8c1a-4b8e-9a51-4c3f4d2b9e10","loop":"/dev/loop7","target":"/var/lib/kubelet/pods/x/volumes/y"}`)
	b.Run("impl=atomic", func(b *testing.B) {
		for b.Loop() {
			if err := f.WriteAtomic(data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=atomic-nosync", func(b *testing.B) {
		for b.Loop() {
			if err := f.WriteAtomicNoSync(data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=fsync", func(b *testing.B) {
		for b.Loop() {
			w, err := os.OpenFile(f.FullPath(), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := w.Sync(); err != nil {
				b.Fatal(err)
			}
			w.Close()
		}
	})
	b.Run("impl=nosync", func(b *testing.B) {
		for b.Loop() {
			if err := os.WriteFile(f.FullPath(), data, 0o600); err != nil {
				b.Fatal(err)
			}
		}
	})
}
