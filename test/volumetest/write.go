package volumetest

import "os"

// WriteNew writes n bytes to a new file at path and syncs it: with delayed
// allocation a quota may only bite at fsync, so a quota's refusal is
// returned here, not left to a later writeback.
func WriteNew(path string, n int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, n))
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
