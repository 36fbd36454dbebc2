package csi

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/loop"
)

// NodePublishVolume presents a volume at the target path: a filesystem
// volume as a bind mount of its directory (nosuid, nodev, read-only when
// asked), a block volume as a device node of a loop device over its image
// (direct I/O, read-only when asked).
//
// A retry with the same arguments verifies the publication and repairs what
// is missing (after a crash, a restart or a reboot) without a second mount
// or device; the same target with other arguments is AlreadyExists.
func (s *Server) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if err := checkPathInside(s.cfg.Kubelet, "target_path", target); err != nil {
		return nil, err
	}
	if err := checkPublishArea(s.cfg.Kubelet, target); err != nil {
		return nil, err
	}
	if sp := req.GetStagingTargetPath(); sp != "" {
		// Never staged by us (no STAGE_UNSTAGE), but a path outside
		// the kubelet directory is wrong whatever it is for.
		if err := checkPathInside(s.cfg.Kubelet, "staging_target_path", sp); err != nil {
			return nil, err
		}
	}
	mode, err := checkCapability(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	accessMode := req.GetVolumeCapability().GetAccessMode().GetMode()
	want := &publication{
		VolumeID:   id,
		TargetPath: target,
		Mode:       mode.String(),
		ReadOnly:   req.GetReadonly() || accessMode == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		AccessMode: int32(accessMode),
		MountFlags: req.GetVolumeCapability().GetMount().GetMountFlags(),
		BootID:     s.boot,
	}
	for _, f := range want.MountFlags {
		if f == "ro" {
			want.ReadOnly = true
		}
	}

	unlock := s.locks.Lock(volumeKey(id), targetKey(target))
	defer unlock()
	vmode, source, err := s.cfg.Volumes.Locate(ctx, id)
	if err != nil {
		return nil, statusFromVolume(err)
	}
	if err := checkResolvedParent(s.cfg.Kubelet, "target_path", target); err != nil {
		return nil, err
	}
	// A publication already at the target answers first: a request
	// unlike it is ALREADY_EXISTS, whatever else is wrong with it.
	cur := s.store.get(target)
	if vmode != mode && (cur == nil || cur.sameRequest(want)) {
		// The CSI spec's "exceeds capabilities".
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is a %v volume; it cannot be published with %s access", id, vmode, describeMode(mode))
	}
	if cur != nil {
		if !cur.sameRequest(want) {
			return nil, status.Errorf(codes.AlreadyExists, "target %s already publishes volume %s (%s, readonly=%v, access mode %v); refusing to publish volume %s (%s, readonly=%v, access mode %v) there",
				target, cur.VolumeID, cur.Mode, cur.ReadOnly, csi.VolumeCapability_AccessMode_Mode(cur.AccessMode), id, want.Mode, want.ReadOnly, accessMode)
		}
		if err := s.ensure(ctx, cur, source); err != nil {
			return nil, err
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	for _, other := range s.store.forVolume(id) {
		single := csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		if accessMode == single || csi.VolumeCapability_AccessMode_Mode(other.AccessMode) == single {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %s is published at %s and one of the two publications asks for single-writer access (ReadWriteOncePod)", id, other.TargetPath)
		}
	}
	if mode == volume.Filesystem {
		err = s.publishFilesystem(want, source)
	} else {
		err = s.publishBlock(want, source)
	}
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// publishFilesystem bind-mounts source at the publication's target. The
// record is written first, so a crash after the mount leaves a record that
// says the mount is ours.
func (s *Server) publishFilesystem(p *publication, source string) error {
	if same, err := sameFile(source, p.TargetPath); err == nil && same {
		// Already a bind mount of this volume, but unrecorded (the
		// records were lost): adopt it if its read-only state is right.
		ro, err := isReadOnlyMount(p.TargetPath)
		if err != nil || ro != p.ReadOnly {
			return status.Errorf(codes.AlreadyExists, "target %s already has an unrecorded mount of volume %s with readonly=%v; unpublish it first", p.TargetPath, p.VolumeID, ro)
		}
		if err := s.store.put(p); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return nil
	}
	created, err := prepareTargetDir(p.TargetPath)
	if err != nil {
		return err
	}
	undoTarget := func() {
		if created {
			_ = unix.Rmdir(p.TargetPath)
		}
	}
	if err := s.store.put(p); err != nil {
		undoTarget()
		return status.Error(codes.Internal, err.Error())
	}
	if err := bindMount(source, p.TargetPath, bindFlags(p.MountFlags, p.ReadOnly)); err != nil {
		undoTarget()
		if rerr := s.store.remove(p.TargetPath); rerr != nil {
			err = fmt.Errorf("%w (and %v)", err, rerr)
		}
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// prepareTargetDir makes sure target is an empty directory we may mount
// on, creating it if missing.
func prepareTargetDir(target string) (created bool, err error) {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(target, 0o750); err != nil {
			return false, status.Errorf(codes.Internal, "creating target directory: %v", err)
		}
		return true, nil
	case err != nil:
		return false, status.Errorf(codes.Internal, "checking target: %v", err)
	case !fi.IsDir():
		return false, status.Errorf(codes.FailedPrecondition, "target %s exists and is a %v, not a directory", target, fi.Mode().Type())
	}
	d, err := os.Open(target)
	if err != nil {
		return false, status.Errorf(codes.Internal, "checking target: %v", err)
	}
	defer d.Close()
	if names, _ := d.Readdirnames(1); len(names) > 0 {
		return false, status.Errorf(codes.FailedPrecondition, "target %s is not empty (holds %q); refusing to mount over it", target, names[0])
	}
	return false, nil
}

// publishBlock binds the image to a new loop device, records it, makes the
// device node at the target, and holds the device (see hold.go). The new
// device's number is one no publication record names, so a number a pod
// may still hold is never handed on.
func (s *Server) publishBlock(p *publication, image string) error {
	d, err := attachImage(image, p.ReadOnly, bindFree(s.store.loopReserved()))
	if err != nil {
		return err
	}
	rec, err := loopRecordOf(d)
	if err != nil {
		return errors.Join(status.Error(codes.Internal, err.Error()), d.Detach())
	}
	p.Loop = rec
	if err := s.store.put(p); err != nil {
		return errors.Join(status.Error(codes.Internal, err.Error()), d.Detach())
	}
	if err := makeBlockNode(p.TargetPath, rec.Rdev); err != nil {
		return errors.Join(status.Error(codes.Internal, err.Error()), d.Detach(), s.store.remove(p.TargetPath))
	}
	s.holds.keep(p.TargetPath, d)
	return nil
}

// attachImage opens the image (read-only when the device must be) and
// binds it to a loop device with direct I/O, so the page cache holds the
// data once (in the pod's filesystem above the device), not twice.
func attachImage(image string, readOnly bool, bind binder) (*loop.Device, error) {
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(image, flag|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "opening volume image: %v", err)
	}
	defer f.Close()
	d, err := bind(f, loop.Options{ReadOnly: readOnly, DirectIO: true})
	if err != nil {
		return nil, status.Errorf(codes.Internal, "attaching volume image: %v", err)
	}
	return d, nil
}

func loopRecordOf(d *loop.Device) (*loopRecord, error) {
	st, err := d.Status()
	if err != nil {
		return nil, err
	}
	return &loopRecord{Number: d.Number(), Rdev: d.Dev(), BackingDev: st.BackingDev, BackingInode: st.BackingInode}, nil
}

// ensure makes an existing publication true again: a missing bind mount is
// redone, a loop device that was detached is bound to the image again at
// its recorded number (ensureLoop), and a device node that does not name
// it is replaced.
func (s *Server) ensure(ctx context.Context, p *publication, source string) error {
	if p.Mode == volume.Filesystem.String() {
		same, err := sameFile(source, p.TargetPath)
		if err == nil && same {
			ro, err := isReadOnlyMount(p.TargetPath)
			if err == nil && ro == p.ReadOnly {
				return nil
			}
			return status.Errorf(codes.Internal, "target %s is mounted with the wrong read-only state; unpublish it first", p.TargetPath)
		}
		if _, err := prepareTargetDir(p.TargetPath); err != nil {
			return err
		}
		if err := bindMount(source, p.TargetPath, bindFlags(p.MountFlags, p.ReadOnly)); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		p.BootID = s.boot
		if err := s.store.put(p); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return nil
	}
	if p.Loop == nil {
		// A record without its device names no number a pod was
		// given; whatever is at the target is not vouched for.
		if err := removeTarget(p.TargetPath); err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		return s.publishBlock(p, source)
	}
	if err := s.ensureLoop(p, source); err != nil {
		return err
	}
	if isBlockNode(p.TargetPath, p.Loop.Rdev) {
		return nil
	}
	if err := makeBlockNode(p.TargetPath, p.Loop.Rdev); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return nil
}

// NodeUnpublishVolume undoes NodePublishVolume: unmounts (or removes the
// device node and frees the loop device) and removes the target path. It
// succeeds when there is nothing left to undo.
func (s *Server) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkVolumeID(id); err != nil {
		return nil, err
	}
	if err := checkPathInside(s.cfg.Kubelet, "target_path", target); err != nil {
		return nil, err
	}
	unlock := s.locks.Lock(volumeKey(id), targetKey(target))
	defer unlock()
	p := s.store.get(target)
	if p == nil {
		// No record: never published, or already unpublished. Undo only
		// what provably serves this very volume (a bind mount of its
		// directory, a device node of a loop device over its image), so
		// a stray request can never remove anything else.
		if err := s.unpublishUnrecorded(ctx, id, target); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if p.VolumeID != id {
		return nil, status.Errorf(codes.NotFound, "target %s publishes volume %s, not %s", target, p.VolumeID, id)
	}
	if err := s.unpublish(ctx, p); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unpublishUnrecorded removes a publication of volume id at target that has
// no record (the record is written first, so this is only ever needed if
// records were lost).
func (s *Server) unpublishUnrecorded(ctx context.Context, id, target string) error {
	mode, source, err := s.cfg.Volumes.Locate(ctx, id)
	if err != nil {
		return nil // not a volume of ours: nothing of ours can be there
	}
	if mode == volume.Filesystem {
		if same, err := sameFile(source, target); err == nil && same {
			return unmountAll(source, target)
		}
		return nil
	}
	var st, img unix.Stat_t
	if unix.Lstat(target, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != loop.Major || unix.Stat(source, &img) != nil {
		return nil
	}
	d, err := loop.Open(target)
	if err != nil {
		return nil
	}
	defer d.Close()
	if ls, err := d.Status(); err != nil || ls.BackingInode != img.Ino {
		return nil
	}
	return removeTarget(target)
}

// unpublish tears down publication p and removes its record last, so a
// failure halfway leaves a record to retry from.
func (s *Server) unpublish(ctx context.Context, p *publication) error {
	if p.Mode == volume.Filesystem.String() {
		for range 16 {
			err := unix.Unmount(p.TargetPath, unix.UMOUNT_NOFOLLOW)
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				break // not (or no longer) a mount point
			}
			if err != nil {
				return fmt.Errorf("unmounting %s: %w", p.TargetPath, err)
			}
		}
		if err := removeTarget(p.TargetPath); err != nil {
			return err
		}
	} else {
		if err := removeTarget(p.TargetPath); err != nil {
			return err
		}
		image := ""
		if mode, path, err := s.cfg.Volumes.Locate(ctx, p.VolumeID); err == nil && mode == volume.Block {
			image = path
		}
		// Detach, not Remove: the idle /dev/loopN is reused by the next
		// publish, while deleting it costs the kernel ~45 ms of RCU
		// grace periods per unpublish. The record, removed last, keeps
		// the number reserved until the device is free.
		s.holds.release(p.TargetPath)
		if p.Loop != nil {
			if d, state := inspectLoop(p, image); state == loopOwn {
				if err := d.Detach(); err != nil {
					return fmt.Errorf("freeing the loop device of %s: %w", p.TargetPath, err)
				}
			}
		}
	}
	return s.store.remove(p.TargetPath)
}
