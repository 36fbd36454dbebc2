package initramfs

import (
	"fmt"
	"io/fs"
	"strconv"
)

// Entry is a member of an archive, as Read returns it.
type Entry struct {
	Name string // without a leading slash
	Mode uint32 // type and permission bits, as in stat(2)
	Data []byte // a file's content or a symlink's target
}

// Type bits of Entry.Mode.
const (
	TypeMask = 0o170000
	TypeDir  = 0o040000
	TypeFile = 0o100000
	TypeLink = 0o120000
	TypeChar = 0o020000
)

// Read parses a newc archive, for tests and tools that check what a
// builder wrote. It stops at the trailer.
func Read(b []byte) ([]Entry, error) {
	var out []Entry
	off := 0
	align := func(n int) int { return (n + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			return nil, fmt.Errorf("archive truncated at %d: %w", off, fs.ErrInvalid)
		}
		if string(b[off:off+6]) != "070701" {
			return nil, fmt.Errorf("bad magic %q at %d: %w", b[off:off+6], off, fs.ErrInvalid)
		}
		var f [13]uint64
		for i := range f {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				return nil, fmt.Errorf("header field %d at %d: %w", i, off, err)
			}
			f[i] = v
		}
		mode, size, nameLen := uint32(f[1]), int(f[6]), int(f[11])
		dataOff := align(off + 110 + nameLen)
		if nameLen == 0 || dataOff+size > len(b) {
			return nil, fmt.Errorf("entry at %d runs past the end: %w", off, fs.ErrInvalid)
		}
		name := string(b[off+110 : off+110+nameLen-1])
		if name == "TRAILER!!!" {
			return out, nil
		}
		out = append(out, Entry{Name: name, Mode: mode, Data: b[dataOff : dataOff+size]})
		off = align(dataOff + size)
	}
}
