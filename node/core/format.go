package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"source.plinth.dev/pkg/logtree"
	"source.plinth.dev/pkg/process"
)

// blankSpan is how much of a device must read as zeros for it to count as
// blank. Every partition table and filesystem the node could meet puts a
// signature in its first MiB (MBR/GPT at 0 and 512, XFS at 0, ext at 1024,
// swap at 4096, btrfs at 64 KiB, LVM and LUKS in the first sectors), so a
// zero first MiB means "never used", while anything else, even unknown
// bytes, means "someone's data": the node formats only the former.
const blankSpan = 1 << 20

// ErrNotBlank is wrapped by the data mount's error when the device has
// data the node does not recognise as its filesystem and so will not
// format.
var ErrNotBlank = errors.New("device is not blank")

// IsBlank reports whether the first MiB of dev (or all of it, if smaller)
// is zeros.
func IsBlank(dev string) (bool, error) {
	f, err := os.Open(dev)
	if err != nil {
		return false, fmt.Errorf("checking whether %s is blank: %w", dev, err)
	}
	defer f.Close()
	buf := make([]byte, blankSpan)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("checking whether %s is blank: %w", dev, err)
	}
	return !bytes.ContainsFunc(buf[:n], func(r rune) bool { return r != 0 }), nil
}

// mkfsArgs are the mkfs.xfs arguments for a data partition. No -f: should
// the blank check ever be wrong, mkfs.xfs itself refuses to overwrite a
// filesystem it recognises. Version 5 XFS (the default) keeps project
// quotas in their own inode, so prjquota at mount is all quotas need.
// reflink=1 is the default since xfsprogs 5.1 and is what snapshots and
// clones need (volume.ErrCopyUnsupported); it is asked for by name so an
// mkfs.xfs with other defaults cannot leave it out silently.
func mkfsArgs(dev string) []string {
	return []string{"-q", "-L", "plinth-data", "-m", "reflink=1", dev}
}

// formatIfBlank formats m's device as XFS if it is blank; it reports
// whether it did. A device with data on it is left alone: mounting it then
// decides whether it is the node's filesystem.
func formatIfBlank(ctx context.Context, log logtree.LeveledLogger, m *DataMount) (bool, error) {
	blank, err := IsBlank(m.Source)
	if err != nil || !blank {
		return false, err
	}
	if m.FSType != "xfs" {
		return false, fmt.Errorf("data partition %s is blank, but the node formats only xfs, not %s", m.Source, m.FSType)
	}
	log.Infof("data partition %s is blank (first MiB zero): formatting it as XFS", m.Source)
	if err := process.Run(ctx, log, process.Spec{Path: "mkfs.xfs", Args: mkfsArgs(m.Source)}); err != nil {
		return false, fmt.Errorf("formatting blank data partition %s: %w", m.Source, err)
	}
	return true, nil
}
