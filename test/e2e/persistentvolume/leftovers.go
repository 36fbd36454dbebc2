package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"source.plinth.dev/node/core/localstorage"
	"source.plinth.dev/node/core/volume"
	"source.plinth.dev/pkg/fsquota"
	"source.plinth.dev/pkg/loop"
	"source.plinth.dev/pkg/mountinfo"
)

// Markers of the leftovers mode (-node-leftovers).
const (
	markNodeClean = "[NODE-CLEAN]"
	markNodeLeft  = "[NODE-LEFT]"
)

// leftoversSpec is what the leftovers mode looks for: the traces, on the
// node, of volumes whose claims were deleted and of the pod that used
// them.
type leftoversSpec struct {
	// data is the node's data directory, mounted into the pod at the
	// same path, so that paths the kernel reports (loop devices' backing
	// files, mount points) read the same inside.
	data string
	// kubelet is the kubelet's root directory (on the node image, below
	// data).
	kubelet string
	// wait bounds the wait for an asynchronous teardown (the kubelet
	// unmounting, the provisioner deleting) to finish; 0 reports what is
	// there at once.
	wait time.Duration
	// volumes are the volume IDs (PV names); keys are further strings
	// (the pod's UID) no mount or kubelet file may name.
	volumes, keys []string
	// mountsOf is the command name of the process whose mount namespace
	// is searched for mounts: "kubelet" in the mode, where the kubelet
	// and the CSI plugin mount pods' volumes; empty means this process's
	// own namespace (the unit test, which runs where no kubelet is).
	mountsOf string
}

// parseLeftovers reads "DATA,KUBELET,WAIT,VOLUME[+VOLUME...][,KEY...]",
// WAIT a Go duration.
func parseLeftovers(arg string) (leftoversSpec, error) {
	f := strings.Split(arg, ",")
	if len(f) < 4 || f[0] == "" || f[1] == "" || f[3] == "" {
		return leftoversSpec{}, fmt.Errorf("want DATA,KUBELET,WAIT,VOLUME[+VOLUME...][,KEY...], got %q", arg)
	}
	wait, err := time.ParseDuration(f[2])
	if err != nil {
		return leftoversSpec{}, fmt.Errorf("WAIT: %w", err)
	}
	return leftoversSpec{data: f[0], kubelet: f[1], wait: wait, volumes: strings.Split(f[3], "+"), keys: f[4:], mountsOf: "kubelet"}, nil
}

// nodeLeftovers looks, from a privileged pod with hostPID and the node's
// data directory mounted, for what deleting the claims and the pod should
// have removed: the volumes (directory or image), their reclaim-policy
// and intent records, project ID claims they own, quota limits on an ID
// no volume directory carries, loop devices on their images, mounts in
// the kubelet's mount namespace and files or device nodes in the
// kubelet's directory that name a volume or key. Teardown is
// asynchronous (the kubelet unmounts, the provisioner deletes), so it
// looks again every poll until nothing is left or s.wait passes; it
// returns the line to print, with everything still left.
func nodeLeftovers(ctx context.Context, s leftoversSpec, poll time.Duration) string {
	deadline := time.Now().Add(s.wait)
	for {
		left, limits, err := s.find()
		switch {
		case err != nil:
			left = append(left, "error: "+err.Error())
		case len(left) == 0:
			return fmt.Sprintf("%s no trace of %d volumes and %d keys; quota limits %s", markNodeClean, len(s.volumes), len(s.keys), limits)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return markNodeLeft + " " + strings.Join(left, "; ")
		}
		time.Sleep(poll)
	}
}

