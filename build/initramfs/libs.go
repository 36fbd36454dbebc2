package initramfs

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// SystemLibDirs are the directories Debian's dynamic loader searches after
// RPATH/RUNPATH (`ld.so --help` lists them), in its order. An initramfs
// has no /etc/ld.so.cache, so these are all the loader finds there: a
// library the host finds only through ld.so.conf would be missing at run
// time, and Libraries does not look there either.
var SystemLibDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}

// LibEntry is one archive entry Libraries asks for: a regular file copied
// from the host, or a symbolic link.
type LibEntry struct {
	// Path inside the archive, absolute: the path the loader opens, the
	// same as on the host.
	Path string
	// Link is the symlink's target as stored on the host; empty for a
	// regular file.
	Link string
	// Source is the host file to copy for a regular file.
	Source string
}

// LibSearch resolves the shared libraries of dynamically linked programs
// the way glibc's loader will inside the initramfs.
type LibSearch struct {
	// Root is the host directory that stands for "/" ("" is "/"); tests
	// point it at a fixture tree.
	Root string
	// Dirs are the default search directories; nil means SystemLibDirs.
	Dirs []string
}

// Libraries returns the entries that make the given programs (absolute
// host paths, below Root) run: their program interpreters (PT_INTERP) and
// every library in the closure of their DT_NEEDED entries, each at the
// path the loader looks it up at, with the symlinks on the way (e.g.
// libfoo.so.1 -> libfoo.so.1.2.3) kept as symlinks. Static programs need
// nothing. The result is sorted by path; a library that cannot be found is
// an error naming it and the object that needs it. Libraries opened with
// dlopen are invisible here.
func (s LibSearch) Libraries(programs []string) ([]LibEntry, error) {
	r := &resolver{s: s, entries: map[string]LibEntry{}, loaded: map[string]bool{}}
	if r.s.Dirs == nil {
		r.s.Dirs = SystemLibDirs
	}
	for _, p := range programs {
		if err := r.program(p); err != nil {
			return nil, err
		}
	}
	out := make([]LibEntry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

type resolver struct {
	s       LibSearch
	entries map[string]LibEntry
	// loaded holds the sonames and paths already loaded: glibc loads a
	// soname once per process, whoever needs it.
	loaded map[string]bool
}

// object is what resolution needs of one ELF file.
type object struct {
	path    string // lookup path (below Root)
	interp  string
	needed  []string
	rpath   []string // DT_RPATH, used only when there is no DT_RUNPATH
	runpath []string
}

func (r *resolver) host(p string) string {
	if r.s.Root == "" {
		return p
	}
	return filepath.Join(r.s.Root, p)
}

func (r *resolver) read(p string) (*object, error) {
	f, err := elf.Open(r.host(p))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	defer f.Close()
	o := &object{path: p}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("reading the interpreter of %s: %w", p, err)
			}
			o.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil {
		return o, nil // static
	}
	if o.needed, err = f.DynString(elf.DT_NEEDED); err != nil {
		return nil, fmt.Errorf("reading DT_NEEDED of %s: %w", p, err)
	}
	for tag, dst := range map[elf.DynTag]*[]string{elf.DT_RPATH: &o.rpath, elf.DT_RUNPATH: &o.runpath} {
		vals, err := f.DynString(tag)
		if err != nil {
			return nil, fmt.Errorf("reading %v of %s: %w", tag, p, err)
		}
		for _, v := range vals {
			*dst = append(*dst, expandPath(v, path.Dir(p))...)
		}
	}
	return o, nil
}

// expandPath splits a DT_RPATH/DT_RUNPATH value and expands the loader's
// substitutions: $ORIGIN (the object's directory), $LIB and $PLATFORM
// with Debian's values on x86-64.
func expandPath(v, origin string) []string {
	var out []string
	for _, d := range strings.Split(v, ":") {
		if d == "" {
			continue
		}
		for _, sub := range []struct{ k, v string }{{"ORIGIN", origin}, {"LIB", "lib/x86_64-linux-gnu"}, {"PLATFORM", "x86_64"}} {
			d = strings.ReplaceAll(d, "${"+sub.k+"}", sub.v)
			d = strings.ReplaceAll(d, "$"+sub.k, sub.v)
		}
		out = append(out, path.Clean(d))
	}
	return out
}

// searchDirs is where the loader looks for the libraries obj needs: its
// DT_RUNPATH if it has one; otherwise its DT_RPATH and those of the
// objects that loaded it, up to the program (those without a DT_RUNPATH),
// then the default directories.
func searchDirs(obj *object, loaders []*object, defaults []string) []string {
	var dirs []string
	if len(obj.runpath) > 0 {
		dirs = append(dirs, obj.runpath...)
	} else {
		chain := append([]*object{obj}, loaders...)
		for _, o := range chain {
			if len(o.runpath) == 0 {
				dirs = append(dirs, o.rpath...)
			}
		}
	}
	return append(dirs, defaults...)
}

func (r *resolver) program(p string) error {
	obj, err := r.read(p)
	if err != nil {
		return err
	}
	if obj.interp == "" && len(obj.needed) == 0 {
		return nil
	}
	if obj.interp != "" {
		if _, err := r.add(obj.interp); err != nil {
			return fmt.Errorf("the interpreter of %s: %w", p, err)
		}
		// The loader is loaded under its soname too, so a library that
		// needs ld-linux-x86-64.so.2 gets this one.
		r.loaded[path.Base(obj.interp)] = true
	}
	return r.needs(obj, nil)
}

// needs loads the libraries obj needs, breadth first as the loader does.
func (r *resolver) needs(obj *object, loaders []*object) error {
	var next []*object
	for _, name := range obj.needed {
		if r.loaded[name] {
			continue
		}
		var lib string
		if strings.Contains(name, "/") {
			lib = name
		} else {
			var tried []string
			for _, d := range searchDirs(obj, loaders, r.s.Dirs) {
				c := path.Join(d, name)
				tried = append(tried, d)
				if r.compatible(c) {
					lib = c
					break
				}
			}
			if lib == "" {
				return fmt.Errorf("library %s, needed by %s, not found in %s: %w", name, obj.path, strings.Join(tried, ":"), fs.ErrNotExist)
			}
		}
		r.loaded[name] = true
		if r.loaded[lib] {
			continue
		}
		r.loaded[lib] = true
		if _, err := r.add(lib); err != nil {
			return fmt.Errorf("library %s, needed by %s: %w", name, obj.path, err)
		}
		o, err := r.read(lib)
		if err != nil {
			return err
		}
		next = append(next, o)
	}
	chain := append([]*object{obj}, loaders...)
	for _, o := range next {
		if err := r.needs(o, chain); err != nil {
			return err
		}
	}
	return nil
}

// compatible reports whether p exists and is an ELF object for this
// machine; the loader skips others (e.g. a 32-bit library of the same
// name) and goes on searching.
func (r *resolver) compatible(p string) bool {
	f, err := elf.Open(r.host(p))
	if err != nil {
		return false
	}
	defer f.Close()
	return f.Class == elf.ELFCLASS64 && f.Machine == elf.EM_X86_64
}

// maxLinks bounds symlink chains, as the kernel's ELOOP does.
const maxLinks = 40

// add records the entries that make p resolve inside the archive: each
// symlink on the way as a symlink, and the regular file at the end. It
// returns that file's path.
func (r *resolver) add(p string) (string, error) {
	for range maxLinks {
		fi, err := os.Lstat(r.host(p))
		if err != nil {
			return "", err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(r.host(p))
			if err != nil {
				return "", err
			}
			r.entries[p] = LibEntry{Path: p, Link: target}
			if path.IsAbs(target) {
				p = path.Clean(target)
			} else {
				p = path.Join(path.Dir(p), target)
			}
		case fi.Mode().IsRegular():
			r.entries[p] = LibEntry{Path: p, Source: r.host(p)}
			return p, nil
		default:
			return "", fmt.Errorf("%s is neither a file nor a symlink (%v)", p, fi.Mode().Type())
		}
	}
	return "", fmt.Errorf("%s: %w", p, errors.New("too many levels of symbolic links"))
}
