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

// Which loop device serves which file is read from sysfs, never by opening
// the devices: an open is one more opener, which delays a detach in
// progress and makes LOOP_CTL_REMOVE fail.

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
// at backing (as the kernel names it: an absolute path without symlinks).
// A device whose file was unlinked serves no path, so it is not returned.
// It reads sysfs only, so it opens no device; use it after a restart to
// find devices attached before, instead of trusting a record of them.
func Lookup(backing string) ([]string, error) {
	all, err := Bindings()
	if err != nil {
		return nil, fmt.Errorf("looking up loop devices of %s: %w", backing, err)
	}
	var paths []string
	for _, b := range all {
		if b.Backing == backing && !b.Deleted {
			paths = append(paths, b.Path())
		}
	}
	return paths, nil
}
