// Package localstorage declares the node's directory tree as typed Go values.
//
// Every directory and file plinth-node, its controllers and its CSI plugin
// touch is a field of a struct in this package. A struct tag gives the on-disk
// name and mode of each field:
//
//	type DataDirectory struct {
//		Directory
//		Volumes VolumesDirectory `dir:"volumes" mode:"0700"`
//	}
//
// Place walks such a declaration by reflection and gives every node its full
// path below a root chosen at run time; MkdirAll walks it again and creates
// the declared directories with the declared modes. Nobody else builds node
// paths by string concatenation, so the tree's shape lives in one place, can
// be read in one place, and is tested in one place. Names that come from
// outside (volume IDs, CSI driver names, record keys) enter the tree only
// through accessors that validate them first, so a hostile name can never
// escape the directory it was meant for.
//
// Subtrees (DataDirectory, EphemeralDirectory, KubeletDirectory) can be placed
// on their own, because the standalone CSI server is given the data and
// kubelet directories as separate flags and the node may be given its kubelet
// directory by flag.
package localstorage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"source.plinth.dev/pkg/dirsync"
)

// Default modes for declared nodes whose tag gives none.
const (
	defaultDirMode  fs.FileMode = 0o755
	defaultFileMode fs.FileMode = 0o644
)

// Node is a declared directory: a Directory, or a struct that embeds one and
// declares its children as tagged fields. Its only method is unexported, so
// only this package's types are nodes.
type Node interface {
	directory() *Directory
}

// Directory is a directory of the tree. Declared directory types embed it;
// a Directory field on its own is a leaf directory.
//
// The zero value is unplaced; FullPath panics on it, because a path of ""
// would silently resolve against the process's working directory.
type Directory struct {
	path string
	// mode is the declared mode; 0 means "placement root": MkdirAll creates
	// it if missing but never changes the mode of an existing one, because
	// the directory we were pointed at belongs to the operator.
	mode fs.FileMode
}

func (d *Directory) directory() *Directory { return d }

// FullPath is the directory's absolute path. It panics if the directory was
// never placed: that is a programming error, never a run-time condition.
func (d *Directory) FullPath() string {
	if d.path == "" {
		panic("localstorage: FullPath of a directory that was never placed")
	}
	return d.path
}

// Placed reports whether the directory has been given a path.
func (d *Directory) Placed() bool { return d.path != "" }

// Mode is the declared permission mode (0 for a placement root, whose mode is
// the operator's business).
func (d *Directory) Mode() fs.FileMode { return d.mode }

// Contains reports whether p, once cleaned, is d itself or lies below it.
// The check is lexical: it does not resolve symlinks, so callers that act on
// p must still refuse to follow links they did not create.
func (d *Directory) Contains(p string) bool { return Within(p, d.FullPath()) }

// Within reports whether the absolute path p, once cleaned, is base itself
// or lies below it. Like Contains, it is lexical.
func Within(p, base string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	rel, err := filepath.Rel(base, filepath.Clean(p))
	if err != nil {
		return false
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, "../"))
}

// ChildFile returns the file called name inside d. The name is validated
// with ValidateName, so it cannot leave d.
func (d *Directory) ChildFile(name string) (File, error) {
	if err := ValidateName(name); err != nil {
		return File{}, err
	}
	return File{path: filepath.Join(d.FullPath(), name), mode: defaultFileMode}, nil
}

// Entries lists the names in d that ChildFile would accept, sorted. Names
// starting with "." (among them the temporary files of an interrupted
// WriteAtomic) are skipped: ValidateName refuses them, so they are never
// records.
func (d *Directory) Entries() ([]string, error) {
	des, err := os.ReadDir(d.FullPath())
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.FullPath(), err)
	}
	var names []string
	for _, de := range des {
		if ValidateName(de.Name()) == nil {
			names = append(names, de.Name())
		}
	}
	return names, nil
}

// Sync fsyncs the directory, making the creations, renames and removals of
// its entries durable. Anything that must survive a crash in the state it
// was left in (a new volume, a removed intent record) needs it after the
// change: the entry's own fsync does not cover its name.
func (d *Directory) Sync() error {
	return dirsync.Sync(d.FullPath())
}

// File is a regular file of the tree, declared with a `file:"name"` tag or
// returned by a validating accessor.
type File struct {
	path string
	mode fs.FileMode
}

// FullPath is the file's absolute path; it panics if the file was never
// placed.
func (f *File) FullPath() string {
	if f.path == "" {
		panic("localstorage: FullPath of a file that was never placed")
	}
	return f.path
}

// Mode is the file's declared mode (0644 unless the tag says otherwise).
func (f *File) Mode() fs.FileMode { return f.mode }

