// Package kmod loads the Linux kernel modules named in a module list, the
// way the node's init and the kernel-test VM's init do before anything needs
// the drivers.
//
// A module list is a text file with the path of one .ko file per line, in
// load order: every module after the modules it depends on (the order that
// modules.dep gives; the image builder resolves it when it copies the
// modules, see build/initramfs.Modules). Blank lines and lines
// starting with "#" are skipped. Both inits boot from a minimal image with
// no modprobe and no module tree, so the list, written when the image is
// built, is how they know what to load and in which order; ReadList and
// FormatList are the list's one definition.
//
// Load uses finit_module(2). A module that is already loaded counts as
// loaded, so a list may name a module something else loaded first.
package kmod

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ReadList returns the module paths of the module list at path, in order. A
// missing list is not an error: an image whose kernel has its drivers built
// in has none, and ReadList returns no paths.
func ReadList(path string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading module list: %w", err)
	}
	var mods []string
	for _, line := range strings.Split(string(raw), "\n") {
		p := strings.TrimSpace(line)
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		mods = append(mods, p)
	}
	return mods, nil
}

// FormatList returns the module list naming paths, in that order, for an
// image builder to write where ReadList will read it.
func FormatList(paths []string) []byte {
	return []byte(strings.Join(paths, "\n") + "\n")
}

// Load loads the kernel module in the .ko file at path. It succeeds if a
// module of that name is already loaded (EEXIST).
func Load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("loading module %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("loading module %s: %w", path, err)
	}
	return nil
}
