package csi

import (
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/pkg/loop"
)

// A pod given a block volume holds /dev/loopN: the container runtime made
// it a device node and a device-cgroup rule for that number, and both
// last as long as the container. The pod may also end the binding: any
// opener can issue LOOP_CLR_FD, no capability needed, and the kernel
// detaches the device once its last opener closes it. If the number were
// then given to another volume, the pod would read and write that volume.
//
// Two walls keep a number from passing between volumes while a pod that
// was given it may live (until its publication is unpublished):
//
//   - holds: the plugin keeps every published loop device open. While the
//     device has an opener besides the pod, LOOP_CLR_FD only marks it
//     autoclear, and it stays bound to the volume's image.
//   - reservation: a number a publication record names is never handed to
//     another volume (loop.CreateExcept), even if the kernel calls it free.
//     The holds end with the node agent's process; a device whose pod asked
//     for the detach is then freed, and the record keeps its number from
//     everyone else until the agent is back and binds the pod's own image
//     to it again (ensureLoop).

// holds keeps the published loop devices open, by target path. Its
// methods are safe for concurrent use; callers serialise changes per
// target with the server's locks.
type holds struct {
	mu       sync.Mutex
	byTarget map[string]*loop.Device
}

// keep holds d for target, closing a device held there before.
func (h *holds) keep(target string, d *loop.Device) {
	h.mu.Lock()
	old := h.byTarget[target]
	if h.byTarget == nil {
		h.byTarget = make(map[string]*loop.Device)
	}
	h.byTarget[target] = d
	h.mu.Unlock()
	if old != nil && old != d {
		old.Close()
	}
}

// release stops holding target's device and closes it.
func (h *holds) release(target string) {
	h.mu.Lock()
	d := h.byTarget[target]
	delete(h.byTarget, target)
	h.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

// releaseUnless closes the holds whose target keep does not accept.
func (h *holds) releaseUnless(keep func(target string) bool) {
	h.mu.Lock()
	var gone []*loop.Device
	for target, d := range h.byTarget {
		if !keep(target) {
			gone = append(gone, d)
			delete(h.byTarget, target)
		}
	}
	h.mu.Unlock()
	for _, d := range gone {
		d.Close()
	}
}

// loopState is what a publication's recorded loop number serves now.
type loopState int

const (
	// loopOwn: bound to the publication's image, as recorded.
	loopOwn loopState = iota
	// loopFree: nothing is bound to the number (or the device is gone).
	loopFree
	// loopTaken: another file is bound to the number, or the image with
	// other flags; the publication's pod can reach that device.
	loopTaken
)

func (s loopState) String() string {
	switch s {
	case loopOwn:
		return "serving the publication's image"
	case loopFree:
		return "free"
	case loopTaken:
		return "serving another file"
	}
	return fmt.Sprintf("loopState(%d)", int(s))
}

// inspectLoop opens the loop device p's record names and says what it
// serves. The device is returned open only when it serves p's image as
// recorded: same device number, bound to the same image (device and
// inode; the image at path image too, when given), with the recorded
// read-only flag.
func inspectLoop(p *publication, image string) (*loop.Device, loopState) {
	d, err := loop.Open(fmt.Sprintf("/dev/loop%d", p.Loop.Number))
	if err != nil {
		return nil, loopFree
	}
	st, err := d.Status()
	if err != nil {
		d.Close()
		return nil, loopFree
	}
	ok := d.Dev() == p.Loop.Rdev && st.BackingDev == p.Loop.BackingDev &&
		st.BackingInode == p.Loop.BackingInode && st.Flags.ReadOnly == p.ReadOnly
	if ok && image != "" {
		var is unix.Stat_t
		ok = unix.Stat(image, &is) == nil && is.Dev == p.Loop.BackingDev && is.Ino == p.Loop.BackingInode
	}
	if !ok {
		d.Close()
		return nil, loopTaken
	}
	return d, loopOwn
}

// ensureLoop makes p's recorded loop number serve image again and holds
// it: a device the pod asked to detach is kept (its autoclear mark taken
// back), a detached one is bound to the image again at the same number,
// so the device node the pod holds reaches its own volume. A number now
// bound to another file is refused, never replaced by a new number (the
// pod would keep reaching the old one), and the node at the target is
// removed. The record is rewritten when the image was bound anew.
func (s *Server) ensureLoop(p *publication, image string) error {
	d, state := inspectLoop(p, image)
	switch state {
	case loopTaken:
		// The node at the target would give a restarted container
		// that other device.
		if err := removeTarget(p.TargetPath); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return status.Errorf(codes.FailedPrecondition, "loop device %d of the publication of %s at %s now serves another file; "+
			"the number stays reserved for this publication until it is unpublished: delete the pod", p.Loop.Number, p.VolumeID, p.TargetPath)
	case loopFree:
		var err error
		if d, err = attachImage(image, p.ReadOnly, bindAt(p.Loop.Number)); err != nil {
			return err
		}
		rec, err := loopRecordOf(d)
		if err == nil && rec.Rdev != p.Loop.Rdev {
			err = fmt.Errorf("loop%d came back as device %#x, not %#x", p.Loop.Number, rec.Rdev, p.Loop.Rdev)
		}
		if err == nil {
			p.Loop = rec
			err = s.store.put(p)
		}
		if err != nil {
			return status.Error(codes.Internal, fmt.Sprintf("rebinding loop device %d of %s: %v (and %v)", p.Loop.Number, p.TargetPath, err, d.Detach()))
		}
		s.log.Warningf("loop device %d of %s at %s had been detached behind the node's back; bound the volume's image to it again", p.Loop.Number, p.VolumeID, p.TargetPath)
	}
	if flags, err := d.Flags(); err == nil && flags.Autoclear {
		if err := d.ClearAutoclear(); err != nil {
			d.Close()
			return status.Error(codes.Internal, err.Error())
		}
		s.log.Warningf("a user of loop device %d (%s at %s) had asked it to detach; the node keeps it bound until the volume is unpublished", p.Loop.Number, p.VolumeID, p.TargetPath)
	}
	s.holds.keep(p.TargetPath, d)
	return nil
}

// binder binds an open image file to a loop device.
type binder func(f *os.File, opts loop.Options) (*loop.Device, error)

// bindFree binds to a free loop number that reserved does not name.
func bindFree(reserved func(int) bool) binder {
	return func(f *os.File, opts loop.Options) (*loop.Device, error) { return loop.CreateExcept(f, opts, reserved) }
}

// bindAt binds to loop number n, which must be free.
func bindAt(n int) binder {
	return func(f *os.File, opts loop.Options) (*loop.Device, error) { return loop.CreateAt(n, f, opts) }
}