// find lists every trace left now, each prefixed by its kind, and says
// whether quota limits could be read ("checked", or why not).
func (s leftoversSpec) find() (left []string, limits string, err error) {
	var data localstorage.DataDirectory
	if err := data.Place(s.data); err != nil {
		return nil, "", err
	}
	for _, id := range s.volumes {
		fsVol, err := data.Volumes.Filesystem(id)
		if err != nil {
			return nil, "", err
		}
		blockVol, err := data.Volumes.Block(id)
		if err != nil {
			return nil, "", err
		}
		record, err := data.State.Records.ChildFile(id)
		if err != nil {
			return nil, "", err
		}
		intent, err := data.State.Operations.ChildFile(id)
		if err != nil {
			return nil, "", err
		}
		for _, p := range []string{fsVol.FullPath(), blockVol.FullPath(), record.FullPath(), intent.FullPath()} {
			if _, err := os.Lstat(p); err == nil {
				left = append(left, "file "+p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return left, "", err
			}
		}
	}
	quotas, limits, err := s.quotaLeftovers(&data)
	if err != nil {
		return left, "", err
	}
	left = append(left, quotas...)
	bindings, err := loop.Bindings()
	if err != nil {
		return left, "", err
	}
	for _, b := range bindings {
		if s.names(b.Backing) {
			left = append(left, fmt.Sprintf("loop device %s on %s", b.Path(), b.Backing))
		}
	}
	mounts, err := s.mounts()
	if err != nil {
		return left, "", err
	}
	for _, m := range mounts {
		if s.names(m.MountPoint) || s.names(m.Root) {
			left = append(left, "mount "+m.MountPoint+" of "+m.Root)
		}
	}
	err = filepath.WalkDir(s.kubelet, func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // removed while walking
		case err != nil:
			return err
		case !s.names(p):
			return nil
		case d.Type()&fs.ModeDevice != 0:
			left = append(left, "device node "+p)
		default:
			left = append(left, "kubelet file "+p)
		}
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return left, limits, err
}

// quotaLeftovers lists the project ID claims owned by the volumes, and
// quota limits in the volumes' project ID range on an ID that no volume
// directory on the node carries (whoever left them: limits outlive their
// files, so a limit nobody carries is a leak). limits says whether the
// filesystem's quota records could be read: "checked", or why not (a
// filesystem without project quotas, as on the host cluster).
func (s leftoversSpec) quotaLeftovers(data *localstorage.DataDirectory) (left []string, limits string, err error) {
	ids, err := fsquota.NewIDAllocator(data.State.Projects.FullPath(), volume.FirstProjectID, volume.LastProjectID)
	if err != nil {
		return nil, "", err
	}
	claims, err := ids.Claimed()
	if err != nil {
		return nil, "", err
	}
	for id, owner := range claims {
		if slices.Contains(s.volumes, owner) {
			left = append(left, fmt.Sprintf("project ID claim %d of %s", id, owner))
		}
	}
	if err := fsquota.Probe(data.Volumes.FullPath()); err != nil {
		return left, fmt.Sprintf("not checked (%v)", err), nil
	}
	carried := map[uint32]bool{}
	entries, err := data.Volumes.List()
	if err != nil {
		return nil, "", err
	}
	for _, e := range entries {
		if e.Kind != localstorage.VolumeFilesystem {
			continue
		}
		q, err := fsquota.GetQuota(filepath.Join(data.Volumes.FullPath(), e.Name))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fsquota.ErrNoQuota) {
			continue // deleted meanwhile, or being created
		}
		if err != nil {
			return nil, "", err
		}
		carried[q.ProjectID] = true
	}
	all, err := fsquota.Projects(data.Volumes.FullPath())
	if err != nil {
		return nil, "", err
	}
	for id, q := range all {
		if id >= volume.FirstProjectID && id <= volume.LastProjectID && q.Limits != (fsquota.Limits{}) && !carried[id] {
			left = append(left, fmt.Sprintf("quota on project %d limited to %d bytes, carried by no volume", id, q.Limits.Bytes))
		}
	}
	return left, "checked", nil
}

// mounts reads the mount table of s.mountsOf's mount namespace.
func (s leftoversSpec) mounts() ([]mountinfo.Mount, error) {
	if s.mountsOf == "" {
		return mountinfo.Read()
	}
	pid, err := pidOf(s.mountsOf)
	if err != nil {
		return nil, err
	}
	return mountinfo.ReadPID(pid)
}

// pidOf returns the PID of the process whose command name is comm, from
// the /proc of the node's PID namespace (the pod runs with hostPID).
// Mounts are read from the kubelet's mount namespace: the one where the
// kubelet and the CSI plugin mount pods' volumes.
func pidOf(comm string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(b)) == comm {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process in /proc (does the pod run with hostPID?)", comm)
}

// names reports whether p mentions a volume or a key.
func (s leftoversSpec) names(p string) bool {
	for _, k := range slices.Concat(s.volumes, s.keys) {
		if strings.Contains(p, k) {
			return true
		}
	}
	return false
}
