package localstorage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"source.plinth.dev/pkg/dirsync"
)

// tempPrefix starts the names of WriteAtomic's temporary files. It begins
// with ".", which ValidateName refuses, so a temporary file is never
// mistaken for a record and a record never collides with one.
const tempPrefix = ".tmp-"

// WriteAtomic replaces the file's content with data and its mode with mode,
// so that a reader, or the node after a crash or power loss, sees either the
// old content or the new one, never a mix or an empty file. It writes a
// temporary file in the same directory (a rename is atomic only within one
// filesystem), fsyncs it, renames it over the file and fsyncs the directory
// so the rename itself is durable. On failure the old file is untouched and
// the temporary file removed.
func (f *File) WriteAtomic(data []byte, mode fs.FileMode) error {
	return writeAtomic(f.FullPath(), data, mode, os.Rename)
}

// WriteAtomicNoSync is WriteAtomic without the two fsyncs: readers and a
// restarted process still see the old content or the new one, never a mix,
// but a power loss may leave the file empty or old. That is the right
// trade for state whose meaning ends with the boot (the ephemeral tree:
// loop devices and mounts do not survive a power loss either), where the
// fsyncs would cost milliseconds per write on a disk-backed root (measured
// by BenchmarkWrite) for nothing. Readers of such state must treat an
// empty or unparsable file as "unknown", as they must treat every
// ephemeral record as a hint to verify.
func (f *File) WriteAtomicNoSync(data []byte, mode fs.FileMode) error {
	return writeAtomicOpts(f.FullPath(), data, mode, os.Rename, false)
}

// writeAtomic takes the rename step as a parameter so tests can make it fail
// and check that nothing was lost.
func writeAtomic(path string, data []byte, mode fs.FileMode, rename func(oldpath, newpath string) error) error {
	return writeAtomicOpts(path, data, mode, rename, true)
}

func writeAtomicOpts(path string, data []byte, mode fs.FileMode, rename func(oldpath, newpath string) error, durable bool) (err error) {
	if mode&^fs.ModePerm != 0 {
		return fmt.Errorf("writing %s: mode %v has bits beyond the permissions", path, mode)
	}
	dir, base := filepath.Split(path)
	tmp, err := os.CreateTemp(dir, tempPrefix+base+"-*")
	if err != nil {
		return fmt.Errorf("writing %s: creating temporary file: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// CreateTemp makes 0600 files; set the wanted mode on the descriptor,
	// which the umask does not filter.
	if err := tmp.Chmod(mode); err != nil {
		return fmt.Errorf("writing %s: setting mode: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if durable {
		if err := tmp.Sync(); err != nil {
			return fmt.Errorf("writing %s: syncing temporary file: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: closing temporary file: %w", path, err)
	}
	if err := rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: renaming temporary file into place: %w", path, err)
	}
	if !durable {
		return nil
	}
	if err := dirsync.Sync(dir); err != nil {
		// The new content is in place; only its durability across a crash
		// is in doubt. Report it: callers persisting state must know.
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// RemoveStaleTemporaryFiles removes the temporary files that WriteAtomic
// calls interrupted by a crash left in the directories declared in n (n
// included; dynamic subdirectories are not visited). Only files older than
// olderThan go, so a write in flight in another goroutine or process is
// never pulled from under its writer: a write takes milliseconds, so a
// minute is a safe margin. It returns the paths it removed.
func RemoveStaleTemporaryFiles(n Node, olderThan time.Duration) ([]string, error) {
	if n == nil {
		return nil, errors.New("cleaning a nil node")
	}
	v := reflect.ValueOf(n)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, fmt.Errorf("cleaning %T: need a non-nil pointer", n)
	}
	cutoff := time.Now().Add(-olderThan)
	var removed []string
	err := walkDirectories(v.Elem(), func(d *Directory) error {
		des, err := os.ReadDir(d.FullPath())
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cleaning %s: %w", d.FullPath(), err)
		}
		for _, de := range des {
			if !strings.HasPrefix(de.Name(), tempPrefix) || !de.Type().IsRegular() {
				continue
			}
			info, err := de.Info()
			if err != nil || info.ModTime().After(cutoff) {
				continue // gone meanwhile, or possibly in flight
			}
			p := filepath.Join(d.FullPath(), de.Name())
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("removing stale temporary file: %w", err)
			}
			removed = append(removed, p)
		}
		return nil
	})
	return removed, err
}
