package main

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// blockSize is the unit of every write here: the page size, a multiple of
// any logical block size a loop device has, so O_DIRECT I/O is aligned.
const blockSize = 4096

// Result lines. The suite reads the pod's log: one line per check, then the
// phase's verdict, which is the last line of the phase.
const (
	markPass         = "[PASS]"
	markFail         = "[FAIL]"
	markSkip         = "[SKIP]"
	markInitPassed   = "[INIT-PASSED]"
	markInitFailed   = "[INIT-FAILED]"
	markResizePassed = "[RESIZE-PASSED]"
	markResizeFailed = "[RESIZE-FAILED]"
)

// result is the outcome of one check.
type result struct {
	Name string
	// Skip, when set, is why the check did not run; Err is then nil.
	Skip string
	Err  error
}

func (r result) String() string {
	switch {
	case r.Skip != "":
		return fmt.Sprintf("%s %s: %s", markSkip, r.Name, r.Skip)
	case r.Err != nil:
		// One line per check, whatever the error holds.
		return fmt.Sprintf("%s %s: %s", markFail, r.Name, strings.ReplaceAll(r.Err.Error(), "\n", "; "))
	default:
		return fmt.Sprintf("%s %s", markPass, r.Name)
	}
}

// verdict is a phase's last line: passed when no check failed (a skipped
// check has printed why and does not fail the phase), else failed with
// the failed checks named and the first one's error.
func verdict(pass, fail string, results []result) string {
	var failed []string
	var first error
	skipped := 0
	for _, r := range results {
		if r.Skip != "" {
			skipped++
		}
		if r.Skip == "" && r.Err != nil {
			failed = append(failed, r.Name)
			if first == nil {
				first = r.Err
			}
		}
	}
	if len(results) == 0 {
		return fail + " no checks ran"
	}
	if skipped == len(results) {
		return fmt.Sprintf("%s (all %d checks skipped)", pass, skipped)
	}
	if len(failed) == 0 {
		return pass
	}
	return fmt.Sprintf("%s %d of %d checks failed (%s): first: %s: %v", fail, len(failed), len(results), strings.Join(failed, ", "), failed[0], first)
}

// sizeMatches is the rule for a size seen from inside the pod: exactly
// the request, not a byte more or less.
func sizeMatches(what string, got, want int64) error {
	if got != want {
		return fmt.Errorf("%s is %d bytes, want exactly %d", what, got, want)
	}
	return nil
}

// statfsSize is the size a filesystem reports: its block count times its
// fragment size (f_frsize, the unit of f_blocks; XFS reports a project
// quota's hard limit there for a directory with that project).
func statfsSize(st *unix.Statfs_t) int64 {
	unit := st.Frsize
	if unit == 0 {
		unit = st.Bsize
	}
	return int64(st.Blocks) * unit
}

// mountFlagsOK checks that the read-write claim's mount cannot run setuid
// programs or open device nodes, and is not read-only.
func mountFlagsOK(flags int64) error {
	var errs []string
	if flags&unix.ST_NOSUID == 0 {
		errs = append(errs, "nosuid is not set")
	}
	if flags&unix.ST_NODEV == 0 {
		errs = append(errs, "nodev is not set")
	}
	if flags&unix.ST_RDONLY != 0 {
		errs = append(errs, "it is read-only")
	}
	if len(errs) > 0 {
		return fmt.Errorf("mount flags %#x: %s", flags, strings.Join(errs, ", "))
	}
	return nil
}

// readOnlyFlagOK checks the read-only claim's mount for ST_RDONLY. Its
// nosuid and nodev are not required: runc (1.1 in Debian 12) remounts a
// read-only bind mount with MS_RDONLY alone, which clears them in the
// container even though the CSI plugin's mount has them (the suite checks
// that one on the host).
func readOnlyFlagOK(flags int64) error {
	if flags&unix.ST_RDONLY == 0 {
		return fmt.Errorf("mount flags %#x: ST_RDONLY is not set", flags)
	}
	return nil
}

// refusedReadOnly is the rule for a write to something read-only: it must
// fail, and with the error that says so (EROFS; EPERM is what a block
// device marked read-only returns), not with any error at all.
func refusedReadOnly(what string, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("%s succeeded on a read-only claim", what)
	case errors.Is(err, unix.EROFS), errors.Is(err, unix.EPERM):
		return nil
	default:
		return fmt.Errorf("%s failed with %w, want EROFS or EPERM", what, err)
	}
}

// fillOK is the rule for writing past a filesystem claim's size: the
// writes stop with ENOSPC (or EDQUOT, which ext4 returns for a project
// quota) after exactly the room statfs reported free, no earlier and not
// later.
func fillOK(free, written int64, err error) error {
	switch {
	case err == nil:
		return fmt.Errorf("wrote %d bytes past the %d free without an error", written, free)
	case !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("writing stopped after %d bytes with %w, want ENOSPC or EDQUOT", written, err)
	case written != free:
		return fmt.Errorf("writing stopped after %d bytes with %v, want exactly the %d free", written, err, free)
	}
	return nil
}

// pattern returns n bytes that differ per block and per seed, so data read
// back from the wrong place or an older write does not match by chance.
func pattern(seed byte, off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		pos := off + int64(i)
		b[i] = seed ^ byte(pos/blockSize) ^ byte(pos*7)
	}
	return b
}
