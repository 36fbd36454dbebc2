package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"source.plinth.dev/bench/fio"
)

// TestFloorPodsDifferFromVolumePodsOnlyInVolume: an in-pod floor is a fair
// baseline only if its pod is the volume's pod but for the volume. Each
// floor's spec, with its volume and name put back to the volume's, is the
// volume pod's spec; and the floor's volume is a hostPath of the node's
// path, of a type that must exist.
func TestFloorPodsDifferFromVolumePodsOnlyInVolume(t *testing.T) {
	b := &bench{floorDir: "/data/datapath-floor", image: "/data/volumes/pvc-x.img", volFile: "/data/volumes/pvc-y/fio.dat"}
	for _, tc := range []struct {
		floor, volume string
		path          string
		typ           corev1.HostPathType
	}{
		{podDir, fsRunc, b.floorDir, corev1.HostPathDirectory},
		{podVolFile, fsRunc, b.volFile, corev1.HostPathFile},
		{podImage, blockRunc, b.image, corev1.HostPathFile},
	} {
		fp, err := b.pod(tc.floor, "r1")
		if err != nil {
			t.Fatal(err)
		}
		vp, err := b.pod(tc.volume, "r1")
		if err != nil {
			t.Fatal(err)
		}
		f, v := fp.spec(roundArgs(fp.target(), fileSize, timing{})), vp.spec(roundArgs(vp.target(), fileSize, timing{}))
		hp := f.Spec.Volumes[0].HostPath
		if hp == nil || hp.Path != tc.path || hp.Type == nil || *hp.Type != tc.typ {
			t.Errorf("%s: volume %+v, want hostPath %s of type %s", tc.floor, f.Spec.Volumes[0].VolumeSource, tc.path, tc.typ)
		}
		// The floor's fio opens its own path; the rest of each
		// container must be the volume's.
		f.Name, f.Spec.Volumes = v.Name, v.Spec.Volumes
		fc, vc := &f.Spec.Containers[0], &v.Spec.Containers[0]
		fc.Args, fc.VolumeMounts, fc.VolumeDevices = vc.Args, vc.VolumeMounts, vc.VolumeDevices
		if !reflect.DeepEqual(f, v) {
			t.Errorf("%s differs from %s in more than its volume:\n%+v\n%+v", tc.floor, tc.volume, f, v)
		}
	}
}

// TestFloorImagePodOpensTheImageFile: the image floor's fio opens the
// image file itself, mounted as a file at the path fio is given.
func TestFloorImagePodOpensTheImageFile(t *testing.T) {
	b := &bench{floorDir: "/d", image: "/data/volumes/pvc-x.img"}
	p, err := b.pod(podImage, "r1")
	if err != nil {
		t.Fatal(err)
	}
	c := p.spec(roundArgs(p.target(), fileSize, timing{})).Spec.Containers[0]
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != p.target() || len(c.VolumeDevices) != 0 {
		t.Errorf("mounts %+v, devices %+v: want the image file mounted at %s", c.VolumeMounts, c.VolumeDevices, p.target())
	}
	if !slices.Contains(c.Args, "--filename="+p.target()) || !slices.Contains(c.Args, "--direct=1") {
		t.Errorf("args %v: want fio on %s with direct I/O", c.Args, p.target())
	}
	if _, err := (&bench{floorDir: "/d"}).pod(podImage, "r1"); err == nil {
		t.Error("the image floor's pod was made before the image was found")
	}
	if _, err := b.pod(nodeDir, "r1"); err == nil {
		t.Errorf("%s, the node's own fio, was given a pod", nodeDir)
	}
}

// TestVerdictsJudgeVolumesAgainstTheInPodFloor: the goal is read against
// the in-pod floor, and the node's fio, shown beside it, gets no verdict.
func TestVerdictsJudgeVolumesAgainstTheInPodFloor(t *testing.T) {
	k := kinds[0]
	all := runs{}
	set := func(target string, iops float64) {
		all[target] = map[string][]fio.Measure{}
		for _, w := range workloads {
			all[target][w.Name] = []fio.Measure{{IOPS: iops}, {IOPS: iops}, {IOPS: iops}}
		}
	}
	// The volume is 0.98 of the in-pod floor, 0.88 of the node's.
	set(nodeDir, 1000)
	set(podDir, 900)
	set(fsRunc, 882)
	set(fsGVisor, 450)
	got := verdicts(all, k, metrics[0])
	if len(got) != len(k.series) {
		t.Fatalf("verdicts %q: want one per volume series %v", got, k.series)
	}
	if !strings.HasPrefix(got[0], "Goal met: "+fsRunc) {
		t.Errorf("verdict %q: want %s's goal met against %s", got[0], fsRunc, podDir)
	}
	if !strings.HasPrefix(got[1], "Goal NOT met: "+fsGVisor) || !strings.Contains(got[1], "0.500") {
		t.Errorf("verdict %q: want %s at 0.500 of %s", got[1], fsGVisor, podDir)
	}
	for _, v := range got {
		if strings.Contains(v, nodeDir) {
			t.Errorf("verdict %q names the node's floor", v)
		}
	}
}
