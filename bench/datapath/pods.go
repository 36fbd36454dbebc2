package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"source.plinth.dev/bench/cluster"
	"source.plinth.dev/node/kubernetes/names"
	"source.plinth.dev/test/images"
	"source.plinth.dev/test/launch"
)

const (
	namespace = metav1.NamespaceDefault
	// label marks the benchmark's pods and claims.
	label = "bench.plinth.dev/datapath"
	// The claims: one filesystem claim, run under runc and gVisor in
	// turn (the same file, so the same extents, under both), and one
	// block claim.
	fsClaim    = "fio-fs"
	blockClaim = "fio-block"
	// mountPath is where a pod mounts the filesystem claim.
	mountPath = "/data"
	// podTimeout bounds one fio pod, from creation to its end: a round
	// is 6 jobs of a few seconds, a fill writes 1 GiB.
	podTimeout = 5 * time.Minute
)

// createClaim makes a claim of Plinth's default StorageClass and waits
// until it is Bound: the class binds on first consumer, so the first pod
// using it places it.
func createClaim(ctx context.Context, c kubernetes.Interface, name string, mode corev1.PersistentVolumeMode, size int64) error {
	class := names.StorageClassName
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{label: "true"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:       &mode,
			StorageClassName: &class,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: *resource.NewQuantity(size, resource.BinarySI),
			}},
		},
	}
	if _, err := c.CoreV1().PersistentVolumeClaims(namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating claim %s: %w", name, err)
	}
	return nil
}

// podRun is one fio pod: what it mounts and how, and its runtime. Every
// pod of the benchmark, floor or volume, has the same image, resources
// and container; only the volume and the runtime differ
// (TestFloorPodsDifferFromVolumePodsOnlyInVolume).
type podRun struct {
	name string
	// source is the pod's one volume: a claim, or for an in-pod floor a
	// hostPath on the data filesystem.
	source corev1.VolumeSource
	// block says the volume is a raw block claim (volumeDevices), opened
	// at blockPath; otherwise it is mounted at mountPath.
	block bool
	// file says the hostPath is the file fio opens, mounted at
	// mountPath/fileName; otherwise a directory that holds fileName.
	file bool
	rt   launch.Runtime
}

// claimSource is a volume on claim name.
func claimSource(name string) corev1.VolumeSource {
	return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}
}

// hostSource is a hostPath volume on path, which must exist as a
// directory or a file (typ): an in-pod floor never creates what it reads.
func hostSource(path string, typ corev1.HostPathType) corev1.VolumeSource {
	return corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &typ}}
}

// target is the path fio opens inside the pod.
func (p podRun) target() string {
	if p.block {
		return blockPath
	}
	return mountPath + "/" + fileName
}

// spec is p's pod running fio with args. A CPU's request: a BestEffort
// pod's cgroup has 2 CPU shares against the 1024 of the node's fio, and
// on a shared machine its fio would wait for the CPU, not for its volume.
func (p podRun) spec(args []string) *corev1.Pod {
	grace := int64(1)
	ctr := corev1.Container{Name: "fio", Image: images.FioRef, ImagePullPolicy: corev1.PullNever, Args: args,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("1"),
			corev1.ResourceMemory: resource.MustParse("128Mi"),
		}}}
	switch {
	case p.block:
		ctr.VolumeDevices = []corev1.VolumeDevice{{Name: "data", DevicePath: blockPath}}
	case p.file:
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: p.target()}}
	default:
		ctr.VolumeMounts = []corev1.VolumeMount{{Name: "data", MountPath: mountPath}}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Labels: map[string]string{label: "true"}},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			RuntimeClassName:              p.rt.RuntimeClassName,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{ctr},
			Volumes:                       []corev1.Volume{{Name: "data", VolumeSource: p.source}},
		},
	}
}

// runPod runs pod until it ends, returns its output (its container's
// log) and deletes it, waiting until it is gone, so that its
// unpublication is over before anything else runs.
func runPod(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) ([]byte, error) {
	out, _, err := cluster.RunPod(ctx, c, pod, podTimeout)
	return out, err
}

// blockImage finds the image file of the block claim's volume on node's
// data filesystem.
func blockImage(ctx context.Context, c kubernetes.Interface, n node) (string, error) {
	handle, files, err := volumeFiles(ctx, c, n, blockClaim)
	if err != nil {
		return "", err
	}
	return pickImage(files, handle, fileSize)
}

// volumeFile finds fio's file in the filesystem claim's volume on node's
// data filesystem.
func volumeFile(ctx context.Context, c kubernetes.Interface, n node) (string, error) {
	handle, files, err := volumeFiles(ctx, c, n, fsClaim)
	if err != nil {
		return "", err
	}
	return pickVolumeFile(files, handle, fileSize)
}

// volumeFiles reads the handle of claim's volume and lists the files on
// node's data filesystem whose path holds it.
func volumeFiles(ctx context.Context, c kubernetes.Interface, n node, claim string) (string, []nodeFile, error) {
	pvc, err := c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", nil, fmt.Errorf("reading claim %s: %w", claim, err)
	}
	pv, err := c.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil || pv.Spec.CSI == nil {
		return "", nil, fmt.Errorf("reading the CSI volume of claim %s: %v", claim, err)
	}
	handle := pv.Spec.CSI.VolumeHandle
	files, err := n.files(ctx, handle)
	return handle, files, err
}

// deleteClaims deletes the benchmark's claims and waits until their PVs
// are gone: the node has then unpublished and removed the volumes, and
// the cluster's teardown finds no loop device of theirs.
func deleteClaims(ctx context.Context, c kubernetes.Interface) error {
	var pvs []string
	for _, name := range []string{fsClaim, blockClaim} {
		pvc, err := c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading claim %s: %w", name, err)
		}
		if pvc.Spec.VolumeName != "" {
			pvs = append(pvs, pvc.Spec.VolumeName)
		}
		if err := c.CoreV1().PersistentVolumeClaims(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("deleting claim %s: %w", name, err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, pv := range pvs {
			if _, err := c.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for PVs %v to be deleted: %w", pvs, err)
	}
	return nil
}