// Read returns the file's content. A missing file gives an error matching
// fs.ErrNotExist.
func (f *File) Read() ([]byte, error) {
	b, err := os.ReadFile(f.FullPath())
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", f.FullPath(), err)
	}
	return b, nil
}

// Remove deletes the file. A file that is already gone is not an error:
// removal is used to undo and to clean up, both of which must be idempotent.
func (f *File) Remove() error {
	if err := os.Remove(f.FullPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", f.FullPath(), err)
	}
	return nil
}

// maxSocketPath is the longest path a unix socket can be bound to on Linux:
// sun_path holds 108 bytes including the terminating NUL.
const maxSocketPath = 107

// Socket is a unix socket path of the tree. Placing a tree whose socket path
// would be too long for bind(2) fails at placement, with the path in the
// error, rather than later with a bare EINVAL.
type Socket struct {
	path string
}

// FullPath is the socket's absolute path; it panics if it was never placed.
func (s *Socket) FullPath() string {
	if s.path == "" {
		panic("localstorage: FullPath of a socket that was never placed")
	}
	return s.path
}

// Remove deletes the socket file; a socket that is already gone is fine.
func (s *Socket) Remove() error {
	if err := os.Remove(s.FullPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing socket %s: %w", s.FullPath(), err)
	}
	return nil
}

func placeSocket(s *Socket, path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("socket path %s is %d bytes, longer than the %d a unix socket allows; use a shorter root directory", path, len(path), maxSocketPath)
	}
	s.path = path
	return nil
}

var (
	directoryType = reflect.TypeFor[Directory]()
	fileType      = reflect.TypeFor[File]()
	socketType    = reflect.TypeFor[Socket]()
)

// Place gives n and every node declared below it a full path, with n at
// path. path must be absolute. Placing again replaces the earlier placement;
// place a tree before sharing it, and treat it as read-only afterwards.
func Place(n Node, path string) error {
	return placeAt(n, path, 0)
}

// Resolve returns path, made absolute, with the symbolic links of the part
// that exists resolved; the rest, which MkdirAll will create, is kept as
// given. The kernel names mounts (/proc/self/mountinfo) and the backing
// files of loop devices by resolved paths, so a tree placed through a link
// would never find its own volumes there, and checks such as "is this
// volume mounted?" would answer no. plinth-node places its trees at
// resolved paths.
func Resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", path, err)
	}
	existing, rest := abs, ""
	for {
		real, err := filepath.EvalSymlinks(existing)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("resolving %s: %w", path, err)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

// placeAt is Place with a declared mode for n itself; accessors that return
// dynamic children with a known mode use it.
func placeAt(n Node, path string, mode fs.FileMode) error {
	if n == nil {
		return errors.New("placing a nil node")
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("placing %T at %q: path must be absolute", n, path)
	}
	v := reflect.ValueOf(n)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("placing %T: need a non-nil pointer", n)
	}
	return placeValue(v.Elem(), filepath.Clean(path), mode)
}

// placeValue places the directory struct v (addressable) at path.
func placeValue(v reflect.Value, path string, mode fs.FileMode) error {
	t := v.Type()
	self, err := embeddedDirectory(v)
	if err != nil {
		return err
	}
	self.path, self.mode = path, mode
	if t == directoryType {
		return nil
	}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Anonymous || !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		switch {
		case sf.Type == fileType:
			name, m, err := fieldTag(t, sf, "file", defaultFileMode)
			if err != nil {
				return err
			}
			f := fv.Addr().Interface().(*File)
			f.path, f.mode = filepath.Join(path, name), m
		case sf.Type == socketType:
			name, _, err := fieldTag(t, sf, "file", 0)
			if err != nil {
				return err
			}
			if err := placeSocket(fv.Addr().Interface().(*Socket), filepath.Join(path, name)); err != nil {
				return err
			}
		case isDirectoryType(sf.Type):
			name, m, err := fieldTag(t, sf, "dir", defaultDirMode)
			if err != nil {
				return err
			}
			if err := placeValue(fv, filepath.Join(path, name), m); err != nil {
				return err
			}
		default:
			return fmt.Errorf("declaration %s.%s: type %s is not a Directory, File or Socket", t.Name(), sf.Name, sf.Type)
		}
	}
	return nil
}

// embeddedDirectory returns the Directory that carries v's own path: v
// itself, or its embedded Directory field.
func embeddedDirectory(v reflect.Value) (*Directory, error) {
	if v.Type() == directoryType {
		return v.Addr().Interface().(*Directory), nil
	}
	if v.Kind() == reflect.Struct {
		for i := 0; i < v.NumField(); i++ {
			if sf := v.Type().Field(i); sf.Anonymous && sf.Type == directoryType {
				return v.Field(i).Addr().Interface().(*Directory), nil
			}
		}
	}
	return nil, fmt.Errorf("declaration %s does not embed localstorage.Directory", v.Type())
}

