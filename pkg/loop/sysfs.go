package loop

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Which loop device serves which file is read from sysfs, not by opening
// the devices: an open is one more opener, which delays a detach in
// progress and makes LOOP_CTL_REMOVE fail for a moment. The one exception
// is a binding sysfs names by a path below an unreachable mount (Lookup),
// which only the device's own status can confirm.

// deletedSuffix is what the kernel appends to the path of a backing file
// that was unlinked while bound.
const deletedSuffix = " (deleted)"

// backingAttr is the sysfs attribute naming /dev/loopN's backing file. It
// exists only while a file is bound.
func backingAttr(n int) string {
	return fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n)
}

// Binding is a loop device and the file bound to it, as sysfs names them.
type Binding struct {
	// Number is N of /dev/loopN.
	Number int
	// Backing is the path of the backing file as the kernel names it: an
	// absolute path without symlinks, as it was when the file was bound
	// or last renamed.
	Backing string
	// Deleted reports that the backing file was unlinked: the device still
	// serves its data, but no path leads to it any more. (sysfs shows this
	// by appending " (deleted)", so a file whose name really ends so looks
	// deleted too.)
	Deleted bool
}

// Path returns the device node, e.g. /dev/loop3.
func (b Binding) Path() string { return "/dev/loop" + strconv.Itoa(b.Number) }

// parseBinding reads the content of a backing_file attribute.
func parseBinding(n int, attr string) Binding {
	b := Binding{Number: n, Backing: strings.TrimSuffix(attr, "\n")}
	if s, ok := strings.CutSuffix(b.Backing, deletedSuffix); ok {
		b.Backing, b.Deleted = s, true
	}
	return b
}

// Bindings lists the loop devices that have a backing file, by number. A
// device that is detached while it is being read is left out.
func Bindings() ([]Binding, error) {
	attrs, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, fmt.Errorf("listing loop devices: %w", err)
	}
	var out []Binding
	for _, a := range attrs {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(filepath.Dir(filepath.Dir(a))), "loop"))
		if err != nil {
			continue // not a whole loop device
		}
		content, err := os.ReadFile(a)
		if detached(err) || (err == nil && len(content) == 0) {
			// Unbound between the listing and the read: the attribute
			// is gone, or removed while open, or reads empty while
			// the kernel is clearing the binding.
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing loop devices: %w", err)
		}
		out = append(out, parseBinding(n, string(content)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// detached reports whether reading a backing_file attribute failed because
// the device lost its binding meanwhile.
func detached(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

// Lookup returns the paths of the loop devices currently serving the file
// at backing (an absolute path without symlinks). A device whose file was
// unlinked serves no path, so it is not returned. It reads sysfs, so it
// opens no device, except to confirm a binding named as below; use it
// after a restart to find devices attached before, instead of trusting a
// record of them.
//
// The kernel names a backing file by its path from the reader's root, or,
// when the file was opened through a mount the reader cannot reach (a
// mount namespace that is gone, such as the one of a node agent's
// container before it restarted), by its path below that mount's root:
// /var/lib/plinth/data/volumes/x.img reads /data/volumes/x.img then. A
// binding whose name is such a tail of backing is confirmed by the file's
// identity (the device's LOOP_GET_STATUS64 against stat), a short
// read-only open, which a detach in progress waits out.
func Lookup(backing string) ([]string, error) {
	all, err := Bindings()
	if err != nil {
		return nil, fmt.Errorf("looking up loop devices of %s: %w", backing, err)
	}
	var paths []string
	for _, b := range all {
		ok, err := b.serves(backing)
		if err != nil {
			return nil, fmt.Errorf("looking up loop devices of %s: %w", backing, err)
		}
		if ok {
			paths = append(paths, b.Path())
		}
	}
	return paths, nil
}

// In lists the loop devices bound to a file directly in dir (absolute,
// without symlinks), including files unlinked since, with Backing set to
// the file's path in dir. Bindings named by their path below an
// unreachable mount's root are recognised as Lookup does; one of those
// whose file was unlinked is not (nothing is left to compare it with).
func In(dir string) ([]Binding, error) {
	all, err := Bindings()
	if err != nil {
		return nil, fmt.Errorf("listing loop devices over files in %s: %w", dir, err)
	}
	dir = filepath.Clean(dir)
	var out []Binding
	for _, b := range all {
		if filepath.Dir(b.Backing) == dir {
			out = append(out, b)
			continue
		}
		candidate := filepath.Join(dir, filepath.Base(b.Backing))
		if b.Deleted || !isTail(candidate, b.Backing) {
			continue
		}
		ok, err := b.serves(candidate)
		if err != nil {
			return nil, fmt.Errorf("listing loop devices over files in %s: %w", dir, err)
		}
		if ok {
			b.Backing = candidate
			out = append(out, b)
		}
	}
	return out, nil
}

// serves reports whether b is bound to the file at path, which it names
// either as path or, opened through an unreachable mount, as a tail of it
// (confirmed by identity). A device detached meanwhile serves nothing.
func (b Binding) serves(path string) (bool, error) {
	switch {
	case b.Deleted:
		return false, nil
	case b.Backing == path:
		return true, nil
	case !isTail(path, b.Backing):
		return false, nil
	}
	d, err := Open(b.Path())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	defer d.Close()
	return d.Serves(path)
}

// isTail reports whether name, as the kernel gives it, could be path seen
// below the root of a mount that path lies in: a proper suffix of path
// that starts at a component.
func isTail(path, name string) bool {
	return len(name) > 1 && len(name) < len(path) && strings.HasPrefix(name, "/") && strings.HasSuffix(path, name)
}
