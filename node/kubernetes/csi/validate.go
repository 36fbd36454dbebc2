package csi

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
)

// This file checks requests before anything is touched. Every check returns
// a gRPC status error whose message names the field and the rule, so a CO
// operator can fix the request from the message alone.

// checkVolumeID refuses empty and malformed volume IDs (InvalidArgument).
// Whether the volume exists is checked later (NotFound).
func checkVolumeID(id string) error {
	if id == "" {
		return status.Error(codes.InvalidArgument, "volume_id is required")
	}
	if err := volume.ValidateID(id); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume_id: %v", err)
	}
	return nil
}

// checkPathInside refuses a target or staging path that is not an absolute,
// clean path strictly below the kubelet directory: the plugin mounts and
// creates device nodes only where the kubelet keeps pod volumes, so a
// confused or hostile request can never make it mount over /etc.
//
// The check is lexical (localstorage.Directory.Contains), plus a check that
// the parent directory, with symlinks resolved, is still inside: a symlink
// planted in the kubelet directory must not redirect the mount.
func checkPathInside(kubelet *localstorage.KubeletDirectory, field, p string) error {
	if p == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return status.Errorf(codes.InvalidArgument, "%s contains a NUL byte", field)
	}
	if !filepath.IsAbs(p) {
		return status.Errorf(codes.InvalidArgument, "%s %q is not an absolute path", field, p)
	}
	if err := checkPathLength(p); err != nil {
		return status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	if filepath.Clean(p) != p {
		return status.Errorf(codes.InvalidArgument, "%s %q is not a clean path (it has //, /./, /../ or a trailing /)", field, p)
	}
	if !kubelet.Contains(p) || p == kubelet.FullPath() {
		return status.Errorf(codes.InvalidArgument, "%s %q is outside the kubelet directory %s; the plugin publishes only below it", field, p, kubelet.FullPath())
	}
	return nil
}

// checkPublishArea refuses a target path outside the two places the
// kubelet publishes CSI volumes: below pods/ (a pod's mount point of a
// filesystem volume) and below plugins/kubernetes.io/csi/ (a block
// volume's device path). Anywhere else in the kubelet directory a bind
// mount or a device node would cover the kubelet's own files
// (plugins_registry/, a driver's socket directory).
func checkPublishArea(kubelet *localstorage.KubeletDirectory, p string) error {
	volumePlugin := kubelet.Plugins.VolumePlugin()
	for _, area := range []*localstorage.Directory{&kubelet.Pods, &volumePlugin} {
		if area.Contains(p) && p != area.FullPath() {
			return nil
		}
	}
	return status.Errorf(codes.InvalidArgument, "target_path %q is not where the kubelet publishes volumes: below %s or %s", p, kubelet.Pods.FullPath(), volumePlugin.FullPath())
}

// checkPathLength refuses a path the kernel would refuse with ENAMETOOLONG,
// so such a request fails as the caller's mistake (InvalidArgument) before
// any system call, instead of as an Internal error from the first lstat.
func checkPathLength(p string) error {
	if len(p) >= localstorage.MaxPathLength {
		return fmt.Errorf("path is %d bytes long; Linux takes paths shorter than %d", len(p), localstorage.MaxPathLength)
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > localstorage.MaxFileNameLength {
			return fmt.Errorf("path component %.32q... is %d bytes long; Linux takes at most %d", c, len(c), localstorage.MaxFileNameLength)
		}
	}
	return nil
}

// checkResolvedParent is the symlink half of checkPathInside; it needs the
// filesystem, so it runs after the cheap checks and only for paths the
// plugin is about to create something at.
func checkResolvedParent(kubelet *localstorage.KubeletDirectory, field, p string) error {
	root, err := filepath.EvalSymlinks(kubelet.FullPath())
	if err != nil {
		return status.Errorf(codes.Internal, "resolving the kubelet directory: %v", err)
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(p))
	if errors.Is(err, errNotExist) {
		return status.Errorf(codes.FailedPrecondition, "%s %q: parent directory does not exist (the CO creates it)", field, p)
	}
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s %q: resolving parent directory: %v", field, p, err)
	}
	rel, err := filepath.Rel(root, parent)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return status.Errorf(codes.PermissionDenied, "%s %q: its parent resolves to %s, outside the kubelet directory %s", field, p, parent, root)
	}
	return nil
}

