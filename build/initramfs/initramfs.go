// Package initramfs writes initramfs archives, the kernel test VM's and
// the node image's: a newc cpio archive, made in Go so building it needs
// no cpio, kmod or root, and the same inputs always give the same bytes.
// It also finds what goes into one: kernel modules with their
// dependencies (Modules) and the shared libraries of dynamically linked
// programs (Libraries).
//
// Two kernel quirks shape it. The kernel's unpacker drops a file whose
// parent directory is not in the archive, without a message, so Writer
// emits every parent directory first. And the VM has no modprobe, so
// Modules resolves dependencies from each module's .modinfo and returns a
// load order.
package initramfs

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Writer writes a newc ("070701") cpio archive.
type Writer struct {
	w    *bufio.Writer
	off  int64
	ino  uint32
	dirs map[string]bool
	err  error
}

// NewWriter returns a Writer on w. Call Close to write the trailer.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 1<<20), dirs: map[string]bool{"": true, ".": true}}
}

// File adds a regular file with the given permission bits. name is the
// path inside the archive, with or without a leading slash.
func (w *Writer) File(name string, perm fs.FileMode, data []byte) {
	name = clean(name)
	w.parents(name)
	w.entry(name, 0o100000|uint32(perm.Perm()), data, 0, 0)
}

// Dir adds a directory (and its parents).
func (w *Writer) Dir(name string) {
	name = clean(name)
	w.parents(name)
	if !w.dirs[name] {
		w.dirs[name] = true
		w.entry(name, 0o040755, nil, 0, 0)
	}
}

// Symlink adds a symbolic link name pointing at target (stored as is, so
// a relative target stays relative to the link's directory).
func (w *Writer) Symlink(name, target string) {
	name = clean(name)
	w.parents(name)
	w.entry(name, 0o120777, []byte(target), 0, 0)
}

// CharDev adds a character device node, e.g. /dev/console (5, 1), which
// the kernel needs before /init starts to give it a console.
func (w *Writer) CharDev(name string, major, minor uint32) {
	name = clean(name)
	w.parents(name)
	w.entry(name, 0o020600, nil, major, minor)
}

// Close writes the trailer and flushes. It returns the first error of any
// call on w.
func (w *Writer) Close() error {
	w.entry("TRAILER!!!", 0, nil, 0, 0)
	if w.err == nil {
		w.err = w.w.Flush()
	}
	return w.err
}

func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func (w *Writer) parents(name string) {
	dir := path.Dir(name)
	if w.dirs[dir] {
		return
	}
	w.parents(dir)
	w.dirs[dir] = true
	w.entry(dir, 0o040755, nil, 0, 0)
}

func (w *Writer) entry(name string, mode uint32, data []byte, rmajor, rminor uint32) {
	if w.err != nil {
		return
	}
	w.ino++
	// Fields: ino mode uid gid nlink mtime filesize devmajor devminor
	// rdevmajor rdevminor namesize check.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		w.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	w.write([]byte(hdr))
	w.write([]byte(name))
	w.write([]byte{0})
	w.pad()
	w.write(data)
	w.pad()
}

func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(b)
	w.off += int64(n)
	w.err = err
}

// pad aligns to 4 bytes, as newc requires after headers+names and data.
func (w *Writer) pad() {
	if n := w.off % 4; n != 0 {
		w.write(make([]byte, 4-n))
	}
}

// Module is a kernel module file to load in the VM.
type Module struct {
	Name string // e.g. "xfs"
	Path string // host path of the .ko
}

// Modules returns the modules named in want plus everything they depend
// on, in an order that loads dependencies first. modDir is
// lib/modules/<version> of an unpacked kernel package. Modules built into
// the kernel (modules.builtin) are skipped.
func Modules(modDir string, want []string) ([]Module, error) {
	norm := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	index := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".ko") {
			index[norm(strings.TrimSuffix(d.Name(), ".ko"))] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("indexing modules in %s: %w", modDir, err)
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			builtin[norm(strings.TrimSuffix(path.Base(l), ".ko"))] = true
		}
	}
	var order []Module
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name string, from []string) error
	visit = func(name string, from []string) error {
		name = norm(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(from, " -> "), name)
		case 2:
			return nil
		}
		p, ok := index[name]
		if !ok {
			if builtin[name] {
				state[name] = 2
				return nil
			}
			return fmt.Errorf("module %s (needed by %v) not found in %s", name, from, modDir)
		}
		state[name] = 1
		deps, err := dependsOf(p)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, append(from, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, Module{Name: name, Path: p})
		return nil
	}
	for _, m := range want {
		if err := visit(m, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// dependsOf reads "depends=" from a module's .modinfo section.
func dependsOf(ko string) ([]string, error) {
	f, err := elf.Open(ko)
	if err != nil {
		return nil, fmt.Errorf("reading module %s: %w", ko, err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return nil, fmt.Errorf("reading module %s: no .modinfo section", ko)
	}
	data, err := s.Data()
	if err != nil {
		return nil, fmt.Errorf("reading module %s: %w", ko, err)
	}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok && len(v) > 0 {
			return strings.Split(string(v), ","), nil
		}
	}
	return nil, nil
}

// sigMagic ends a module with an appended signature.
const sigMagic = "~Module signature appended~\n"

// StripSignature removes an appended module signature. Verifying
// signatures is slow under TCG, and the Debian kernel does not enforce
// them (MODULE_SIG_FORCE is off); it only marks itself tainted.
func StripSignature(ko []byte) []byte {
	if !bytes.HasSuffix(ko, []byte(sigMagic)) {
		return ko
	}
	// struct module_signature (12 bytes) precedes the magic; its last
	// field is the big-endian signature length.
	n := len(ko) - len(sigMagic)
	if n < 12 {
		return ko
	}
	sigLen := int(binary.BigEndian.Uint32(ko[n-4 : n]))
	if sigLen > n-12 {
		return ko
	}
	return ko[:n-12-sigLen]
}
