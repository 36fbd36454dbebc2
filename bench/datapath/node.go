package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/fio"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/nodevm"
)

// node is where the benchmark runs: which targets it has, and the work
// done on the node itself rather than in a measured pod (the floors'
// directory, finding the block volume's image, the node's own fio).
type node interface {
	// name is the node's name in results and notes ("" for test/launch's
	// node, the benchmark's first home, whose results keep their names).
	name() string
	// describe says what the node is, for the notes.
	describe() string
	// targets are the targets it runs, in each round's order; filled the
	// ones written in full before the rounds (every other target shares
	// its file with one of them).
	targets() []string
	filled() []string
	// makeFloorDir creates the floors' plain directory on the data
	// filesystem and returns its path on the node, and what removes it.
	makeFloorDir(ctx context.Context) (dir string, remove func(), err error)
	// files lists the regular files on the data filesystem whose path
	// holds handle (a volume's ID), for pickImage and pickVolumeFile.
	files(ctx context.Context, handle string) ([]nodeFile, error)
	// runFio runs the node's own fio, for the node floors.
	runFio(ctx context.Context, args []string) ([]byte, error)
	// caveats are what the notes must say about reading its figures.
	caveats() []string
}

// nodeFile is a file on the node and its size.
type nodeFile struct {
	path string
	size int64
}

// pickImage is the block volume's image among files: the one whose name
// holds the volume's handle and that is at least as large as the claim
// (the volume's state record names it too, so a second match is an error).
func pickImage(files []nodeFile, handle string, size int64) (string, error) {
	return pickOne(files, "the image of volume "+handle, size, func(path string) bool {
		return strings.Contains(filepath.Base(path), handle)
	})
}

// pickVolumeFile is fio's file in the filesystem volume among files: the
// one named fileName in a directory whose path holds the volume's handle,
// at least size bytes (a second match is an error).
func pickVolumeFile(files []nodeFile, handle string, size int64) (string, error) {
	return pickOne(files, fileName+" in volume "+handle, size, func(path string) bool {
		return filepath.Base(path) == fileName && strings.Contains(filepath.Dir(path), handle)
	})
}