func isDirectoryType(t reflect.Type) bool {
	if t == directoryType {
		return true
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		if sf := t.Field(i); sf.Anonymous && sf.Type == directoryType {
			return true
		}
	}
	return false
}

// fieldTag reads the name (from the tag key want, "dir" or "file") and the
// mode of a declared field, and checks both.
func fieldTag(t reflect.Type, sf reflect.StructField, want string, defMode fs.FileMode) (string, fs.FileMode, error) {
	other := map[string]string{"dir": "file", "file": "dir"}[want]
	if _, ok := sf.Tag.Lookup(other); ok {
		return "", 0, fmt.Errorf("declaration %s.%s: %s field has a %q tag; want %q", t.Name(), sf.Name, sf.Type.Name(), other, want)
	}
	name, ok := sf.Tag.Lookup(want)
	if !ok {
		return "", 0, fmt.Errorf("declaration %s.%s: missing %s:\"name\" tag", t.Name(), sf.Name, want)
	}
	if err := ValidateName(name); err != nil {
		return "", 0, fmt.Errorf("declaration %s.%s: %w", t.Name(), sf.Name, err)
	}
	mode := defMode
	if s, ok := sf.Tag.Lookup("mode"); ok {
		if defMode == 0 {
			return "", 0, fmt.Errorf("declaration %s.%s: sockets take no mode tag", t.Name(), sf.Name)
		}
		m, err := strconv.ParseUint(s, 8, 32)
		if err != nil || m == 0 || m > 0o777 {
			return "", 0, fmt.Errorf("declaration %s.%s: mode %q is not an octal permission between 1 and 0777", t.Name(), sf.Name, s)
		}
		mode = fs.FileMode(m)
	}
	return name, mode, nil
}

// MkdirAll creates every directory declared in n, n included, with its
// declared mode, independent of the process umask. Existing directories are
// brought to their declared mode, because a mode in the declaration is a
// promise (volumes/ is 0700 whoever created it first). Missing parents of
// n are created with 0755. n itself, if it is a placement root, is created
// with 0755 if missing and otherwise left as it is. A declared path that exists as anything but a directory, including a
// symlink to one, is an error: following it would put node state somewhere
// the declaration does not say.
func MkdirAll(n Node) error {
	if n == nil {
		return errors.New("creating the tree of a nil node")
	}
	v := reflect.ValueOf(n)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("creating the tree of %T: need a non-nil pointer", n)
	}
	self, err := embeddedDirectory(v.Elem())
	if err != nil {
		return err
	}
	// Parents above n are outside the declaration (n may be a subtree
	// created before, or without, its ancestors): plain 0755 directories.
	if parent := filepath.Dir(self.FullPath()); parent != self.FullPath() {
		if err := os.MkdirAll(parent, defaultDirMode); err != nil {
			return fmt.Errorf("creating %s: %w", parent, err)
		}
	}
	return walkDirectories(v.Elem(), func(d *Directory) error {
		return ensureDirectory(d)
	})
}

// walkDirectories calls fn for the directory struct v and every directory
// declared below it, parents before children.
func walkDirectories(v reflect.Value, fn func(*Directory) error) error {
	self, err := embeddedDirectory(v)
	if err != nil {
		return err
	}
	if err := fn(self); err != nil {
		return err
	}
	if v.Type() == directoryType {
		return nil
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Anonymous || !sf.IsExported() || !isDirectoryType(sf.Type) {
			continue
		}
		if err := walkDirectories(v.Field(i), fn); err != nil {
			return err
		}
	}
	return nil
}

func ensureDirectory(d *Directory) error {
	p := d.FullPath()
	if d.mode == 0 {
		// The placement root: the operator's directory.
		if err := os.MkdirAll(p, defaultDirMode); err != nil {
			return fmt.Errorf("creating %s: %w", p, err)
		}
		return nil
	}
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(p, d.mode); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating %s: %w", p, err)
		}
		// Mkdir's mode is filtered by the umask; the declaration is not.
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("setting mode %#o on %s: %w", d.mode, p, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("checking %s: %w", p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symlink; the node tree must consist of real directories", p)
	case !fi.IsDir():
		return fmt.Errorf("%s exists but is not a directory (%s)", p, fi.Mode().Type())
	case fi.Mode().Perm() != d.mode:
		if err := os.Chmod(p, d.mode); err != nil {
			return fmt.Errorf("setting mode %#o on %s: %w", d.mode, p, err)
		}
	}
	return nil
}