// Access modes this plugin serves. Volumes live on one node's disk, so every
// MULTI_NODE mode is refused.
var supportedAccessModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
}

// Mount flags accepted for filesystem volumes (the PV's mountOptions), and
// the bind-mount flags they become. Only flags that make sense on a bind
// mount are accepted; anything else is refused rather than ignored, so a
// user never believes an option is in effect when it is not.
var supportedMountFlags = map[string]uintptr{
	"ro":         msRdonly,
	"noexec":     msNoexec,
	"noatime":    msNoatime,
	"nodiratime": msNodiratime,
	"relatime":   msRelatime,
	"nosuid":     0, // always set
	"nodev":      0, // always set
}

// checkCapability validates one volume capability and returns the volume
// mode it asks for.
func checkCapability(c *csi.VolumeCapability) (volume.Mode, error) {
	if c == nil {
		return 0, status.Error(codes.InvalidArgument, "volume_capability is required")
	}
	am := c.GetAccessMode()
	if am == nil {
		return 0, status.Error(codes.InvalidArgument, "volume_capability.access_mode is required")
	}
	if !supportedAccessModes[am.GetMode()] {
		return 0, status.Errorf(codes.InvalidArgument, "access mode %v is not supported: volumes are local to one node (use a SINGLE_NODE mode)", am.GetMode())
	}
	switch t := c.GetAccessType().(type) {
	case *csi.VolumeCapability_Block:
		return volume.Block, nil
	case *csi.VolumeCapability_Mount:
		m := t.Mount
		if fs := m.GetFsType(); fs != "" {
			return 0, status.Errorf(codes.InvalidArgument, "fs_type %q is not supported: filesystem volumes are directories on the node's data filesystem and take no filesystem type", fs)
		}
		for _, f := range m.GetMountFlags() {
			if _, ok := supportedMountFlags[f]; !ok {
				return 0, status.Errorf(codes.InvalidArgument, "mount flag %q is not supported (supported: ro, noexec, noatime, nodiratime, relatime, nosuid, nodev)", f)
			}
		}
		return volume.Filesystem, nil
	case nil:
		return 0, status.Error(codes.InvalidArgument, "volume_capability.access_type is required (mount or block)")
	default:
		return 0, status.Errorf(codes.InvalidArgument, "access type %T is not supported", t)
	}
}

// checkCapabilities validates a list of capabilities (CreateVolume,
// ValidateVolumeCapabilities) and returns the one mode they agree on.
func checkCapabilities(cs []*csi.VolumeCapability) (volume.Mode, error) {
	if len(cs) == 0 {
		return 0, status.Error(codes.InvalidArgument, "volume_capabilities is required")
	}
	var mode volume.Mode
	for _, c := range cs {
		m, err := checkCapability(c)
		if err != nil {
			return 0, err
		}
		if mode != 0 && m != mode {
			return 0, status.Error(codes.InvalidArgument, "volume_capabilities ask for both block and mount access; a volume is one or the other")
		}
		mode = m
	}
	return mode, nil
}

// statusFromVolume maps the volume layer's errors to gRPC codes. An error
// the volume layer classifies as infeasible (volume.Infeasible) gets a code
// that tells the CO not to retry the call unchanged (InvalidArgument,
// AlreadyExists, ResourceExhausted, FailedPrecondition); every other one a
// code a CO retries.
func statusFromVolume(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	switch {
	case errors.Is(err, volume.ErrSmallerThanSource):
		// Before ErrInvalid, which it matches too: the spec names
		// OUT_OF_RANGE for a volume smaller than its source.
		code = codes.OutOfRange
	case errors.Is(err, volume.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, volume.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, volume.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, volume.ErrNoSpace):
		code = codes.ResourceExhausted
	case errors.Is(err, volume.ErrCapacityNotEnforced), errors.Is(err, volume.ErrInUse), errors.Is(err, volume.ErrCopyUnsupported):
		code = codes.FailedPrecondition
	case errors.Is(err, errCanceled):
		code = codes.Canceled
	case errors.Is(err, errDeadline):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}

// describeMode names a mode for messages in CSI terms.
func describeMode(m volume.Mode) string {
	if m == volume.Block {
		return "block"
	}
	return fmt.Sprintf("mount (%v)", m)
}
