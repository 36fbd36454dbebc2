// Package dirsync makes changes to a directory's entries durable.
//
// Why it is needed: fsync on a file makes the file's data and inode durable,
// not the name that points at it. A file created, renamed into place
// (atomic replace) or removed can, after a crash, still be missing, still
// have its old content, or be back, until the directory holding the name
// has been fsynced too. Code that persists state (records written
// atomically, volume directories and images, project ID claims) must sync
// the directory after each such change and before it acts on the change
// having happened.
//
// Sync is the one way the node does this.
package dirsync

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Sync fsyncs the directory dir, making the creations, renames and removals
// of its entries durable. dir must be a directory (O_DIRECTORY): syncing a
// regular file by mistake would succeed and protect nothing. A failing
// close is reported too, so no error of the sync can go unseen.
func Sync(dir string) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("opening directory %s to sync it: %w", dir, err)
	}
	serr := d.Sync()
	cerr := d.Close()
	if err := errors.Join(serr, cerr); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}