// pickOne is the one file among files whose path matches and that holds
// at least size bytes; none or several are an error naming what.
func pickOne(files []nodeFile, what string, size int64, match func(path string) bool) (string, error) {
	var found []string
	for _, f := range files {
		if match(f.path) && f.size >= size {
			found = append(found, f.path)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("looking for %s: found %v among %v, want one file of at least %d bytes", what, found, files, size)
	}
	return found[0], nil
}

// hostNode is test/launch's node, `make run`'s: the data filesystem is a
// directory of this host, and fio runs here too.
type hostNode struct{ dataDir string }

func (hostNode) name() string { return "" }

func (hostNode) describe() string {
	return "Targets on test/launch's node (`make run`'s: real kubelet and containerd, plinth-node, data filesystem XFS on a loop device over a file on the host's disk, attached with direct I/O so that its I/O reaches the disk rather than the host's page cache)."
}

func (hostNode) targets() []string {
	return []string{nodeDir, podDir, fsRunc, fsGVisor, podVolFile, nodeImage, podImage, blockRunc}
}

func (hostNode) filled() []string { return []string{nodeDir, fsRunc, blockRunc} }

func (h hostNode) makeFloorDir(context.Context) (string, func(), error) {
	dir := filepath.Join(h.dataDir, floorSubdir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating the floor's directory: %w", err)
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

func (h hostNode) files(_ context.Context, handle string) ([]nodeFile, error) {
	var files []nodeFile
	err := filepath.WalkDir(h.dataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || !strings.Contains(path, handle) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, nodeFile{path: path, size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("looking for the files of volume %s: %w", handle, err)
	}
	return files, nil
}

func (hostNode) runFio(ctx context.Context, args []string) ([]byte, error) {
	return fio.RunHost(ctx, args)
}

func (hostNode) caveats() []string { return nil }

// vmNode is the VM node (test/nodevm): its data filesystem is on its
// virtio disk, out of this host's reach, so what the benchmark does on it
// a busybox pod does, with the data directory mounted (hostPath) at its
// own path. The node has no fio of its own (its image has none outside
// the pods' image), so no node floors: the in-pod floors are the goals'
// baselines anyway.
type vmNode struct{ client kubernetes.Interface }

func (vmNode) name() string { return "vm" }

func (vmNode) describe() string {
	return "Targets on the VM node (test/nodevm: the node image in qemu under TCG, no KVM, 2 vCPUs, 3 GiB; plinth-node as PID 1 supervising containerd and the kubelet; data filesystem XFS with project quotas on a virtio-blk disk, a sparse file on the host's disk, qemu's default cache=writeback). No node floors: the node runs no fio outside a pod."
}

func (vmNode) targets() []string {
	return []string{podDir, fsRunc, fsGVisor, podVolFile, podImage, blockRunc}
}

func (vmNode) filled() []string { return []string{podDir, fsRunc, blockRunc} }

// makeFloorDir leaves the directory behind: the VM node's data disk is
// the benchmark's own and goes with its work directory.
func (v vmNode) makeFloorDir(ctx context.Context) (string, func(), error) {
	dir := nodevm.DataDir + "/" + floorSubdir
	if _, err := runPod(ctx, v.client, shellPod("datapath-mkdir", "mkdir -p "+dir)); err != nil {
		return "", nil, fmt.Errorf("creating the floor's directory on the node: %w", err)
	}
	return dir, func() {}, nil
}

func (v vmNode) files(ctx context.Context, handle string) ([]nodeFile, error) {
	out, err := runPod(ctx, v.client, shellPod("datapath-find",
		// find's complaints (a containerd file gone mid-walk) are
		// not files; pickImage and pickVolumeFile fail when theirs is
		// not among them.
		fmt.Sprintf("find %s -xdev -type f -path '*%s*' -exec stat -c '%%s %%n' {} \\; 2>/dev/null; true", nodevm.DataDir, handle)))
	if err != nil {
		return nil, fmt.Errorf("looking for the files of volume %s on the node: %w", handle, err)
	}
	return parseSizes(out)
}

func (vmNode) runFio(context.Context, []string) ([]byte, error) {
	return nil, fmt.Errorf("the VM node runs no fio outside a pod")
}

// tcgCaveat is what TCG means for the VM node's figures.
const tcgCaveat = "TCG: qemu translates every guest instruction on the host's CPU, so fio itself, the guest's block layer, its loop driver and gVisor's sandbox run many times slower than on hardware, while the virtio disk's backing file is served through the host's page cache (cache=writeback). The absolute figures are the guest CPU's, far below any disk's, and say nothing about a real node; what counts is each volume's ratio to its in-pod floor on the same node in the same run. Even the ratios weigh per-request CPU work (a loop device's second pass through the block layer, gVisor's system calls) more heavily than hardware would."

func (vmNode) caveats() []string { return []string{tcgCaveat} }

// parseSizes reads stat's "SIZE PATH" lines.
func parseSizes(out []byte) ([]nodeFile, error) {
	var files []nodeFile
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" {
			continue
		}
		s, p, ok := strings.Cut(l, " ")
		n, err := strconv.ParseInt(s, 10, 64)
		if !ok || err != nil || !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("stat's line %q: want SIZE PATH", l)
		}
		files = append(files, nodeFile{path: p, size: n})
	}
	return files, nil
}

// shellPod runs script in busybox on the node with its data directory
// mounted at its own path: work on the node, not a measurement.
func shellPod(name, script string) *corev1.Pod {
	typ := corev1.HostPathDirectory
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "sh", Image: images.BusyboxRef, ImagePullPolicy: corev1.PullNever,
				Command:      []string{"sh", "-c", script},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: nodevm.DataDir}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: nodevm.DataDir, Type: &typ},
			}}},
		},
	}
}
